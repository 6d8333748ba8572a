"""What a queue record is called and bound to: request ids, the SHA-256 a
decision is bound to, the key of one client tool call, the states and
statuses, and reading one record file.

Pure apart from reading a file; never accepts an id that could name a path
outside its folder (``valid_id``).
"""

from __future__ import annotations

import json
import os
import time

from agent_sandbox.errors import SandboxError
from agent_sandbox.repo_layout import QUEUE_STATES

# bytes of each output stream a done record keeps (head and tail): what an approved
# command or an action printed, bounded whatever it printed
OUTPUT_KEEP = 64 * 1024

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

STATES = QUEUE_STATES  # the folders of a queue, named once (repo_layout)
DECISIONS = ("approve", "deny", "timeout", "cancel")
TERMINAL = ("completed", "granted", "denied", "timed_out", "cancelled", "expired", "refused",
            "interrupted", "failed")


class QueueError(SandboxError):
    """A queue operation was refused; the message says why."""


BOUND = ("tool", "params", "cwd")  # what a decision is bound to, and all the runner uses


def request_hash(tool: str, params: Any, cwd: str, content: Any = None) -> str:
    """SHA-256 over the canonical JSON of exactly what will run: the words, and for a
    command the content it was approved with (``queue.content``: the digest of the
    tree it may read, the files it names)."""
    import hashlib

    words = {"tool": tool, "params": params, "cwd": cwd}
    if content is not None:
        words["content"] = content
    body = json.dumps(words, sort_keys=True,
                      separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(body.encode("utf-8", "surrogatepass")).hexdigest()


def bound(req: dict[str, Any]) -> tuple[Any, Any, Any]:
    """The fields of a request record its hash covers (``BOUND``), as stored: the
    runner acts on these and nothing else, and every view of a request shows these
    (``queue.shown``)."""
    return req.get("tool", ""), req.get("params"), req.get("cwd", "")


def hash_of(req: dict[str, Any]) -> str:
    """``request_hash`` of a request record's bound fields (and its content)."""
    return request_hash(*bound(req), req.get("content"))


def use_key_of(agent: str, session: str, use_id: str) -> str:
    """The file name under ``uses/`` for one client tool-call id."""
    import hashlib

    body = "\0".join((agent, session, use_id)).encode("utf-8", "surrogatepass")
    return hashlib.sha256(body).hexdigest()[:32]


def new_id() -> str:
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + "-" + os.urandom(6).hex()


def valid_id(rid: Any) -> bool:
    if not isinstance(rid, str) or not 20 <= len(rid) <= 40:
        return False
    return all(c.isalnum() or c in "-T" for c in rid) and not rid.startswith(".")



def read_json(path: str) -> dict[str, Any] | None:
    try:
        with open(path, "rb") as fh:
            data = json.loads(fh.read())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
