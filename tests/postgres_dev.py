"""A real PostgreSQL for tests: Debian's PostgreSQL server binaries (15 here), a
cluster made by ``initdb`` in a fresh temporary folder, listening on a free
127.0.0.1 port (and a unix socket in that folder), password authentication
(scram-sha-256) for every connection, removed when the block ends.

``initdb`` refuses to run as root: under root the cluster belongs to an
unprivileged account (Debian's ``postgres`` account, else ``nobody``), and the
server runs as that account; under any other account it runs as the caller.

Never listens beyond loopback, never touches a cluster of the host (no
``pg_ctlcluster``, no /var/lib/postgresql), never leaves the server running.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from openbao_dev import free_port


def _installed() -> Path:
    """Debian's server binaries: version 15 if present, else the newest."""
    versions = sorted((p for p in Path("/usr/lib/postgresql").glob("*/bin")
                       if p.parent.name.isdigit()), key=lambda p: int(p.parent.name))
    preferred = Path("/usr/lib/postgresql/15/bin")
    return preferred if preferred in versions or not versions else versions[-1]


BINARIES = _installed()
SUPERUSER = "admin"


@dataclass(frozen=True)
class PostgresServer:
    host: str
    port: int
    superuser: str
    password: str
    folder: Path

    def conninfo(self, user: str | None = None, password: str | None = None,
                 dbname: str = "postgres") -> str:
        from psycopg.conninfo import make_conninfo

        return make_conninfo(host=self.host, port=self.port, user=user or self.superuser,
                             password=self.password if password is None else password,
                             dbname=dbname, connect_timeout=5, sslmode="disable")

    def connect(self, user: str | None = None, password: str | None = None,
                dbname: str = "postgres", **kwargs: Any) -> Any:
        import psycopg

        return psycopg.connect(self.conninfo(user, password, dbname), **kwargs)


def _binaries() -> Path:
    env = os.environ.get("AGENT_SANDBOX_PG_BIN")
    found = Path(env) if env else BINARIES
    if not (found / "initdb").exists():
        pytest.fail(f"PostgreSQL server binaries are missing ({found}/initdb): install the "
                    "Debian package postgresql (scripts/bootstrap.sh does)")
    return found


def _account() -> pwd.struct_passwd | None:
    """The account the cluster runs as under root (None: the caller)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    pytest.fail("no unprivileged account (postgres or nobody) to run PostgreSQL as")


@contextlib.contextmanager
def postgres_server() -> Iterator[PostgresServer]:
    """Start a throwaway PostgreSQL; yield how to reach it."""
    bins = _binaries()
    account = _account()
    # the cluster's folder is outside pytest's (root-only) temporary tree so that
    # the unprivileged account can reach it
    folder = Path(tempfile.mkdtemp(prefix="agent-sandbox-pg-"))
    run_as: dict[str, Any] = {}
    if account is not None:
        os.chown(folder, account.pw_uid, account.pw_gid)
        run_as = {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}
    password = secrets.token_urlsafe(18)
    pwfile = folder / "superuser-password"
    pwfile.write_text(password + "\n")
    if account is not None:
        os.chown(pwfile, account.pw_uid, account.pw_gid)
    pwfile.chmod(0o600)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(folder),
           "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
    data = folder / "data"
    proc: subprocess.Popen[bytes] | None = None
    try:
        init = subprocess.run(
            [str(bins / "initdb"), "-D", str(data), "-U", SUPERUSER, f"--pwfile={pwfile}",
             "--auth=scram-sha-256", "--encoding=UTF8", "--locale=C.UTF-8", "--no-sync"],
            cwd=folder, env=env, capture_output=True, timeout=120, check=False, **run_as)
        if init.returncode != 0:
            pytest.fail(f"initdb failed: {(init.stdout + init.stderr).decode()[-2000:]}")
        pwfile.unlink()
        port = free_port()
        log = folder / "server.log"
        with open(log, "wb") as out:
            if account is not None:
                os.fchown(out.fileno(), account.pw_uid, account.pw_gid)
            proc = subprocess.Popen(
                [str(bins / "postgres"), "-D", str(data), "-p", str(port),
                 "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={folder}",
                 "-c", "fsync=off", "-c", "synchronous_commit=off",
                 "-c", "full_page_writes=off", "-c", "max_connections=40"],
                cwd=folder, env=env, stdout=out, stderr=subprocess.STDOUT, **run_as)
        server = PostgresServer("127.0.0.1", port, SUPERUSER, password, folder)
        _wait_until_up(server, proc, log)
        yield server
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGINT)  # fast shutdown: ends every session
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(folder, ignore_errors=True)


def _wait_until_up(server: PostgresServer, proc: subprocess.Popen[bytes], log: Path,
                   timeout: float = 30.0) -> None:
    import psycopg

    deadline = time.monotonic() + timeout
    while True:
        try:
            with server.connect() as conn:
                conn.execute("SELECT 1")
                return
        except psycopg.OperationalError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"postgres did not start: {log.read_text(errors='replace')[-2000:]}")
        time.sleep(0.1)


def connect_openbao(client: Any, server: PostgresServer, connection: str, dbname: str) -> None:
    """OpenBao's database engine (mounted at ``database/`` if it is not yet) given
    ``connection``: ``server``'s database ``dbname`` as its superuser, scram
    passwords, roles named ``action-*`` only (the broker's)."""
    if "database/" not in client.sys.list_mounted_secrets_engines():
        client.sys.enable_secrets_engine("database", path="database")
    client.adapter.post(f"/v1/database/config/{connection}", json={
        "plugin_name": "postgresql-database-plugin",
        "connection_url": "postgresql://{{username}}:{{password}}@127.0.0.1:"
                          f"{server.port}/{dbname}?sslmode=disable",
        "username": server.superuser, "password": server.password,
        "password_authentication": "scram-sha-256", "allowed_roles": ["action-*"]})
