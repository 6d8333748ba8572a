"""The seam every queue step goes through: the identity and liveness of
processes (``/proc`` start times guard against pid reuse), and the hook a test
uses to pause each process before each rename, unlink, link or create.

The real seam does nothing but the operation; it never decides anything.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def proc_start(pid: int) -> str | None:
    """The kernel start time of ``pid`` (guards against pid reuse), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    try:
        rest = data[data.rindex(b")") + 2 :].split()
        return rest[19].decode()
    except (ValueError, IndexError):
        return None


def alive(pid: Any, start: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    now = proc_start(pid)
    if now is None:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            state = fh.read().rsplit(b")", 1)[1].split()[0]
        if state in (b"Z", b"X"):
            return False
    except (OSError, IndexError):
        return False
    return start is None or now == str(start)


def me() -> dict[str, Any]:
    pid = os.getpid()
    return {"pid": pid, "start": proc_start(pid)}


class Seam:
    """Every file operation that moves a request between states, and the
    identity and liveness of processes, go through here. The real one does the
    operation; a test substitutes one that pauses threads before each step to
    drive every interleaving deterministically."""

    def pause(self, op: str, path: str) -> None:
        """Called just before ``op`` (rename, unlink, link, create) on ``path``."""

    def me(self) -> dict[str, Any]:
        return me()

    def alive(self, pid: Any, start: Any) -> bool:
        return alive(pid, start)


REAL = Seam()
