"""The newest checkpoint each log's writers signed, kept outside the log.

A log's checkpoints sit beside it: whoever can rewrite the log can delete its
newest checkpoints and recompute the chain below an older one, and a verifier
reading the log alone finds nothing missing. So each writer also notes the size
and head of every checkpoint it signs in the account's state folder
(``anchors/<log>``), which no sandbox can write and the hook keeps from the
agent's own file tools. ``sandbox audit verify``, run by that account, fails a
log whose checkpoints stop short of what was noted, or whose head there differs.

One line a log: ``<size> <head hex>``; raised by each checkpoint signed, forgotten
when a writer starts a new log where none was (no log, no checkpoint).
"""

from __future__ import annotations

import hashlib
import os

from agent_sandbox import contract


def _path(log_dir: str) -> str:
    key = hashlib.sha256(os.fsencode(os.path.realpath(log_dir))).hexdigest()[:32]
    return os.path.join(contract.user_state_dir(os.path.expanduser("~")), "anchors", key)


def read(log_dir: str) -> tuple[int, str] | None:
    """(size, head hex) of the newest checkpoint noted for the log in ``log_dir``."""
    try:
        with open(_path(log_dir), encoding="ascii") as fh:
            size, head = fh.read(200).split()
        return int(size), head
    except (OSError, ValueError):
        return None


def note(log_dir: str, size: int, head: bytes) -> None:
    """Note a checkpoint just signed (kept when it is newer than the one noted); a
    state folder that cannot be written loses the note, never a record."""
    was = read(log_dir)
    if was is not None and was[0] >= size:
        return
    path = _path(log_dir)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        with open(tmp, "w", encoding="ascii") as fh:
            fh.write(f"{size} {head.hex()}\n")
        os.replace(tmp, path)
    except OSError:
        pass


def forget(log_dir: str) -> None:
    try:
        os.unlink(_path(log_dir))
    except OSError:
        pass
