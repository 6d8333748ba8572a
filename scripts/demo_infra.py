"""``make demo-infra``: privileged infrastructure actions, played end to end on
this machine. ``make demo-infra-down`` (``down``) removes everything it made.

It starts a PostgreSQL server and an OpenBao dev server on loopback
(``infra_lab``), points OpenBao's database engine at PostgreSQL, gives the action
broker a token of its own, and connects a demo repository that declares three
actions. Then, through the real ``sandbox`` commands:

1. ``orders-report`` (read) runs at once, with a read-only credential;
2. ``add-notes-table`` (write) shows its plan (a CREATE TABLE: nothing
   destructive) and runs;
3. ``drop-archive`` (destructive) stops at the gate, is approved in ``sandbox
   watch`` on a pseudo-terminal by this script, and runs.

Each runs in a new gVisor container with a credential minted for that run and
revoked after it. The table at the end comes from the audit trail, and the
closing ``live credentials: N`` is counted from OpenBao's leases and
PostgreSQL's roles themselves. Everything lives in one state folder and runs
with a home of its own, so nothing of this account's is touched.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "tests" / "approval"))

import infra_lab as lab  # noqa: E402

STATE = Path(os.environ.get("AGENT_SANDBOX_DEMO_INFRA_DIR", "/var/tmp/agent-sandbox-demo-infra"))
IMAGE = os.environ.get("AGENT_SANDBOX_ACTION_IMAGE", "localhost/agent-sandbox-base:bookworm")
PY = str(ROOT / ".venv" / "bin" / "python")
# the servers' folders and the lab's state (root token, passwords): hidden from the
# demo repository's sandbox by its policy (filesystem.deny_read)
LAB = STATE / "lab"


def say(text: str) -> None:
    print(f"demo-infra: {text}", flush=True)


def policy(pg_port: int) -> str:
    """The demo repository's layer: three actions against the shop database."""
    import yaml

    db = {"engine": "database", "mount": "database", "connection": lab.CONNECTION, "ttl": "2m"}
    sql = {"type": "object", "properties": {"sql": {"type": "string", "minLength": 1,
                                                    "maxLength": 4000}},
           "required": ["sql"], "additionalProperties": False}
    common = {"image": IMAGE, "connect": [f"127.0.0.1:{pg_port}"], "limits": {"timeout": "60s"}}
    run_sql = ["psql", "-X", "-v", "ON_ERROR_STOP=1", "-c", "{sql}"]
    actions = {
        "orders-report": {
            "description": "List the orders (a read-only query)", "tier": "read",
            "argv": ["psql", "-X", "-A", "-F", " | ", "-c",
                     "SELECT id, item, qty FROM orders ORDER BY id"],
            "credential": db, **common},
        "add-notes-table": {
            "description": "Apply a schema migration given as SQL", "tier": "write",
            "argv": run_sql, "params": sql, "plan": {"kind": "sql", "param": "sql"},
            "credential": {**db, "owner": lab.OWNER}, **common},
        "drop-archive": {
            "description": "Drop an archive table (destructive: a human approves every call)",
            "tier": "destructive", "argv": run_sql, "params": sql,
            "plan": {"kind": "sql", "param": "sql"},
            "credential": {**db, "owner": lab.OWNER}, **common},
    }
    return str(yaml.safe_dump({"version": 1, "filesystem": {"deny_read": [str(LAB)]},
                               "actions": actions}, sort_keys=False))


def env() -> dict[str, str]:
    home = STATE / "home"
    keep = {k: v for k, v in os.environ.items()
            if k in ("PATH", "LANG", "TERM", "CONTAINERS_CONF", "USER", "LOGNAME")}
    return {**keep, "HOME": str(home), "AGENT_SANDBOX_STATE_DIR": str(home / "state"),
            "AGENT_SANDBOX_AUDIT_DIR": str(home / "audit")}


def sandbox(*args: str, check: bool = True,
            timeout: float = 300) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([PY, "-I", "-m", "agent_sandbox", *args], capture_output=True,
                          text=True, env=env(), timeout=timeout, check=False)
    if check and proc.returncode != 0:
        raise SystemExit(f"demo-infra: sandbox {' '.join(args)} failed:\n{proc.stdout}"
                         f"{proc.stderr}")
    return proc


def run_action(repo: Path, name: str, params: dict[str, Any]) -> dict[str, Any]:
    proc = sandbox("action", "run", name, "-C", str(repo), "--params-json", json.dumps(params),
                   "--json", check=False)
    try:
        return dict(json.loads(proc.stdout))
    except ValueError:
        raise SystemExit(f"demo-infra: action {name} gave no result:\n{proc.stdout}"
                         f"{proc.stderr}") from None


def approve_in_watch(repo: Path, name: str, params: dict[str, Any]) -> dict[str, Any]:
    """Start the destructive action (it waits at the gate), approve it in ``sandbox
    watch`` on a pseudo-terminal as a human would, and return its result."""
    from watch_pty import Watch

    call = subprocess.Popen([PY, "-I", "-m", "agent_sandbox", "action", "run", name, "-C",
                             str(repo), "--params-json", json.dumps(params), "--json",
                             "--wait", "120"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env())
    watch = Watch(repo, python=PY, env=env())
    try:
        watch.expect("1 pending", timeout=60)
        watch.expect("DROP TABLE")
        say("drop-archive waits at the gate; sandbox watch shows it, approving with 'a'")
        watch.press("a")
        watch.expect("approved ", timeout=30)
    finally:
        watch.close()
    out, err = call.communicate(timeout=300)
    try:
        return dict(json.loads(out))
    except ValueError:
        raise SystemExit(f"demo-infra: drop-archive gave no result:\n{out}{err}") from None


def story(repo: Path, rid: str) -> dict[str, Any]:
    """What the audit trail says of one request."""
    proc = sandbox("audit", "show", str(repo / ".sandbox" / "audit"), "--request", rid,
                   "--format", "json")
    records = json.loads(proc.stdout or "[]")
    out: dict[str, Any] = {"events": [r.get("event") for r in records]}
    for r in records:
        ev = r.get("event")
        if ev == "decision":
            out["verdict"] = r.get("verdict")
        elif ev == "approval":
            out["approved_by"] = r.get("by")
        elif ev == "credential_issued":
            out["lease_id"] = r.get("lease_id")
        elif ev == "credential_revoked":
            out["revoked"] = True
        elif ev == "action_container":
            out["runtime"] = r.get("runtime")
            out["exit_code"] = r.get("exit_code")
    return out


def up() -> int:
    if os.geteuid() != 0:
        raise SystemExit("demo-infra: run as root (PostgreSQL's account, podman and gVisor)")
    if lab.load(LAB / "state.json"):
        say("a previous run is still up: removing it first")
        down()
    LAB.mkdir(parents=True, exist_ok=True)
    for folder in (STATE, LAB):  # PostgreSQL's account reaches its folder inside
        os.chmod(folder, 0o755)  # noqa: S103
    doc: dict[str, Any] = {}
    say("starting PostgreSQL (loopback, a folder of its own)")
    doc["pg"] = lab.start_postgres(LAB / "pg")
    lab.save(LAB / "state.json", doc)
    say("starting OpenBao (bao server -dev, loopback) with the database engine")
    doc["bao"] = lab.start_openbao(LAB / "bao")
    lab.save(LAB / "state.json", doc)
    lab.configure_database_engine(doc["bao"], doc["pg"])
    token = lab.broker_token(doc["bao"])
    home = STATE / "home"
    home.mkdir(mode=0o700, exist_ok=True)
    from agent_sandbox.actions.broker_config import write_config

    write_config(doc["bao"]["address"], token, home=str(home))
    repo = STATE / "repo"
    (repo / ".sandbox").mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / ".sandbox" / "policy.yml").write_text(policy(doc["pg"]["port"]))
    sandbox("init", str(repo))
    say("actions declared: " + ", ".join(
        a["name"] for a in json.loads(sandbox("action", "list", "-C", str(repo),
                                              "--json").stdout)))

    results: list[tuple[str, str, dict[str, Any]]] = []
    say("1. orders-report (read): runs at once")
    r1 = run_action(repo, "orders-report", {})
    print(textwrap.indent(str(r1.get("stdout", "")).rstrip(), "   | "))
    results.append(("orders-report", "read", r1))
    say("2. add-notes-table (write): its plan is a CREATE TABLE, so it runs")
    r2 = run_action(repo, "add-notes-table", {
        "sql": "CREATE TABLE order_notes (order_id int, note text)"})
    results.append(("add-notes-table", "write", r2))
    say("3. drop-archive (destructive): stops at the gate")
    r3 = approve_in_watch(repo, "drop-archive", {"sql": "DROP TABLE orders_archive"})
    results.append(("drop-archive", "destructive", r3))

    tables = lab.psql(doc["pg"], lab.DATABASE,
                      "SELECT string_agg(tablename, ',' ORDER BY tablename) FROM pg_tables "
                      "WHERE schemaname = 'public'").strip()
    print()
    print(f"{'action':<17} {'tier':<12} {'decision':<17} {'status':<10} {'runtime':<8} "
          f"{'revoked':<8} lease id")
    failed = False
    for name, tier, res in results:
        rid = str(res.get("request_id", ""))
        s = story(repo, rid) if rid else {}
        decision = (f"approved by {s['approved_by']}" if s.get("approved_by")
                    else {"allow": "allowed", "escalate": "escalated"}.get(
                        str(s.get("verdict")), str(s.get("verdict"))))
        lease = str(s.get("lease_id") or "-")
        print(f"{name:<17} {tier:<12} {decision:<17} {res.get('status', '?'):<10} "
              f"{s.get('runtime') or '-':<8} {'yes' if s.get('revoked') else 'NO':<8} {lease}")
        failed |= res.get("status") != "completed" or res.get("exit_code") != 0 \
            or not s.get("revoked") or s.get("runtime") != "runsc"
    print(f"\ntables now: {tables}")
    live = lab.live_credentials(doc["bao"], doc["pg"])
    n = live["openbao_leases"] + live["postgres_roles"]
    print(f"live credentials: {n} (OpenBao leases {live['openbao_leases']}, "
          f"PostgreSQL login roles {live['postgres_roles']})")
    print("\n`make demo-infra-down` removes PostgreSQL, OpenBao and this state folder.")
    return 1 if failed or n else 0


def down() -> int:
    from agent_sandbox.runtime.containers.service import stop_all

    doc = lab.load(LAB / "state.json")
    stop_all(str(STATE / "home" / "state" / "podman"))  # the actions' warm podman service
    if doc.get("bao"):
        lab.stop_openbao(doc["bao"])
    if doc.get("pg"):
        lab.stop_postgres(doc["pg"])
    shutil.rmtree(STATE, ignore_errors=True)
    say("removed")
    return 0


if __name__ == "__main__":
    started = time.monotonic()
    code = down() if sys.argv[1:] == ["down"] else up()
    if sys.argv[1:] != ["down"]:
        say(f"done in {time.monotonic() - started:.1f} s")
    sys.exit(code)
