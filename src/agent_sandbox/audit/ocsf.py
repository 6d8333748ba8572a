"""Export audit records as OCSF 1.7 events (JSON lines for a SIEM).

Each record maps to one of five OCSF classes, chosen from its event name and
fields (pure functions, no I/O):

- Process Activity (1007): ``sandbox_started`` (Launch) and ``completed``
  (Terminate), with ``process.uid`` (the request), ``process.pid`` and the
  account's ``process.user.uid`` when the record has them;
- File System Activity (1001): decisions about file tools that name a path
  (Read / Create / Update / Delete);
- Network Activity (4001): ``proxy_decision`` (Open when allowed, Refuse when denied);
- File Remediation Activity (7002, Isolate): a protected path the sweep moved
  away after a run (``event_kind`` ``quarantine``);
- API Activity (6003): everything else in an action's life (request, decision,
  escalation, approval, denial, credential issued / revoked, result ...).

``type_uid`` is always ``class_uid * 100 + activity_id``. The request id is the
OCSF ``metadata.correlation_uid``; the record's chain hash is ``metadata.uid``
and its ``seq`` is ``metadata.sequence``. Fields without an OCSF home go to
``unmapped`` (they were redacted before they were ever written). This module
never reads secrets back in and never changes the log.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Iterable, Iterator
from typing import Any

from agent_sandbox import __version__
from agent_sandbox.audit.query import parse_time

OCSF_VERSION = "1.7.0"

# class name, class_uid, category_uid, category name
PROCESS = ("Process Activity", 1007, 1, "System Activity")
FILE = ("File System Activity", 1001, 1, "System Activity")
NETWORK = ("Network Activity", 4001, 4, "Network Activity")
API = ("API Activity", 6003, 6, "Application Activity")
QUARANTINE = ("File Remediation Activity", 7002, 7, "Remediation")

ACTIVITY_NAMES: dict[int, dict[int, str]] = {
    1007: {1: "Launch", 2: "Terminate", 3: "Open", 4: "Inject", 5: "Set User ID", 99: "Other"},
    1001: {1: "Create", 2: "Read", 3: "Update", 4: "Delete", 5: "Rename", 14: "Open", 99: "Other"},
    4001: {1: "Open", 2: "Close", 3: "Reset", 4: "Fail", 5: "Refuse", 6: "Traffic", 7: "Listen",
           99: "Other"},
    6003: {1: "Create", 2: "Read", 3: "Update", 4: "Delete", 99: "Other"},
    7002: {1: "Isolate", 2: "Evict", 3: "Restore", 4: "Harden", 5: "Detect", 99: "Other"},
}
SEVERITY = {0: "Unknown", 1: "Informational", 2: "Low", 3: "Medium", 4: "High", 5: "Critical"}

_API_ACTIVITY = {
    "request": 1,
    "session_start": 1,
    "escalation": 1,
    "credential_issued": 1,
    "approval": 3,
    "denial": 3,
    "credential_revoked": 4,
    "result": 2,
    "tool_result": 2,
}
_FILE_TOOLS = {
    "read": 2, "write": 1, "edit": 3, "multiedit": 3, "notebookedit": 3, "delete": 4,
    "file_read": 2, "file_write": 1, "file_edit": 3, "file_delete": 4,
}
_CORE = frozenset({"seq", "ts", "event", "prev", "hash", "request_id"})
_DENY = frozenset({"deny", "denied", "block", "blocked", "refuse", "refused"})


def _denied(rec: dict[str, Any]) -> bool:
    return str(rec.get("verdict", "")).lower() in _DENY or rec.get("allowed") is False


def _classify(rec: dict[str, Any]) -> tuple[tuple[str, int, int, str], int]:
    """(class, activity_id) for a record (pure)."""
    event = str(rec.get("event", "")).replace(".", "_")
    if rec.get("event_kind") == "quarantine" or event == "quarantine":
        return QUARANTINE, 1  # the sweep moved a protected path away: isolated
    if event in ("sandbox_started", "process_started"):
        return PROCESS, 1
    if event in ("completed", "process_exited"):
        return PROCESS, 2
    if event == "proxy_decision":
        return NETWORK, 5 if _denied(rec) else 1
    kind = str(rec.get("kind") or rec.get("tool") or "").lower()
    if event in ("decision", "request") and kind in _FILE_TOOLS and _path(rec):
        return FILE, _FILE_TOOLS[kind]
    return API, _API_ACTIVITY.get(event, 99)


def _path(rec: dict[str, Any]) -> str | None:
    for key in ("path", "file_path"):
        v = rec.get(key)
        if isinstance(v, str) and v:
            return v
    ti = rec.get("tool_input")
    if isinstance(ti, dict):
        for key in ("file_path", "path", "notebook_path"):
            v = ti.get(key)
            if isinstance(v, str) and v:
                return v
    return None


def _severity(rec: dict[str, Any]) -> int:
    event = rec.get("event")
    verdict = str(rec.get("verdict", "")).lower()
    if event == "audit_sealed":
        return 4
    if _denied(rec) or event == "denial":
        return 3
    if verdict == "escalate" or event == "escalation":
        return 2
    return 1


def _actor(rec: dict[str, Any]) -> dict[str, Any]:
    actor: dict[str, Any] = {"user": {"name": str(rec.get("actor") or "unknown")}}
    if rec.get("agent"):
        actor["app_name"] = str(rec["agent"])
    session = rec.get("session") or rec.get("session_id")
    if session:
        actor["session"] = {"uid": str(session)}
    return actor


def _ip(v: Any) -> str | None:
    try:
        return str(ipaddress.ip_address(str(v))) if v else None
    except ValueError:
        return None


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def to_ocsf(rec: dict[str, Any], *, hostname: str | None = None) -> dict[str, Any]:
    """One OCSF event for one audit record (pure apart from the default hostname)."""
    (class_name, class_uid, category_uid, category_name), activity_id = _classify(rec)
    severity_id = _severity(rec)
    host = str(rec.get("hostname") or hostname or socket.gethostname())
    ts = parse_time(str(rec["ts"]))
    out: dict[str, Any] = {
        "category_uid": category_uid,
        "category_name": category_name,
        "class_uid": class_uid,
        "class_name": class_name,
        "activity_id": activity_id,
        "activity_name": ACTIVITY_NAMES[class_uid][activity_id],
        "type_uid": class_uid * 100 + activity_id,
        "type_name": f"{class_name}: {ACTIVITY_NAMES[class_uid][activity_id]}",
        "time": int(ts.timestamp() * 1000),
        "severity_id": severity_id,
        "severity": SEVERITY[severity_id],
        "metadata": _metadata(rec),
        "message": _message(rec),
    }
    _status(rec, out)
    used = set(_CORE) | {"actor", "agent", "session", "session_id", "hostname", "verdict"}
    device = {"hostname": host, "type_id": 0, "type": "Unknown"}
    if class_uid == 1007:
        used |= _process(rec, out, activity_id)
        out["actor"] = _actor(rec)
        out["device"] = device
    elif class_uid == 7002:
        used |= _remediation(rec, out)
    elif class_uid == 1001:
        path = _path(rec) or ""
        out["file"] = {"path": path, "name": os.path.basename(path) or path, "type_id": 1,
                       "type": "Regular File"}
        out["actor"] = _actor(rec)
        out["device"] = device
        used |= {"path", "file_path"}
    elif class_uid == 4001:
        used |= _network(rec, out)
        out["src_endpoint"] = {"hostname": host}
    else:
        used |= _api(rec, out)
        out["actor"] = _actor(rec)
        out["src_endpoint"] = {"hostname": host}
    if _int(rec.get("duration_ms")) is not None or isinstance(rec.get("duration_ms"), float):
        out["duration"] = int(rec["duration_ms"])
        used.add("duration_ms")
    unmapped = {k: v for k, v in rec.items() if k not in used}
    unmapped["event"] = rec.get("event")
    out["unmapped"] = unmapped
    return out


def _metadata(rec: dict[str, Any]) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "version": OCSF_VERSION,
        "product": {"name": "agent-sandbox", "vendor_name": "agent-sandbox",
                    "version": __version__},
        "log_name": "audit.jsonl",
        "original_time": str(rec["ts"]),
    }
    if _int(rec.get("seq")) is not None:
        metadata["sequence"] = rec["seq"]
    if isinstance(rec.get("hash"), str):
        metadata["uid"] = rec["hash"]
    if rec.get("request_id"):
        metadata["correlation_uid"] = str(rec["request_id"])
    return metadata


def _status(rec: dict[str, Any], out: dict[str, Any]) -> None:
    """The status of a record that carries a verdict (or an ``allowed`` flag)."""
    verdict = rec.get("verdict")
    if not isinstance(verdict, str) and isinstance(rec.get("allowed"), bool):
        verdict = "allow" if rec["allowed"] else "deny"
    if isinstance(verdict, str):
        denied = _denied(rec) or verdict.lower() in _DENY
        out["status_id"] = 2 if denied else 1
        out["status"] = "Failure" if denied else "Success"
        detail = f"verdict={verdict}"
        if rec.get("reason"):
            detail += f": {rec['reason']}"
        out["status_detail"] = detail


def _process(rec: dict[str, Any], out: dict[str, Any], activity_id: int) -> set[str]:
    """Process Activity: the command, its pid, user and folder; the keys used."""
    proc: dict[str, Any] = {}
    cmd = rec.get("command")
    if isinstance(cmd, list):
        cmd = " ".join(str(c) for c in cmd)
    if cmd:
        proc["cmd_line"] = str(cmd)
    if _int(rec.get("pid")) is not None:
        proc["pid"] = rec["pid"]
    # the run's own id: launch and terminate of one run share it (and OCSF
    # needs pid, uid or cpid on every process)
    proc["uid"] = str(rec.get("request_id") or rec.get("run_id") or rec.get("hash"))
    if _int(rec.get("uid")) is not None:
        proc["user"] = {"uid": str(rec["uid"])}
        if rec.get("user"):
            proc["user"]["name"] = str(rec["user"])
    if rec.get("cwd"):
        proc["working_directory"] = str(rec["cwd"])
    out["process"] = proc
    if activity_id == 2 and _int(rec.get("exit_code")) is not None:
        out["exit_code"] = rec["exit_code"]
    return {"command", "pid", "cwd", "exit_code", "uid", "user", "run_id"}


def _remediation(rec: dict[str, Any], out: dict[str, Any]) -> set[str]:
    """File Remediation: what was quarantined and where it went; the keys used."""
    path = str(rec.get("path") or "")
    out["file"] = {"path": path, "name": os.path.basename(path.rstrip("/")) or path,
                   "type_id": 0, "type": "Unknown"}
    # the remediation's own id: where the path was moved (unique per quarantine)
    out["command_uid"] = str(rec.get("moved_to") or rec.get("hash"))
    if rec.get("reason"):
        out["status_detail"] = f"quarantined: {rec['reason']}"
    return {"path", "event_kind", "reason", "moved_to"}


def _network(rec: dict[str, Any], out: dict[str, Any]) -> set[str]:
    """Network Activity: the destination asked for; the keys used."""
    used = {"host", "port", "allowed"}
    dst: dict[str, Any] = {}
    if rec.get("host"):
        dst["hostname"] = str(rec["host"])
    if _int(rec.get("port")) is not None:
        dst["port"] = rec["port"]
    for key in ("ip", "address"):
        ip = _ip(rec.get(key))
        if ip:
            dst["ip"] = ip
            used.add(key)
            break
    out["dst_endpoint"] = dst
    return used


def _api(rec: dict[str, Any], out: dict[str, Any]) -> set[str]:
    """API Activity: the event as an operation, the tool and the request; the keys used."""
    api: dict[str, Any] = {"operation": str(rec.get("event"))}
    if rec.get("tool"):
        api["service"] = {"name": str(rec["tool"])}
    if rec.get("request_id"):
        api["request"] = {"uid": str(rec["request_id"])}
    out["api"] = api
    return {"tool"}


def _message(rec: dict[str, Any]) -> str:
    parts = [str(rec.get("event"))]
    for key in ("verdict", "tool", "command", "host", "path"):
        v = rec.get(key)
        if isinstance(v, str | int) and v != "":
            parts.append(f"{key}={v}")
    return " ".join(parts)[:500]


def export(records: Iterable[dict[str, Any]], *, hostname: str | None = None) -> Iterator[
    dict[str, Any]
]:
    host = hostname or socket.gethostname()
    for rec in records:
        yield to_ocsf(rec, hostname=host)
