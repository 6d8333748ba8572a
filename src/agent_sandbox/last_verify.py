"""What the last ``sandbox verify`` of this account found, kept for ``sandbox serve``'s
status: when it ran, how many checks passed, and which failed; and what the host's
last drift check (``sandbox verify --drift``, run by the scheduled job as root) found.

The account's record is one small JSON file in the user's state folder (read-only in
every sandbox), replaced whole on each run. The drift record is root's, in the host's
state folder (``/var/lib/agent-sandbox/verify/drift.json``, 0644 so that the approver
account's ``sandbox serve`` reads it): it is read only when root owns it and its
folder and neither is writable by anyone else, so no file a sandboxed command (or
another account) could write is ever shown as the host's drift state.

Each records a result; it never decides one. A missing or unreadable account record
reads as "never run"; a drift record that is there but not root's, or malformed, reads
as ``{"error": ...}``, never as clean.
"""

from __future__ import annotations

import json
import os
import time

from agent_sandbox.atomic_file import replace_file

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

NAME = "last.json"


def last_path() -> str:
    from agent_sandbox.state_paths import user_state_dir

    return os.path.join(user_state_dir(), "verify", NAME)


def record(results: list[Any]) -> None:
    """Keep the outcome of a run (``CheckResult`` items); a failure to write is silent:
    the run's own exit status is what counts."""
    doc = {"at": time.time(), "passed": sum(1 for r in results if r.passed),
           "total": len(results), "failed": [r.name for r in results if not r.passed]}
    path = last_path()
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        replace_file(path, json.dumps(doc).encode(), 0o600)
    except OSError:
        pass


DRIFT_NAME = "drift.json"


def drift_path() -> str:
    from agent_sandbox.contract import host_state_dir

    return os.path.join(host_state_dir(), "verify", DRIFT_NAME)


def record_drift(doc: dict[str, Any]) -> None:
    """Keep the outcome of a drift check (``hostcheck.drift_check``), root's and
    readable by all; raises ``OSError`` when it cannot (the caller fails closed)."""
    path = drift_path()
    folder = os.path.dirname(path)
    os.makedirs(folder, mode=0o755, exist_ok=True)
    replace_file(path, json.dumps(doc, sort_keys=True).encode(), 0o644)


def _trusted(st: os.stat_result) -> bool:
    """Root's, and writable by nobody else."""
    return st.st_uid == 0 and not st.st_mode & 0o022


def read_drift() -> dict[str, Any] | None:
    """The last drift check (``DRIFT_KEYS``), None when none ran, or ``{"error": why}``
    when a record is there that cannot be trusted or read."""
    import stat

    path = drift_path()
    try:
        folder = os.lstat(os.path.dirname(path))
        flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return {"error": f"{path}: {exc.strerror}"}
    try:
        st = os.fstat(fd)
        if not (stat.S_ISREG(st.st_mode) and stat.S_ISDIR(folder.st_mode)
                and _trusted(st) and _trusted(folder)):
            return {"error": f"{path} is not a file only root can write: not trusted"}
        with os.fdopen(fd, "rb", closefd=False) as fh:
            doc = json.loads(fh.read(1 << 20))
    except (OSError, ValueError) as exc:
        return {"error": f"{path}: cannot be read: {exc}"}
    finally:
        os.close(fd)
    return drift_doc(doc) or {"error": f"{path}: not a drift record"}


# The drift record's keys, as `sandbox status --json` and `sandbox serve` show them.
DRIFT_KEYS = {
    "at": "when the check ran (seconds since the epoch)",
    "clean": "true when nothing drifted and every check passed",
    "drifted": "each managed file that differs: target, problem (missing, modified, mode), "
               "detail",
    "failed_checks": "each isolation check that failed: name, detail",
    "checks": "how many isolation checks ran (0 with --files-only)",
    "error": "why the check could not be made (no manifest, ...), or null",
}


def drift_doc(doc: Any) -> dict[str, Any] | None:
    """A drift record held to ``DRIFT_KEYS`` and their types, or None."""
    if not isinstance(doc, dict):
        return None
    try:
        return {
            "at": float(doc["at"]), "clean": bool(doc["clean"]),
            "drifted": [{"target": str(d["target"]), "problem": str(d["problem"]),
                         "detail": str(d.get("detail", ""))} for d in doc["drifted"]],
            "failed_checks": [{"name": str(c["name"]), "detail": str(c.get("detail", ""))}
                              for c in doc["failed_checks"]],
            "checks": int(doc["checks"]),
            "error": None if doc.get("error") is None else str(doc["error"]),
        }
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def describe_drift(doc: dict[str, Any] | None) -> list[str]:
    """The drift record as lines a person reads (``sandbox status``), plain about drift."""
    import datetime

    if doc is None:
        return ["drift check: has not run on this host"]
    if "at" not in doc:
        return [f"drift check: UNKNOWN: {doc.get('error')}"]
    when = datetime.datetime.fromtimestamp(doc["at"], datetime.UTC)
    stamp = when.strftime("%Y-%m-%d %H:%M:%S UTC")
    if doc["clean"]:
        return [f"drift check: clean at {stamp} (no drift, {doc['checks']} check(s) passed)"]
    head = ("DRIFT FOUND" if doc["drifted"] else "CHECKS FAILED" if doc["failed_checks"]
            else "COULD NOT CHECK")
    lines = [f"drift check: {head} at {stamp}: {len(doc['drifted'])} file(s) drifted, "
             f"{len(doc['failed_checks'])} check(s) failed"
             + (f"; {doc['error']}" if doc["error"] else "")]
    lines += [f"  DRIFT {d['problem']:8} {d['target']}" for d in doc["drifted"]]
    lines += [f"  FAIL  {c['name']}: {c['detail']}" for c in doc["failed_checks"]]
    return lines


def read_last() -> dict[str, Any] | None:
    try:
        with open(last_path(), encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict):
        return None
    try:
        return {"at": float(doc["at"]), "passed": int(doc["passed"]),
                "total": int(doc["total"]), "failed": [str(x) for x in doc["failed"]]}
    except (KeyError, TypeError, ValueError):
        return None
