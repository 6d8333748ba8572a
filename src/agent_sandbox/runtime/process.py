"""Small process helpers for the runtime, without the ``subprocess`` import.

``Spawned`` starts a child with ``posix_spawn`` (the command gets the default
dispositions of the signals Python ignores), ``no_inherited_fds`` keeps this
process's inherited descriptors out of a sandbox, ``suppress`` is
``contextlib.suppress`` without the import, and the pipe readers read bwrap's
info and ready pipes.
"""

from __future__ import annotations

# The C halves: ``signal`` pulls in ``enum``, which costs more at startup than
# the rest of ``sandbox exec``.
import _signal as signal
import os

from .errors import SANDBOX_FAILED


class suppress:
    """``contextlib.suppress`` without importing contextlib on the fast path."""

    def __init__(self, *exc: type[BaseException]) -> None:
        self.exc = exc

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> bool:
        return kind is not None and issubclass(kind, self.exc)


def no_inherited_fds() -> None:
    """Keep descriptors this process inherited (beyond stdio) out of the sandbox."""
    try:
        fds = [int(x) for x in os.listdir("/proc/self/fd")]
    except OSError:
        return
    for fd in fds:
        if fd > 2:
            with suppress(OSError):
                os.set_inheritable(fd, False)


class Spawned:
    """A child started with posix_spawn (no subprocess import): pid, poll, wait, kill."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        # Python ignores SIGPIPE and SIGXFSZ; the command gets the defaults back
        self.pid = os.posix_spawn(argv[0], argv, env,
                                  setsigdef=(signal.SIGPIPE, signal.SIGXFSZ))
        self.returncode: int | None = None

    def _status(self, status: int) -> int:
        self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self._status(status)
        return self.returncode

    def wait(self) -> int:
        while self.returncode is None:
            try:
                _, status = os.waitpid(self.pid, 0)
            except InterruptedError:
                continue
            except ChildProcessError:
                self.returncode = SANDBOX_FAILED
                break
            self._status(status)
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            with suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)


def read_line(fd: int, limit: int = 64) -> bytes:
    """One line from a pipe (or what came before end-of-file)."""
    data = b""
    while not data.endswith(b"\n") and len(data) < limit:
        try:
            chunk = os.read(fd, 1)
        except InterruptedError:
            continue
        if not chunk:
            break
        data += chunk
    return data


def read_all(fd: int) -> bytes:
    data = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except InterruptedError:
            continue
        if not chunk:
            return data
        data += chunk
        if data.rstrip().endswith(b"}"):
            return data
