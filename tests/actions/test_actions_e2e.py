"""Privileged infrastructure actions end to end, through the commands a person and an
agent use (``sandbox action run``, ``sandbox approve``, the MCP server's
``run_action``), against a real OpenBao (``bao server -dev``), a real PostgreSQL
and podman with runsc.

Judged from the host, never from the action's own exit status: the tables as
PostgreSQL has them, the leases as OpenBao has them, the login roles in
``pg_roles``, the containers podman still knows, the audit trail, and every file
the run could have written a secret into.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import hvac
import hvac.exceptions
import pytest

from openbao_dev import ROOT_TOKEN, bao_dev_server
from postgres_dev import connect_openbao, postgres_server

pytestmark = pytest.mark.slow

PY = sys.executable
OWNER = "shop_owner"
BROKER_POLICY = """
path "database/config/*" { capabilities = ["read"] }
path "database/roles/action-*" { capabilities = ["create", "read", "update"] }
path "database/creds/action-*" { capabilities = ["read"] }
path "sys/leases/revoke" { capabilities = ["update"] }
path "sys/leases/lookup" { capabilities = ["update"] }
"""


# -- the servers and a repository that declares actions ---------------------------

@pytest.fixture(scope="module")
def pg():
    with postgres_server() as server:
        with server.connect(autocommit=True) as conn:
            conn.execute("CREATE DATABASE shop")
        with server.connect(dbname="shop", autocommit=True) as conn:
            for sql in (
                "REVOKE CONNECT ON DATABASE shop FROM PUBLIC",
                f"CREATE ROLE {OWNER} NOLOGIN",
                f"ALTER SCHEMA public OWNER TO {OWNER}",
                f"SET ROLE {OWNER}",
                "CREATE TABLE orders (id serial PRIMARY KEY, item text NOT NULL)",
                "INSERT INTO orders (item) VALUES ('apple'), ('pear')",
                "RESET ROLE",
            ):
                conn.execute(sql)
        yield server


@pytest.fixture(scope="module")
def bao(tmp_path_factory, pg):
    folder = tmp_path_factory.mktemp("bao")
    with bao_dev_server(folder) as address:
        root = hvac.Client(url=address, token=ROOT_TOKEN, timeout=10)
        connect_openbao(root, pg, "shop", "shop")
        root.sys.create_or_update_policy("broker", BROKER_POLICY)
        token = root.auth.token.create(policies=["broker"], ttl="2h")["auth"]["client_token"]
        yield {"address": address, "root": root, "token": token}


def table(name: str, pg: Any) -> bool:
    with pg.connect(dbname="shop") as conn:
        return conn.execute("SELECT to_regclass(%s) IS NOT NULL", (name,)).fetchone()[0]


def count(pg: Any, sql: str) -> int:
    with pg.connect(dbname="shop") as conn:
        return int(conn.execute(sql).fetchone()[0])


def declared(pg: Any, image: str) -> dict[str, Any]:
    db = {"engine": "database", "connection": "shop", "ttl": "2m"}
    sql = {"type": "object", "properties": {"sql": {"type": "string", "maxLength": 2000}},
           "required": ["sql"], "additionalProperties": False}
    psql = ["psql", "-X", "-v", "ON_ERROR_STOP=1", "-c", "{sql}"]
    base = {"image": image, "connect": [f"127.0.0.1:{pg.port}"], "limits": {"timeout": "60s"}}
    return {
        "orders": {**base, "description": "list the orders", "tier": "read",
                   "argv": ["psql", "-X", "-A", "-t", "-c", "SELECT item FROM orders ORDER BY id"],
                   "credential": db},
        # a read action whose fixed command writes: its credential must refuse it
        "sneaky-read": {**base, "description": "a read that writes", "tier": "read",
                        "argv": ["psql", "-X", "-v", "ON_ERROR_STOP=1",
                                 "-c", "SET default_transaction_read_only = off",
                                 "-c", "INSERT INTO orders (item) VALUES ('sneaky')"],
                        "credential": db},
        "migrate": {**base, "description": "a schema migration", "tier": "write",
                    "argv": psql, "params": sql, "plan": {"kind": "sql", "param": "sql"},
                    "credential": {**db, "owner": OWNER}},
        "drop": {**base, "description": "drop a table", "tier": "destructive",
                 "argv": psql, "params": sql, "plan": {"kind": "sql", "param": "sql"},
                 "credential": {**db, "owner": OWNER}},
        "hold": {**base, "description": "hold a credential a while", "tier": "read",
                 "argv": ["sleep", "60"], "credential": db},
        # prints only a digest of its own password: the test looks for the password
        "probe": {**base, "description": "digest of the credential", "tier": "read",
                  "argv": ["sh", "-c", 'cut -d: -f5 "$PGPASSFILE" | tr -d "\\n" | sha256sum'],
                  "credential": db},
    }


class Repo:
    def __init__(self, path: Path, home: Path) -> None:
        self.path, self.home = path, home
        self.env = {**{k: v for k, v in os.environ.items() if not k.startswith("PYTEST")},
                    "HOME": str(home)}

    def sandbox(self, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
        return subprocess.run([PY, "-I", "-m", "agent_sandbox", *args], capture_output=True,
                              text=True, env=self.env, timeout=timeout, check=False)

    def start(self, name: str, params: dict[str, Any] | None = None,
              wait: float = 120) -> subprocess.Popen[str]:
        return subprocess.Popen([PY, "-I", "-m", "agent_sandbox", "action", "run", name, "-C",
                                 str(self.path), "--params-json", json.dumps(params or {}),
                                 "--json", "--wait", str(wait)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=self.env)

    def run(self, name: str, params: dict[str, Any] | None = None,
            wait: float = 120) -> dict[str, Any]:
        proc = self.sandbox("action", "run", name, "-C", str(self.path), "--params-json",
                            json.dumps(params or {}), "--json", "--wait", str(wait))
        assert proc.stdout, proc.stderr
        return dict(json.loads(proc.stdout))

    def audit(self) -> list[dict[str, Any]]:
        try:
            text = (self.path / ".sandbox/audit/audit.jsonl").read_text()
        except FileNotFoundError:  # nothing recorded yet
            return []
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def story(self, rid: str) -> list[str]:
        return [r["event"] for r in self.audit() if r.get("request_id") == rid]

    def pending(self, timeout: float = 30) -> list[dict[str, Any]]:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            proc = self.sandbox("pending", str(self.path), "--json")
            items = json.loads(proc.stdout or "[]")
            if items:
                return list(items)
            time.sleep(0.2)
        raise AssertionError("no request is pending")


@pytest.fixture
def repo(tmp_path, pg, bao, gvisor_image) -> Repo:
    import yaml

    from agent_sandbox.actions.broker_config import write_config

    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    write_config(bao["address"], bao["token"], home=str(home))
    path = tmp_path / "repo"
    (path / ".sandbox").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    (path / ".sandbox/policy.yml").write_text(
        yaml.safe_dump({"version": 1, "actions": declared(pg, gvisor_image)}))
    r = Repo(path, home)
    proc = r.sandbox("init", str(path))
    assert proc.returncode == 0, proc.stderr
    return r


def lease_alive(bao: dict[str, Any], lease_id: str) -> bool:
    try:
        bao["root"].sys.read_lease(lease_id)
        return True
    except hvac.exceptions.InvalidRequest:
        return False


def generated_roles(pg: Any) -> int:
    return count(pg, "SELECT count(*) FROM pg_roles WHERE rolname LIKE 'v-%'")


def containers_of(rid: str) -> list[str]:
    out = subprocess.run(["podman", "ps", "-a", "-q", "--filter",
                          f"label=agent-sandbox.request={rid}"], capture_output=True, text=True,
                         check=False, env={**os.environ})
    return out.stdout.split()


# -- the tiers ------------------------------------------------------------------

def test_a_read_action_runs_at_once_in_gvisor_and_its_credential_is_gone_after(repo, bao, pg):
    res = repo.run("orders")
    assert res["status"] == "completed" and res["exit_code"] == 0, res
    assert res["stdout"].split() == ["apple", "pear"]
    assert res["runtime"] == "runsc" and res["revoked"] is True
    events = repo.story(res["request_id"])
    for ev in ("request", "decision", "credential_issued", "action_container",
               "credential_revoked", "completed"):
        assert ev in events, events
    assert "escalation" not in events
    assert not lease_alive(bao, res["lease_id"])   # OpenBao: revoked
    assert generated_roles(pg) == 0                  # PostgreSQL: the login role is gone
    assert containers_of(res["request_id"]) == []    # podman: the container is gone
    show = repo.sandbox("audit", "show", str(repo.path / ".sandbox/audit"), "--request",
                        res["request_id"], "--format", "json")
    told = [r["event"] for r in json.loads(show.stdout)]
    assert told == events                            # one request id tells the whole story
    ocsf = repo.sandbox("audit", "export", str(repo.path / ".sandbox/audit"))
    mine = [e for e in map(json.loads, ocsf.stdout.splitlines())
            if e.get("metadata", {}).get("correlation_uid") == res["request_id"]]
    assert len(mine) == len(events)                  # the SIEM export carries the same trail


def test_a_read_action_cannot_write_whatever_its_command_says(repo, pg):
    before = count(pg, "SELECT count(*) FROM orders")
    res = repo.run("sneaky-read")
    assert res["status"] == "completed" and res["exit_code"] != 0
    assert "permission denied for table orders" in res["stderr"], res  # the grant, not a mode
    assert count(pg, "SELECT count(*) FROM orders") == before


def test_a_write_action_runs_a_harmless_plan_and_escalates_a_destructive_one(repo, pg):
    res = repo.run("migrate", {"sql": "CREATE TABLE notes (id int, body text)"})
    assert res["status"] == "completed" and res["exit_code"] == 0, res
    assert table("notes", pg)
    # the same action, a plan that drops: the gate sends it to a human; nobody answers
    res = repo.run("migrate", {"sql": "drop  table /* tidy */ \"orders\""}, wait=0)
    assert res["status"] != "completed"
    events = repo.story(res["request_id"])
    assert "escalation" in events and "credential_issued" not in events
    decision = next(r for r in repo.audit()
                    if r.get("request_id") == res["request_id"] and r["event"] == "decision")
    assert decision["verdict"] == "escalate" and "DROP" in json.dumps(decision)
    assert table("orders", pg)


def test_a_destructive_action_waits_for_a_human_and_runs_once(repo, pg, bao):
    with pg.connect(dbname="shop", autocommit=True) as conn:
        conn.execute(f"SET ROLE {OWNER}")
        conn.execute("CREATE TABLE old_orders (id int)")
    call = repo.start("drop", {"sql": "DROP TABLE old_orders"})
    [item] = repo.pending()
    assert item["kind"] == "action" and item["params"]["argv"][-1] == "DROP TABLE old_orders"
    assert table("old_orders", pg)                   # nothing ran before the human
    refused = repo.sandbox("approve", str(repo.path), item["id"], "--always")
    assert refused.returncode != 0 and "one call at a time" in refused.stderr
    ok = repo.sandbox("approve", str(repo.path), item["id"])
    assert ok.returncode == 0, ok.stderr
    out, err = call.communicate(timeout=240)
    res = json.loads(out)
    assert res["status"] == "completed" and res["exit_code"] == 0, (res, err)
    assert not table("old_orders", pg)
    assert not lease_alive(bao, res["lease_id"]) and generated_roles(pg) == 0
    again = repo.sandbox("approve", str(repo.path), item["id"])
    assert again.returncode != 0                     # single use
    events = repo.story(item["id"])
    assert events.count("action_container") == 1 and "approval" in events


def test_an_approval_applies_to_its_own_plan_and_never_to_a_changed_action(repo, pg):
    with pg.connect(dbname="shop", autocommit=True) as conn:
        conn.execute(f"SET ROLE {OWNER}")
        conn.execute("CREATE TABLE keep_me (id int)")
        conn.execute("CREATE TABLE drop_me (id int)")
    keep = repo.start("drop", {"sql": "DROP TABLE keep_me"})
    first = repo.pending()
    drop = repo.start("drop", {"sql": "DROP TABLE drop_me"})
    end = time.monotonic() + 30
    while len(items := repo.pending()) < 2:
        assert time.monotonic() < end
        time.sleep(0.2)
    target = next(i for i in items if i["id"] != first[0]["id"])
    assert repo.sandbox("approve", str(repo.path), target["id"]).returncode == 0
    json.loads(drop.communicate(timeout=240)[0])
    assert not table("drop_me", pg) and table("keep_me", pg)
    # the operator changes the action while the other request waits: approving the
    # old request runs nothing (what would run is no longer what was asked)
    policy = repo.path / ".sandbox/policy.yml"
    policy.write_text(policy.read_text().replace("ON_ERROR_STOP=1", "ON_ERROR_STOP=0"))
    assert repo.sandbox("init", str(repo.path)).returncode == 0
    assert repo.sandbox("approve", str(repo.path), first[0]["id"]).returncode == 0
    res = json.loads(keep.communicate(timeout=240)[0])
    assert res["status"] != "completed" and "changed" in res["message"], res
    assert table("keep_me", pg)


def test_what_a_write_action_creates_never_gains_rights_beyond_the_owner(repo, pg):
    """A view over pg_authid made by one write run, handed on at revocation, must not
    let the next write run edit the role catalogue (the view's rights are its owner's,
    never the engine's superuser's). A view is code that stays, so the gate asks a
    human first; approved, the credential is still the boundary."""
    call = repo.start("migrate", {"sql": "CREATE VIEW role_list AS SELECT * FROM pg_authid"})
    [item] = repo.pending()
    assert item["params"]["argv"][-1].startswith("CREATE VIEW role_list")
    assert repo.sandbox("approve", str(repo.path), item["id"]).returncode == 0
    made = json.loads(call.communicate(timeout=240)[0])
    assert made["status"] == "completed", made
    res = repo.run("migrate", {"sql": "UPDATE role_list SET rolsuper = true, rolcanlogin = true "
                                      f"WHERE rolname = '{OWNER}'"})
    assert res["exit_code"] != 0, res
    with pg.connect(dbname="shop") as conn:
        assert conn.execute("SELECT rolsuper, rolcanlogin FROM pg_roles WHERE rolname = %s",
                            (OWNER,)).fetchone() == (False, False)
        owner = conn.execute("SELECT viewowner FROM pg_views WHERE viewname = 'role_list'"
                             ).fetchone()
        assert owner in (None, (OWNER,))           # gone, or the owner role's: never bao's
        conn.execute("DROP VIEW IF EXISTS role_list")
        conn.commit()


@pytest.mark.parametrize(("grant", "revoke", "why"), [
    (f"GRANT pg_read_server_files TO {OWNER}", f"REVOKE pg_read_server_files FROM {OWNER}",
     "powers beyond its objects"),
    (f"GRANT CREATE ON DATABASE shop TO {OWNER}", f"REVOKE CREATE ON DATABASE shop FROM {OWNER}",
     "may create schemas"),
    (f"ALTER DATABASE shop OWNER TO {OWNER}", "ALTER DATABASE shop OWNER TO admin",
     "owns the database"),
], ids=["server-role", "create-on-database", "database-owner"])
def test_an_owner_with_powers_is_refused_before_any_credential(repo, pg, bao, grant, revoke,
                                                               why):
    with pg.connect(dbname="shop", autocommit=True) as conn:
        conn.execute(grant)
    try:
        res = repo.run("migrate", {"sql": "CREATE TABLE t_refused (id int)"})
    finally:
        with pg.connect(dbname="shop", autocommit=True) as conn:
            conn.execute(revoke)
    assert res["status"] == "failed" and why in res["message"], res
    assert not table("t_refused", pg) and generated_roles(pg) == 0


# -- leases a killed runner left, secrets ----------------------------------------

def test_a_killed_runners_lease_and_container_are_gone_after_the_next_run(repo, bao, pg):
    call = repo.start("hold")
    end = time.monotonic() + 120
    issued = None
    while issued is None:
        assert time.monotonic() < end, "the credential was never issued"
        issued = next((r for r in repo.audit() if r["event"] == "credential_issued"
                       and "hold" in json.dumps(r.get("scope"))), None)
        time.sleep(0.2)
    rid = issued["request_id"]
    while not containers_of(rid):
        assert time.monotonic() < end, "the container never started"
        time.sleep(0.2)
    call.send_signal(signal.SIGKILL)
    call.wait()
    assert lease_alive(bao, issued["lease_id"])     # the control: it outlived its runner
    res = repo.run("orders")                          # the next run recovers
    assert res["status"] == "completed", res
    assert not lease_alive(bao, issued["lease_id"])
    assert generated_roles(pg) == 0
    assert containers_of(rid) == []


def _words(text: str) -> set[str]:
    return set(re.findall(r"[A-Za-z0-9_.\-]{12,}", text))


def test_no_secret_reaches_any_record(repo, tmp_path):
    res = repo.run("probe")
    assert res["status"] == "completed" and res["exit_code"] == 0, res
    digest = res["stdout"].split()[0]
    assert re.fullmatch(r"[0-9a-f]{64}", digest)
    seen: set[str] = _words(json.dumps(res))
    for folder in (repo.path / ".sandbox", repo.home):
        for path in folder.rglob("*"):
            if path.is_file() and not path.is_symlink():
                seen |= _words(path.read_bytes().decode("utf-8", "replace"))
    assert seen                                      # the records were read
    leaked = [w for w in seen if hashlib.sha256(w.encode()).hexdigest() == digest]
    assert leaked == []


# -- the agent's side: MCP -------------------------------------------------------

def test_the_mcp_server_lists_and_runs_actions(repo):
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    async def session() -> tuple[list[dict[str, Any]], str, str]:
        params = StdioServerParameters(command=PY, args=["-I", "-m", "agent_sandbox", "mcp",
                                                         str(repo.path)], env=repo.env)
        async with stdio_client(params) as (r, w), ClientSession(r, w) as s:
            await s.initialize()
            listed = json.loads((await s.call_tool("list_actions", {})).content[0].text)
            ran = (await s.call_tool("run_action", {"name": "orders"})).content[0].text
            bad = (await s.call_tool("run_action", {"name": "migrate",
                                                    "params": {"sql": 1}})).content[0].text
            return listed, ran, bad

    listed, ran, bad = asyncio.run(session())
    names = {a["name"] for a in listed}
    assert {"orders", "migrate", "drop"} <= names
    assert "token" not in json.dumps(listed)
    doc = json.loads(ran)
    assert doc["status"] == "completed" and doc["stdout"].split() == ["apple", "pear"]
    assert "refused" in bad and "sql" in bad


def test_an_agent_over_mcp_waits_for_the_human_then_reads_the_result(repo, pg):
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    with pg.connect(dbname="shop", autocommit=True) as conn:
        conn.execute(f"SET ROLE {OWNER}")
        conn.execute("CREATE TABLE via_mcp (id int)")

    async def session() -> tuple[str, str, str]:
        params = StdioServerParameters(command=PY, args=["-I", "-m", "agent_sandbox", "mcp",
                                                         str(repo.path)], env=repo.env)
        async with stdio_client(params) as (r, w), ClientSession(r, w) as s:
            await s.initialize()
            asked = (await s.call_tool("run_action", {
                "name": "drop", "params": {"sql": "DROP TABLE via_mcp"},
                "wait_seconds": 0})).content[0].text
            rid = re.search(r"request (\S+) ", asked).group(1)
            before = (await s.call_tool("check_request", {"request_id": rid})).content[0].text
            approved = await asyncio.to_thread(repo.sandbox, "approve", str(repo.path), rid)
            assert approved.returncode == 0, approved.stderr
            after = (await s.call_tool("check_request", {"request_id": rid,
                                                         "wait_seconds": 120})).content[0].text
            return asked, before, after

    asked, before, after = asyncio.run(session())
    assert "Waiting for a human" in asked and "still waiting" in before
    assert table("via_mcp", pg) is False, after
    assert "exit" in after or "completed" in after, after
