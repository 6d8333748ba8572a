"""The result of a sandboxed run, whichever backend ran it."""

from __future__ import annotations

from .output import BoundedOutput
from .settings import _Record


class CompletedRun(_Record):
    """The result of a sandboxed run. A captured stream longer than the run's
    output limit keeps its head and its tail with a note of the bytes trimmed
    between them (``runtime.output``); ``stdout_dropped``/``stderr_dropped``
    count those bytes."""

    __slots__ = ("backend", "duration", "returncode", "stderr", "stderr_dropped", "stdout",
                 "stdout_dropped", "timed_out")
    returncode: int
    stdout: bytes
    stderr: bytes
    duration: float
    timed_out: bool
    backend: str
    stdout_dropped: int
    stderr_dropped: int
    _timed_out = False
    _backend = "bwrap"
    _stdout_dropped = 0
    _stderr_dropped = 0

    def __init__(self, returncode: int, stdout: bytes, stderr: bytes, duration: float,
                 timed_out: bool = False, backend: str = "bwrap", *,
                 stdout_dropped: int = 0, stderr_dropped: int = 0) -> None:
        super().__init__(returncode=returncode, stdout=stdout, stderr=stderr,
                         duration=duration, timed_out=timed_out, backend=backend,
                         stdout_dropped=stdout_dropped, stderr_dropped=stderr_dropped)


def bounded(limit: int) -> BoundedOutput:
    """Where a run's captured output goes: of each stream at most ``limit``
    bytes kept, half its head and half its tail."""
    return BoundedOutput(limit // 2, limit - limit // 2)


NOTES_LIMIT = 64 * 1024  # the runtime's own notes kept of a captured run: head and tail


def completed(out: BoundedOutput, returncode: int, duration: float, timed_out: bool,
              backend: str, *, notes: bytes = b"") -> CompletedRun:
    """The result of a run whose output went to ``out``; ``notes`` (the runtime's
    own, their first and last ``NOTES_LIMIT`` / 2 bytes) follow its stderr."""
    if len(notes) > NOTES_LIMIT:
        half = NOTES_LIMIT // 2
        notes = (notes[:half] + b"\n[... %d bytes of the sandbox's notes cut ...]\n"
                 % (len(notes) - 2 * half) + notes[-half:])
    dropped = out.dropped
    return CompletedRun(returncode, out.cut(0), out.cut(1) + notes, duration, timed_out,
                        backend, stdout_dropped=dropped[0], stderr_dropped=dropped[1])
