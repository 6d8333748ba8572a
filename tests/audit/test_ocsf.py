"""OCSF export validated against the OCSF 1.7 class definitions shipped by pydantic-ocsf
(attribute types, required attributes, enums, class/category/type uids), plus a check
that every emitted attribute is defined by its class or object."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

import pydantic
import pytest

from agent_sandbox.audit import AuditLog
from agent_sandbox.audit.ocsf import OCSF_VERSION, to_ocsf
from agent_sandbox.audit.trail import Trail

events = pytest.importorskip("ocsf.v1_7_0.events")

MODELS = {
    1007: events.ProcessActivity,
    1001: events.FileActivity,
    4001: events.NetworkActivity,
    6003: events.APIActivity,
    7002: events.FileRemediationActivity,
}
RAW_NAMES = {1007: "process_activity", 1001: "file_activity", 4001: "network_activity",
             6003: "api_activity", 7002: "file_remediation_activity"}


def raw_schema() -> dict[str, Any]:
    spec = importlib.util.find_spec("ocsf")
    assert spec is not None and spec.submodule_search_locations
    path = Path(next(iter(spec.submodule_search_locations))) / "schemas" / "v1_7_0.json"
    return json.loads(path.read_text())


def activity_enum(raw: dict[str, Any], name: str) -> dict[str, Any]:
    """activity_id values of a class, merged along its ``extends`` chain (0/99 are inherited)."""
    enum: dict[str, Any] = {}
    while name:
        definition = raw["events"].get(name, {})
        enum = {**definition.get("attributes", {}).get("activity_id", {}).get("enum", {}), **enum}
        name = definition.get("extends", "")
    return enum


def _nested_model(annotation: Any) -> type[pydantic.BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _nested_model(arg)
        if found is not None:
            return found
    return None


def undefined_attributes(model: type[pydantic.BaseModel], data: Any, path: str = "") -> list[str]:
    """Attributes in ``data`` that the OCSF definition of ``model`` does not define."""
    if isinstance(data, list):
        return [x for i, item in enumerate(data)
                for x in undefined_attributes(model, item, f"{path}[{i}]")]
    if not isinstance(data, dict):
        return []
    fields = {(f.alias or name): f for name, f in model.model_fields.items()}
    bad: list[str] = []
    for key, value in data.items():
        if key not in fields:
            bad.append(f"{path}{key}")
            continue
        if key == "unmapped":
            continue  # OCSF's home for source fields without a mapping
        sub = _nested_model(fields[key].annotation)
        if sub is not None:
            bad += undefined_attributes(sub, value, f"{path}{key}.")
    return bad


def sample_records(tmp_path: Path) -> list[dict[str, Any]]:
    log = AuditLog(tmp_path / "audit", sync="none", checkpoint_every=None,
                   checkpoint_interval=None)
    t = Trail(log, actor="alice", agent="claude", session="s-1", cwd="/repo")
    out = [
        t.emit("request", tool="Bash", command="kubectl apply -f deploy.yaml"),
        t.emit("decision", tool="Bash", verdict="escalate", reason="cluster write"),
        t.emit("escalation", queue_id="e-1"),
        t.emit("approval", approver="bob"),
        t.emit("credential_issued", role="deploy", ttl_s=300),
        t.emit("sandbox_started", command=["kubectl", "apply"], pid=4242),
        t.emit("completed", exit_code=0, pid=4242),
        t.emit("credential_revoked", role="deploy"),
        t.emit("result", verdict="allow"),
        log.append("denial", request_id="r-2", verdict="deny", reason="not approved"),
        log.append("proxy_decision", host="pypi.org", port=443, verdict="allow"),
        log.append("proxy_decision", host="evil.example", port=443, verdict="deny"),
        log.append("decision", tool="Write", tool_input={"file_path": "/repo/a.py"},
                   verdict="allow"),
        log.append("decision", tool="Read", path="/repo/README.md", verdict="allow"),
        log.append("session_start", agent="codex"),
        # as the runtime proxy writes them
        log.append("proxy.decision", protocol="connect", host="github.com", port=443,
                   allowed=False, reason="blocked-by-allowlist", address="140.82.112.3",
                   session="s-1", ms=0.4),
        log.append("tool_result", tool="Bash", output="ok"),
        # as the queue's runner writes them (no pid known before the launch)
        log.append("sandbox_started", request_id="r-3", command="make deploy", cwd="/repo",
                   uid=1000),
        # as the runtime's sweep records a quarantine (through the proxy's recorder)
        log.append("proxy.decision", event_kind="quarantine", path="/repo/.git/hooks/pre-commit",
                   moved_to="/repo/.git/hooks/pre-commit.sandbox-quarantine-1",
                   reason="git hook"),
    ]
    return out


def test_every_exported_event_validates_against_its_ocsf_class(tmp_path: Path) -> None:
    raw = raw_schema()
    assert raw["version"] == OCSF_VERSION
    classes = set()
    for rec in sample_records(tmp_path):
        ev = to_ocsf(rec, hostname="dev-01")
        if ev["class_uid"] == 1007:                   # every process names itself
            assert ev["process"].get("uid") and ("pid" in ev["process"]
                                                 or rec["event"] == "sandbox_started")
        model = MODELS[ev["class_uid"]]
        model.model_validate(ev)  # types, required attributes, enums, uids
        assert undefined_attributes(model, ev) == [], rec["event"]
        # class/type uids and activity enum from the raw class definition too
        definition = raw["events"][RAW_NAMES[ev["class_uid"]]]
        enum = activity_enum(raw, RAW_NAMES[ev["class_uid"]])
        assert str(ev["activity_id"]) in enum
        assert ev["activity_name"] == enum[str(ev["activity_id"])]["caption"]
        assert ev["class_uid"] % 1000 == definition["uid"]
        assert ev["type_uid"] == ev["class_uid"] * 100 + ev["activity_id"]
        assert ev["metadata"]["sequence"] == rec["seq"]
        classes.add(ev["class_uid"])
    assert classes == {1007, 1001, 4001, 6003, 7002}


def test_mapping_picks_the_right_class_and_activity(tmp_path: Path) -> None:
    recs = {(r["event"], r.get("verdict"), r.get("tool")): r for r in sample_records(tmp_path)
            if r.get("event_kind") != "quarantine"}
    got = {k: (to_ocsf(v)["class_uid"], to_ocsf(v)["activity_id"]) for k, v in recs.items()}
    assert got[("sandbox_started", None, None)] == (1007, 1)
    assert got[("completed", None, None)] == (1007, 2)
    assert got[("proxy_decision", "allow", None)] == (4001, 1)
    assert got[("proxy_decision", "deny", None)] == (4001, 5)
    assert got[("decision", "allow", "Write")] == (1001, 1)
    assert got[("decision", "allow", "Read")] == (1001, 2)
    assert got[("credential_issued", None, None)] == (6003, 1)
    assert got[("credential_revoked", None, None)] == (6003, 4)
    assert got[("request", None, "Bash")] == (6003, 1)
    proxy = to_ocsf(recs[("proxy.decision", None, None)])
    assert (proxy["class_uid"], proxy["activity_id"], proxy["status_id"]) == (4001, 5, 2)
    assert proxy["dst_endpoint"] == {"hostname": "github.com", "port": 443, "ip": "140.82.112.3"}


def test_the_validator_rejects_wrong_events(tmp_path: Path) -> None:
    """The checks above can fail: a wrong uid, enum or attribute is caught."""
    rec = sample_records(tmp_path)[5]
    good = to_ocsf(rec, hostname="h")
    for change in ({"type_uid": 100702}, {"activity_id": 42}, {"severity_id": 9},
                   {"class_uid": 1001}):
        with pytest.raises(pydantic.ValidationError):
            events.ProcessActivity.model_validate({**good, **change})
    assert undefined_attributes(events.ProcessActivity, {**good, "procces": {}}) == ["procces"]
    assert undefined_attributes(
        events.ProcessActivity, {**good, "process": {"cmdline": "x"}}
    ) == ["process.cmdline"]


def test_cli_export_writes_ocsf_json_lines(tmp_path: Path) -> None:
    sample_records(tmp_path)
    out = tmp_path / "out.jsonl"
    r = subprocess.run(
        [sys.executable, "-m", "agent_sandbox", "audit", "export", str(tmp_path / "audit"),
         "--format", "ocsf", "--out", str(out), "--hostname", "dev-01"],
        capture_output=True, text=True, timeout=60,
    )
    assert r.returncode == 0, r.stderr
    lines = out.read_text().splitlines()
    assert len(lines) == 19
    for line in lines:
        ev = json.loads(line)
        MODELS[ev["class_uid"]].model_validate(ev)


def test_every_exported_event_passes_the_schema_with_its_constraints(tmp_path: Path) -> None:
    """Against the OCSF 1.7.0 schema JSON itself (``ocsf_schema``), not only the
    pydantic models: required attributes, no undefined ones, types with their
    regexes, enums and their captions, at_least_one / just_one."""
    from .ocsf_schema import validate_event

    problems = {}
    for rec in sample_records(tmp_path):
        errors = validate_event(to_ocsf(rec, hostname="dev-01"))
        if errors:
            problems[rec["event"]] = errors
    assert problems == {}


def test_the_schema_validator_fires() -> None:
    from .ocsf_schema import validate_event

    good = {"class_uid": 6003, "category_uid": 6, "activity_id": 1, "type_uid": 600301,
            "severity_id": 1, "time": 1, "metadata": {"version": "1.7.0",
                                                      "product": {"name": "x"}},
            "api": {"operation": "x"}, "actor": {"app_name": "x"},
            "src_endpoint": {"ip": "127.0.0.1"}, "cloud": {"provider": "x"}}
    base = validate_event(good)
    for broken, why in [({**good, "activity_id": 42}, "activity_id"),
                        ({**good, "type_uid": 600302}, "type_uid"),
                        ({**good, "severity_id": "1"}, "severity_id"),
                        ({**good, "bogus": 1}, "bogus"),
                        ({**good, "src_endpoint": {"port": 1}}, "at least one"),
                        ({**good, "src_endpoint": {"ip": "not-an-ip"}}, "ip"),
                        ({k: v for k, v in good.items() if k != "time"}, "time")]:
        errors = validate_event(broken)
        assert len(errors) > len(base) and any(why in e for e in errors), (why, errors)
