"""The result of a sandboxed run, whichever backend ran it."""

from __future__ import annotations

from .settings import _Record


class CompletedRun(_Record):
    """The result of a sandboxed run."""

    __slots__ = ("backend", "duration", "returncode", "stderr", "stdout", "timed_out")
    returncode: int
    stdout: bytes
    stderr: bytes
    duration: float
    timed_out: bool
    backend: str
    _timed_out = False
    _backend = "bwrap"

    def __init__(self, returncode: int, stdout: bytes, stderr: bytes, duration: float,
                 timed_out: bool = False, backend: str = "bwrap") -> None:
        super().__init__(returncode=returncode, stdout=stdout, stderr=stderr,
                         duration=duration, timed_out=timed_out, backend=backend)
