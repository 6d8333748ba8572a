"""A sandboxed command's output, read as it comes and kept within a bound.

Whatever the command prints is hostile: a command that prints without end
must cost the host no more memory than the bound. ``BoundedOutput`` keeps
the first ``limit`` bytes of each stream and, when asked, its last ``tail``
bytes; the rest is counted and hashed but dropped. ``collect`` reads a
process's pipes into one while the process runs (the pipes never fill, so
the command never blocks on them), feeding it its input, and kills it at the
deadline.

The digest covers the full output as the command produced it, not only what
was kept: ``output_digest(stdout, stderr)`` over the two whole streams gives
the same value, so a run whose output was not cut can be checked against
what it returned. Nothing here decides anything or touches a file.
"""

from __future__ import annotations

import hashlib
import os
import select
import selectors
import threading
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    import subprocess
    from collections.abc import Callable

CHUNK = 64 * 1024  # bytes read from a pipe at a time
PIPE_BUF = getattr(select, "PIPE_BUF", 512)  # see ``_write``


def combine(stdout_sha256: str, stderr_sha256: str) -> str:
    """The output digest from each stream's own SHA-256 (hex): SHA-256 of
    ``stdout:<hex>\\nstderr:<hex>\\n``."""
    return hashlib.sha256(f"stdout:{stdout_sha256}\nstderr:{stderr_sha256}\n".encode()
                          ).hexdigest()


def output_digest(stdout: bytes, stderr: bytes) -> str:
    """The digest of two whole streams (what ``BoundedOutput.digest`` gives)."""
    return combine(hashlib.sha256(stdout).hexdigest(), hashlib.sha256(stderr).hexdigest())


class BoundedOutput:
    """stdout and stderr as they arrive: of each, the first ``limit`` bytes and
    the last ``tail`` bytes are kept, what lies between is counted and dropped."""

    def __init__(self, limit: int, tail: int = 0) -> None:
        if limit < 0 or tail < 0:
            raise ValueError("output limits cannot be negative")
        self.limit, self.tail = limit, tail
        self._head = (bytearray(), bytearray())
        self._tail = (bytearray(), bytearray())
        self._hash = (hashlib.sha256(), hashlib.sha256())
        self._produced = [0, 0]
        self._lock = threading.Lock()

    def feed(self, stream: int, data: bytes) -> None:
        """Add ``data`` to stream 0 (stdout) or 1 (stderr)."""
        if not data:
            return
        with self._lock:
            self._hash[stream].update(data)
            self._produced[stream] += len(data)
            head = self._head[stream]
            room = self.limit - len(head)
            if room > 0:
                head += data[:room]
                data = data[room:]
            if not self.tail or not data:
                return
            tail = self._tail[stream]
            if len(data) >= self.tail:
                tail[:] = data[-self.tail:]
            else:
                tail += data
                if len(tail) > self.tail:
                    del tail[:len(tail) - self.tail]

    def kept(self, stream: int) -> bytes:
        """What is kept of a stream: its head, then its tail."""
        with self._lock:
            return bytes(self._head[stream]) + bytes(self._tail[stream])

    def cut(self, stream: int) -> bytes:
        """What is kept of a stream, with a note of how much was dropped between
        its head and its tail where anything was."""
        dropped = self.dropped[stream]
        if not dropped:
            return self.kept(stream)
        with self._lock:
            return (bytes(self._head[stream]) + f"\n[... {dropped} bytes trimmed ...]\n".encode()
                    + bytes(self._tail[stream]))

    @property
    def stdout(self) -> bytes:
        return self.kept(0)

    @property
    def stderr(self) -> bytes:
        return self.kept(1)

    @property
    def produced(self) -> tuple[int, int]:
        """Bytes each stream produced in all."""
        return self._produced[0], self._produced[1]

    @property
    def dropped(self) -> tuple[int, int]:
        """Bytes of each stream not kept."""
        with self._lock:
            return tuple(n - len(h) - len(t) for n, h, t in  # type: ignore[return-value]
                         zip(self._produced, self._head, self._tail, strict=True))

    @property
    def truncated(self) -> bool:
        return any(self.dropped)

    def digest(self) -> str:
        with self._lock:
            return combine(self._hash[0].hexdigest(), self._hash[1].hexdigest())


def collect(proc: subprocess.Popen[bytes], out: BoundedOutput, *, stdin: bytes | None,
            timeout: float | None, kill: Callable[[], None]) -> bool:
    """Write ``stdin`` to ``proc`` (when its stdin is a pipe) and read its piped
    stdout and stderr into ``out`` until both end and ``proc`` has exited. At
    the deadline ``kill`` is called once and the pipes are read to their end
    (what the killed command wrote is kept too). Returns whether the deadline
    passed. Every pipe of ``proc`` is closed when it returns."""
    import subprocess

    deadline = None if timeout is None else time.monotonic() + timeout
    timed_out = False

    def expired() -> bool:
        nonlocal timed_out
        if timed_out or deadline is None or time.monotonic() < deadline:
            return False
        timed_out = True
        kill()
        return True

    pending = memoryview(stdin or b"")
    sel = selectors.DefaultSelector()
    try:
        if proc.stdin is not None:
            if pending:
                sel.register(proc.stdin.fileno(), selectors.EVENT_WRITE, -1)
            else:
                _close(proc.stdin)
        for n, pipe in enumerate((proc.stdout, proc.stderr)):
            if pipe is not None:
                sel.register(pipe.fileno(), selectors.EVENT_READ, n)
        while sel.get_map():
            expired()
            left = None if deadline is None or timed_out else max(0.0, deadline
                                                                  - time.monotonic())
            for key, _ in sel.select(left):
                if key.data == -1:
                    pending = _write(key.fd, pending)
                    if not pending:
                        sel.unregister(key.fd)
                        _close(proc.stdin)
                    continue
                data = os.read(key.fd, CHUNK)
                if data:
                    out.feed(key.data, data)
                else:
                    sel.unregister(key.fd)
    finally:
        sel.close()
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            _close(pipe)
    while True:  # the pipes are closed: the process may still run
        left = None if deadline is None or timed_out else max(0.0, deadline - time.monotonic())
        try:
            proc.wait(left)
            return timed_out
        except subprocess.TimeoutExpired:
            expired()


def _write(fd: int, pending: memoryview) -> memoryview:
    """Write what one wake-up allows (at most ``PIPE_BUF`` bytes: a pipe found
    writable takes that much without blocking); what is left to write."""
    try:
        return pending[os.write(fd, pending[:PIPE_BUF]):]
    except BrokenPipeError:  # the command stopped reading: the rest is not wanted
        return pending[:0]


def _close(pipe: object) -> None:
    try:
        pipe.close()  # type: ignore[attr-defined]
    except (AttributeError, OSError):
        pass
