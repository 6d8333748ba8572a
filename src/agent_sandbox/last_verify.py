"""What the last ``sandbox verify`` of this account found, kept for ``sandbox serve``'s
status: when it ran, how many checks passed, and which failed.

One small JSON file in the user's state folder (read-only in every sandbox), replaced
whole on each run. It records a result; it never decides one, and a missing or
unreadable file reads as "never run".
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
