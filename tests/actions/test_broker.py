"""The credential broker against a real OpenBao (``bao server -dev``) and a real
PostgreSQL 15 (``initdb`` in a temporary folder, run as an unprivileged
account, loopback only): each tier's grants are enforced by PostgreSQL itself
(through ``psql`` and the service and password files the broker hands out),
revocation is proven by a failed login and a role gone from ``pg_roles``, a
runner killed with SIGKILL leaves a lease the next broker revokes, a child
token carries only its policies and dies with its revocation, and no secret
reaches the journal, a repr or a log line.

The Kubernetes engine is tested up to the API boundary only: no Kubernetes API
server exists on this machine, so OpenBao receives the broker's request (seen
in OpenBao's own audit log) for a role the cluster renderer writes, and fails
where it would call the cluster; the broker reports that and keeps nothing.
"""

from __future__ import annotations

import copy
import json
import logging
import pickle
import signal
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import hvac
import hvac.exceptions
import pytest

from agent_sandbox import vault
from agent_sandbox.actions import pg_role
from agent_sandbox.actions.broker import (
    Broker,
    BrokerError,
    BrokerUnavailable,
    CredentialIssueError,
    CredentialRevokeError,
)
from agent_sandbox.actions.credential import CREDENTIAL_DIR, Credential, database_files
from agent_sandbox.actions.lease_journal import JournalError, LeaseJournal
from agent_sandbox.errors import SandboxError
from agent_sandbox.render.cluster import vault_plan
from agent_sandbox.spec.actions import Action, Tier
from agent_sandbox.spec.models import Spec
from openbao_dev import ROOT_TOKEN, bao_dev_server, free_port, stand_in_kubernetes_config
from postgres_dev import BINARIES, connect_openbao, postgres_server

REPO = Path(__file__).resolve().parents[2]
OWNER = "app_owner"
ENDPOINT = {"pg": "127.0.0.1:5432"}  # the test server's, once it runs


# -- servers -------------------------------------------------------------------

@pytest.fixture(scope="module")
def pg():
    with postgres_server() as server:
        ENDPOINT["pg"] = f"{server.host}:{server.port}"
        with server.connect(autocommit=True) as conn:
            conn.execute("CREATE DATABASE app")
        with server.connect(dbname="app", autocommit=True) as conn:
            for sql in (
                "REVOKE CONNECT ON DATABASE app FROM PUBLIC",
                f"CREATE ROLE {OWNER} NOLOGIN",
                f"CREATE SCHEMA shop AUTHORIZATION {OWNER}",
                f"SET ROLE {OWNER}",
                "CREATE TABLE shop.orders (id serial PRIMARY KEY, item text NOT NULL)",
                "INSERT INTO shop.orders (item) VALUES ('apple'), ('pear')",
                "RESET ROLE",
            ):
                conn.execute(sql)
        yield server


@pytest.fixture(scope="module")
def bao(tmp_path_factory, pg):
    folder = tmp_path_factory.mktemp("bao")
    # OpenBao's own record of every request it receives, values in clear
    audit = (f'audit "file" "requests" {{\n  options {{\n    file_path = "{folder}/audit.log"\n'
             '    log_raw = "true"\n  }\n}\n')
    with bao_dev_server(folder, config=audit) as address:
        c = hvac.Client(url=address, token=ROOT_TOKEN, timeout=10)
        connect_openbao(c, pg, "app", "app")
        yield {"address": address, "audit": folder / "audit.log"}


@pytest.fixture
def root(bao) -> hvac.Client:
    return hvac.Client(url=bao["address"], token=ROOT_TOKEN, timeout=10)


@pytest.fixture
def journal(tmp_path) -> Path:
    return tmp_path / "leases"


@pytest.fixture
def broker(root, journal) -> Broker:
    return Broker(root, str(journal))


def db_action(tier: str, ttl: str = "5m", **credential: Any) -> Action:
    return Action.model_validate({
        "description": f"a {tier} action", "tier": tier,
        "image": "localhost/agent-sandbox-base:bookworm", "argv": ["psql"],
        "connect": [ENDPOINT["pg"]],
        "credential": {"engine": "database", "connection": "app", "database_schema": "shop",
                       "owner": OWNER, "ttl": ttl, **credential}})


# -- what the action's container would do with the files ------------------------

def stage(cred: Credential, folder: Path) -> dict[str, str]:
    """The credential's files as the runner mounts them (0600), and its env with
    the mount point moved to ``folder``."""
    folder.mkdir(mode=0o700, exist_ok=True)
    for rel, data in cred.files.items():
        path = folder / rel
        path.write_bytes(data)
        path.chmod(0o600)
    return {k: v.replace(CREDENTIAL_DIR, str(folder)) for k, v in cred.env.items()}


def psql(env: dict[str, str], *sql: str) -> subprocess.CompletedProcess[str]:
    """``psql`` as the action runs it: no arguments but the SQL (one transaction
    per element); where and as whom come from the credential's files."""
    commands = [arg for one in sql for arg in ("-c", one)]
    return subprocess.run(
        [str(BINARIES / "psql"), "-X", "-At", "-v", "ON_ERROR_STOP=1", *commands],
        env={"PATH": "/usr/bin:/bin", "PGCONNECT_TIMEOUT": "5", **env},
        capture_output=True, text=True, timeout=60, check=False)


def roles(pg) -> set[str]:
    with pg.connect(dbname="app") as conn:
        return {r[0] for r in conn.execute("SELECT rolname FROM pg_roles WHERE rolname LIKE 'v-%'")}


def user_of(cred: Credential) -> str:
    conf = cred.files["pg_service.conf"].decode()
    return next(line.split("=", 1)[1] for line in conf.splitlines() if line.startswith("user="))


def password_of(cred: Credential) -> str:
    return cred.files["pgpass"].decode().strip().rsplit(":", 1)[1]


def lease_gone(root: hvac.Client, lease_id: str) -> bool:
    try:
        root.adapter.put("/v1/sys/leases/lookup", json={"lease_id": lease_id})
    except hvac.exceptions.InvalidRequest:
        return True
    return False


# -- database: each tier's grants, enforced by PostgreSQL ------------------------

def test_read_credential_selects_and_cannot_insert_or_create(broker, root, pg, tmp_path,
                                                             journal):
    cred = broker.issue("orders-read", db_action("read"), "req-read")
    env = stage(cred, tmp_path / "cred")
    try:
        out = psql(env, "SELECT item FROM shop.orders ORDER BY id")
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == ["apple", "pear"]
        ins = psql(env, "INSERT INTO shop.orders (item) VALUES ('plum')")
        assert ins.returncode != 0 and "read-only transaction" in ins.stderr
        # not only the read-only default: the grant itself is missing
        ins = psql(env, "BEGIN READ WRITE; INSERT INTO shop.orders (item) VALUES ('plum'); "
                        "COMMIT")
        assert ins.returncode != 0 and "permission denied for table orders" in ins.stderr
        create = psql(env, "BEGIN READ WRITE; CREATE TABLE shop.mine (x int); COMMIT")
        assert create.returncode != 0 and "permission denied for schema shop" in create.stderr
        assert len(LeaseJournal(str(journal)).entries()) == 1
    finally:
        broker.revoke(cred)
    assert psql(env, "SELECT 1").returncode != 0


def test_write_credential_inserts_and_creates_but_cannot_drop_the_owners_table(
        broker, pg, tmp_path):
    cred = broker.issue("orders-migrate", db_action("write"), "req-write")
    env = stage(cred, tmp_path / "cred")
    try:
        out = psql(env, "INSERT INTO shop.orders (item) VALUES ('plum'); "
                        "CREATE TABLE shop.migrated (id int); "
                        "ALTER TABLE shop.migrated ADD COLUMN note text")
        assert out.returncode == 0, out.stderr
        drop = psql(env, "DROP TABLE shop.orders")
        assert drop.returncode != 0 and "must be owner of table orders" in drop.stderr
        trunc = psql(env, "TRUNCATE shop.orders")
        assert trunc.returncode != 0 and "permission denied" in trunc.stderr
    finally:
        broker.revoke(cred)
    with pg.connect(dbname="app") as conn:
        owner = conn.execute("SELECT tableowner FROM pg_tables WHERE schemaname = 'shop' "
                             "AND tablename = 'migrated'").fetchone()
        count = conn.execute("SELECT count(*) FROM shop.orders WHERE item = 'plum'").fetchone()
    assert owner == (OWNER,)  # what the migration made outlives its credential
    assert count == (1,)
    assert user_of(cred) not in roles(pg)


def test_destructive_credential_can_drop(broker, pg, tmp_path):
    with pg.connect(dbname="app", autocommit=True) as conn:
        conn.execute(f"SET ROLE {OWNER}")
        conn.execute("CREATE TABLE shop.scratch (x int)")
    cred = broker.issue("scratch-drop", db_action("destructive"), "req-drop")
    env = stage(cred, tmp_path / "cred")
    try:
        out = psql(env, "DROP TABLE shop.scratch")
        assert out.returncode == 0, out.stderr
    finally:
        broker.revoke(cred)
    with pg.connect(dbname="app") as conn:
        assert conn.execute("SELECT to_regclass('shop.scratch')").fetchone() == (None,)
    assert user_of(cred) not in roles(pg)


def test_ttl_is_the_actions_and_at_most_ten_minutes(broker, root, pg):
    cred = broker.issue("orders-ttl", db_action("read", ttl="10m"), "req-ttl")
    try:
        lease = root.adapter.put("/v1/sys/leases/lookup", json={"lease_id": cred.lease_id})
        assert 590 <= lease["data"]["ttl"] <= 600
        assert cred.ttl == 600 and cred.audit_fields()["ttl"] == 600
        role = root.adapter.get("/v1/database/roles/action-orders-ttl")["data"]
        assert role["default_ttl"] == role["max_ttl"] == 600
        with pg.connect(dbname="app") as conn:
            (valid,) = conn.execute("SELECT extract(epoch FROM rolvaliduntil - now()) "
                                    "FROM pg_roles WHERE rolname = %s",
                                    (user_of(cred),)).fetchone()
        assert 0 < valid <= 606  # OpenBao adds 5 s so the login outlives its lease
    finally:
        broker.revoke(cred)
    short = broker.issue("orders-ttl", db_action("read", ttl="30s"), "req-ttl2")
    try:
        lease = root.adapter.put("/v1/sys/leases/lookup", json={"lease_id": short.lease_id})
        assert lease["data"]["ttl"] <= 30
    finally:
        broker.revoke(short)


def test_revoked_credential_no_longer_logs_in_and_its_role_is_gone(broker, root, pg, tmp_path,
                                                                     journal):
    cred = broker.issue("orders-revoke", db_action("write"), "req-revoke")
    env = stage(cred, tmp_path / "cred")
    user = user_of(cred)
    assert psql(env, "SELECT 1").returncode == 0
    # a session still open when the run ends is ended by the revocation
    session = pg.connect(user=user, password=password_of(cred), dbname="app")
    session.execute("CREATE TEMP TABLE t (x int)")
    assert user in roles(pg)
    broker.revoke(cred)
    login = psql(env, "SELECT 1")
    assert login.returncode != 0 and "password authentication failed" in login.stderr
    assert user not in roles(pg)
    assert lease_gone(root, cred.lease_id)
    assert LeaseJournal(str(journal)).entries() == []
    import psycopg

    with pytest.raises(psycopg.OperationalError):
        session.execute("SELECT 1")
    session.close()


# -- the journal: a killed runner's lease is recovered, a live one is left ------

RUNNER = textwrap.dedent("""
    import json, sys, time
    import hvac
    from agent_sandbox.actions.broker import Broker
    from agent_sandbox.spec.actions import Action
    address, token, journal, action = sys.argv[1:5]
    broker = Broker(hvac.Client(url=address, token=token, timeout=10), journal)
    cred = broker.issue("orders-killed", Action.model_validate(json.loads(action)), "req-k")
    print(json.dumps({"lease": cred.lease_id}), flush=True)
    time.sleep(120)
""")


def _runner(bao, journal: Path) -> tuple[subprocess.Popen[str], str]:
    action = db_action("write").model_dump(mode="json")
    proc = subprocess.Popen([sys.executable, "-c", RUNNER, bao["address"], ROOT_TOKEN,
                             str(journal), json.dumps(action)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        proc.kill()
        pytest.fail(f"the runner did not issue: {proc.communicate(timeout=30)[1][-2000:]}")
    return proc, json.loads(line)["lease"]


def test_a_killed_runners_lease_is_revoked_by_the_next_broker(bao, root, pg, journal):
    proc, lease_id = _runner(bao, journal)
    try:
        user = root.adapter.put("/v1/sys/leases/lookup", json={"lease_id": lease_id})
        assert user["data"]["id"] == lease_id
        before = roles(pg)
        assert len(before) >= 1
        # the runner is alive: its lease is not another broker's to revoke
        assert Broker(root, str(journal)).recover() == []
        assert not lease_gone(root, lease_id)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        assert [e["lease_id"] for e in LeaseJournal(str(journal)).entries()] == [lease_id]
        recovered = Broker(root, str(journal)).recover()
        assert recovered == [lease_id]
        assert lease_gone(root, lease_id)
        assert LeaseJournal(str(journal)).entries() == []
        assert len(roles(pg)) == len(before) - 1
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()


def test_issue_recovers_first_and_leaves_live_leases_of_this_process(broker, root, journal):
    live = broker.issue("orders-live", db_action("read"), "req-live")
    other = Broker(root, str(journal))
    assert other.recover() == []  # held by `broker`, alive in this very process
    second = other.issue("orders-live", db_action("read"), "req-live2")
    assert not lease_gone(root, live.lease_id)
    broker.revoke(live)
    other.revoke(second)
    assert LeaseJournal(str(journal)).entries() == []


def test_a_failed_revoke_raises_and_keeps_the_lease_for_recovery(broker, root, journal):
    cred = broker.issue("orders-flaky", db_action("read"), "req-flaky")
    # the broker's token was revoked meanwhile, then OpenBao went away
    broker.client = hvac.Client(url=root.url, token="revoked-meanwhile", timeout=5)
    with pytest.raises(CredentialRevokeError, match=r"permission denied.*stays in the journal"):
        broker.revoke(cred)
    broker.client = hvac.Client(url=f"http://127.0.0.1:{free_port()}", token=ROOT_TOKEN,
                                timeout=2)
    with pytest.raises(BrokerUnavailable, match="stays in the journal") as err:
        broker.revoke(cred)
    assert isinstance(err.value, SandboxError)
    assert not lease_gone(root, cred.lease_id)
    assert Broker(root, str(journal)).recover() == [cred.lease_id]
    assert lease_gone(root, cred.lease_id)


# -- token engine --------------------------------------------------------------

def test_token_carries_only_its_policies_and_is_revoked(broker, root, journal):
    root.sys.create_or_update_acl_policy(
        name="action-reports", policy='path "secret/data/reports/*" { capabilities = ["read"] }')
    root.secrets.kv.v2.create_or_update_secret(path="reports/q1", secret={"total": "12"})
    root.secrets.kv.v2.create_or_update_secret(path="payroll/q1", secret={"total": "99"})
    action = Action.model_validate({
        "description": "read reports", "tier": "read", "image": "img", "argv": ["report"],
        "credential": {"engine": "token", "policies": ["action-reports"], "ttl": "2m"}})
    cred = broker.issue("reports", action, "req-token")
    token = cred.files["token"].decode().strip()
    looked = root.adapter.post("/v1/auth/token/lookup-accessor",
                               json={"accessor": cred.lease_id})["data"]
    assert looked["policies"] == ["action-reports"]
    assert looked["renewable"] is False and 0 < looked["ttl"] <= 120
    assert looked["explicit_max_ttl"] == 120
    assert cred.scope == {"engine": "token", "policies": ["action-reports"], "ttl": 120}
    scoped = hvac.Client(url=root.url, token=token, timeout=10)
    assert scoped.secrets.kv.v2.read_secret_version(
        path="reports/q1", raise_on_deleted_version=True)["data"]["data"] == {"total": "12"}
    with pytest.raises(hvac.exceptions.Forbidden):
        scoped.secrets.kv.v2.read_secret_version(path="payroll/q1",
                                                 raise_on_deleted_version=True)
    with pytest.raises(hvac.exceptions.Forbidden):  # no default policy: not even itself
        scoped.auth.token.lookup_self()
    journal_text = "".join(p.read_text() for p in journal.iterdir())
    assert cred.lease_id in journal_text and token not in journal_text
    broker.revoke(cred)
    with pytest.raises(hvac.exceptions.Forbidden):
        scoped.secrets.kv.v2.read_secret_version(path="reports/q1",
                                                 raise_on_deleted_version=True)
    with pytest.raises(hvac.exceptions.InvalidRequest):
        root.adapter.post("/v1/auth/token/lookup-accessor", json={"accessor": cred.lease_id})
    assert LeaseJournal(str(journal)).entries() == []


def test_a_token_beyond_the_brokers_own_policies_is_refused(root, journal):
    root.sys.create_or_update_acl_policy(
        name="broker-narrow", policy='path "auth/token/create" { capabilities = ["update"] }\n'
                                     'path "sys/leases/*" { capabilities = ["update"] }')
    narrow = root.auth.token.create(policies=["broker-narrow"], ttl="5m")["auth"]["client_token"]
    b = Broker(hvac.Client(url=root.url, token=narrow, timeout=10), str(journal))
    action = Action.model_validate({
        "description": "x", "tier": "read", "image": "img", "argv": ["x"],
        "credential": {"engine": "token", "policies": ["root"], "ttl": "1m"}})
    with pytest.raises(CredentialIssueError, match="create a child token"):
        b.issue("escalate", action, "req-esc")
    assert LeaseJournal(str(journal)).entries() == []


# -- kubernetes: up to the API boundary ------------------------------------------

def test_kubernetes_request_reaches_openbao_and_fails_at_the_missing_cluster(
        broker, root, bao, journal):
    """No Kubernetes API server exists here: the role is the one the cluster
    renderer writes, OpenBao receives the broker's request (its audit log shows
    path, namespace and TTL) and fails where it calls the cluster."""
    spec = Spec.model_validate({"cluster": {"enabled": True, "vault": {
        "kubernetes_mount": "kubernetes", "roles": [
            {"name": "deploy-staging", "namespaces": ["staging"], "ttl": "10m",
             "rules": [{"apiGroups": ["apps"], "resources": ["deployments"],
                        "verbs": ["get", "patch"]}]}]}}})
    vault.apply_plan(root, vault_plan(spec.cluster), engine_config=stand_in_kubernetes_config())

    def action(namespace: str) -> Action:
        return Action.model_validate({
            "description": "roll out", "tier": "write", "image": "img", "argv": ["kubectl"],
            "credential": {"engine": "kubernetes", "role": "deploy-staging",
                           "namespace": namespace, "ttl": "3m"}})

    with pytest.raises(CredentialIssueError) as err:
        broker.issue("rollout", action("staging"), "req-k8s")
    message = str(err.value)
    assert "kubernetes/creds/deploy-staging" in message and "127.0.0.1:6443" in message
    requests = [json.loads(line) for line in bao["audit"].read_text().splitlines()]
    sent = [r["request"] for r in requests if r.get("type") == "request"
            and r["request"]["path"] == "kubernetes/creds/deploy-staging"]
    assert sent and sent[-1]["operation"] == "update"
    assert sent[-1]["data"] == {"kubernetes_namespace": "staging", "ttl": "180s"}
    # the role's namespaces are enforced by OpenBao before any cluster call
    with pytest.raises(CredentialIssueError, match="prod"):
        broker.issue("rollout", action("prod"), "req-k8s2")
    assert LeaseJournal(str(journal)).entries() == []


# -- secrets stay secret -----------------------------------------------------------

def test_no_secret_in_repr_logs_journal_or_audit_fields(broker, journal, caplog):
    caplog.set_level(logging.DEBUG)  # every logger: the broker's, hvac's, urllib3's
    cred = broker.issue("orders-secret", db_action("read"), "req-secret")
    password = password_of(cred)
    assert len(password) >= 16
    logging.getLogger("test").info("credential %s / %r", cred, cred)
    shown = [repr(cred), str(cred), f"{cred}", f"{cred!r}", format(cred), f"{cred:>10}",
             json.dumps(cred.audit_fields()), json.dumps(cred.env), repr(cred.scope)]
    journal_text = "".join(p.read_text() for p in journal.iterdir())
    broker.revoke(cred)
    for text in [*shown, journal_text, caplog.text]:
        assert password not in text
    assert cred.lease_id in caplog.text and "[redacted]" in repr(cred)
    assert set(cred.audit_fields()) == {"lease_id", "engine", "scope", "ttl"}
    for leak in (pickle.dumps, copy.copy, copy.deepcopy):
        with pytest.raises(TypeError, match="secret"):
            leak(cred)
    with pytest.raises(AttributeError):
        cred.ttl = 1  # type: ignore[misc]
    for path in journal.iterdir():
        pytest.fail(f"left in the journal: {path}")
    assert oct(journal.stat().st_mode & 0o777) == "0o700"


def test_journal_entries_are_private(broker, journal):
    cred = broker.issue("orders-mode", db_action("read"), "req-mode")
    try:
        (entry,) = list(journal.iterdir())
        assert oct(entry.stat().st_mode & 0o777) == "0o600"
        assert oct(journal.stat().st_mode & 0o777) == "0o700"
        data = json.loads(entry.read_text())
        assert set(data) == {"engine", "lease_id", "action", "request_id", "issued_at", "ttl"}
        assert data["request_id"] == "req-mode"
    finally:
        broker.revoke(cred)


# -- bad inputs: a clear error, nothing issued --------------------------------------

@pytest.mark.parametrize(("credential", "tier", "message"), [
    ({"connection": "nowhere"}, "read", "connection 'nowhere' is not configured"),
    ({"database": "postgres"}, "read", "the OpenBao connection is to database app"),
    ({"owner": None}, "destructive", "needs credential.owner"),
    ({"owner": None}, "write", "needs credential.owner"),
    ({"database_schema": "nosuch"}, "read", 'schema "nosuch" does not exist'),
])
def test_bad_scope_is_refused_and_nothing_is_issued(broker, root, pg, journal, credential,
                                                    tier, message):
    before = roles(pg)
    if credential.get("owner", OWNER) is None:  # the spec refuses it: the broker must too
        with pytest.raises(ValueError, match="needs owner"):
            db_action(tier, **credential)
        action = db_action(tier)
        action.credential = action.credential.model_copy(update={"owner": None})
    else:
        action = db_action(tier, **credential)
    with pytest.raises(CredentialIssueError, match=message):
        broker.issue("orders-bad", action, "req-bad")
    assert roles(pg) == before
    assert LeaseJournal(str(journal)).entries() == []


def test_openbao_down_or_bad_token_is_a_clear_error(root, pg, journal):
    before = roles(pg)
    down = Broker(hvac.Client(url=f"http://127.0.0.1:{free_port()}", token=ROOT_TOKEN,
                              timeout=2), str(journal))
    with pytest.raises(BrokerUnavailable, match=r"cannot reach OpenBao at http://127\.0\.0\.1"):
        down.issue("orders-down", db_action("read"), "req-down")
    bad = Broker(hvac.Client(url=root.url, token="not-a-token", timeout=5), str(journal))
    with pytest.raises(CredentialIssueError, match="permission denied"):
        bad.issue("orders-bad-token", db_action("read"), "req-badtoken")
    assert roles(pg) == before
    assert LeaseJournal(str(journal)).entries() == []
    none = Action.model_validate({"description": "x", "tier": "read", "image": "img",
                                  "argv": ["x"]})
    with pytest.raises(BrokerError, match="declares no credential"):
        Broker(root, str(journal)).issue("plain", none, "req-none")


def test_a_journal_that_cannot_be_written_refuses_or_revokes_what_was_minted(
        root, pg, tmp_path, journal, monkeypatch):
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    before = roles(pg)
    with pytest.raises(SandboxError, match=r"lease journal .* Not a directory"):
        Broker(root, str(blocked)).issue("orders-nojournal", db_action("read"), "req-nj")
    assert roles(pg) == before
    # the disk fails between minting and journalling (the one failure injected
    # here): the lease just minted is revoked at once, and its user dropped
    minted: list[str] = []

    def full_disk(self, key, entry):
        minted.append(key)
        raise JournalError(f"cannot write to the lease journal {self.folder}: No space left")

    monkeypatch.setattr(LeaseJournal, "record", full_disk)
    with pytest.raises(CredentialIssueError, match=r"No space left.*just minted was revoked"):
        Broker(root, str(journal)).issue("orders-nojournal", db_action("read"), "req-nj2")
    assert minted and lease_gone(root, minted[0])
    assert roles(pg) == before


# -- latency -------------------------------------------------------------------

def test_issue_plus_revoke_latency(broker, capsys):
    action = db_action("write")
    times = []
    for i in range(7):
        start = time.perf_counter()
        cred = broker.issue("orders-bench", action, f"req-bench-{i}")
        broker.revoke(cred)
        times.append(time.perf_counter() - start)
    median = statistics.median(times)
    with capsys.disabled():
        print(f"\nbroker: database credential issue + revoke, median of {len(times)}: "
              f"{median * 1000:.1f} ms (goal 200 ms)")
    assert median < 1.0  # the goal is 200 ms; a loaded machine gets slack, not a pass for free


# -- pure parts ---------------------------------------------------------------------

@pytest.mark.parametrize(("url", "want"), [
    ("postgresql://{{username}}:{{password}}@db.internal:6432/app?sslmode=verify-full",
     pg_role.Target("db.internal", 6432, "app", "verify-full")),
    ("postgres://{{username}}:{{password}}@127.0.0.1/", pg_role.Target("127.0.0.1", 5432,
                                                                       None, None)),
    ("host=10.0.0.5 port=5433 dbname='my db' user={{username}}",
     pg_role.Target("10.0.0.5", 5433, "my db", None)),
])
def test_connection_target(url, want):
    assert pg_role.target(url) == want


@pytest.mark.parametrize("url", ["host=/var/run/postgresql dbname=app",
                                 "postgresql:///app?host=/tmp", "postgresql://a:1,b:2/app",
                                 "postgresql://h:99999/app"])
def test_connection_target_refuses_what_a_container_cannot_reach(url):
    with pytest.raises(pg_role.PgScopeError):
        pg_role.target(url)


def test_tier_statements_grant_only_the_tier():
    read = " ".join(pg_role.creation_statements(Tier.READ, database="app", schema="shop",
                                                owner=OWNER))
    write = " ".join(pg_role.creation_statements(Tier.WRITE, database="app", schema="shop",
                                                 owner=OWNER))
    destructive = " ".join(pg_role.creation_statements(Tier.DESTRUCTIVE, database="app",
                                                       schema="shop", owner=OWNER))
    assert "INSERT" not in read and "CREATE ON" not in read and OWNER not in read
    assert "INSERT" in write and "USAGE, CREATE ON SCHEMA" in write
    assert f'GRANT "{OWNER}"' not in write               # the owner is checked, not granted
    assert "holds powers beyond its objects" in write and "rolsuper" in write
    for tier in (Tier.WRITE, Tier.DESTRUCTIVE):         # what it creates goes to the owner
        with pytest.raises(pg_role.PgScopeError, match=r"needs credential\.owner"):
            pg_role.creation_statements(tier, database="app", schema="shop", owner=None)
    assert "REASSIGN" not in " ".join(pg_role.revocation_statements(None))
    assert "CURRENT_USER" not in " ".join(pg_role.revocation_statements(OWNER))
    assert f'GRANT "{OWNER}" TO "{{{{name}}}}"' in destructive
    with pytest.raises(pg_role.PgScopeError):
        pg_role.creation_statements(Tier.READ, database='a"; DROP', schema="s", owner=None)


def test_database_files_and_credential_shape():
    files, env = database_files(host="db:x", port=5432, dbname="app", user="v-1",
                                password="p:w\\d")
    assert files["pgpass"] == b"db\\:x:5432:app:v-1:p\\:w\\\\d\n"
    assert b"password" not in files["pg_service.conf"] and b"p:w" not in files["pg_service.conf"]
    assert env == {"PGSERVICEFILE": f"{CREDENTIAL_DIR}/pg_service.conf",
                   "PGPASSFILE": f"{CREDENTIAL_DIR}/pgpass", "PGSERVICE": "action"}
    with pytest.raises(ValueError, match="relative"):
        Credential(lease_id="l", engine="token", scope={}, ttl=1, files={"/etc/x": b""}, env={})
