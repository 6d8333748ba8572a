"""Moving bytes: the client reader, the relay of a decided connection, and the
reusable worker threads that run both.

Nothing here decides anything: a relay starts only after the connection's
destination was allowed (``gate.py``), and must never be handed bytes read
past what the decision covered.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

HEAD_LIMIT = 64 * 1024
BUF = 64 * 1024  # relay buffer per direction to start with
BULK = 1024 * 1024  # ... and once a transfer fills it


class Reader:
    """A blocking client socket with the bytes read past what was parsed."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""

    def _more(self) -> bool:
        chunk = self.sock.recv(65536)
        self.buf += chunk
        return bool(chunk)

    def read_until(self, marker: bytes, limit: int = HEAD_LIMIT) -> bytes | None:
        """Up to and including ``marker``; None when the client closes or sends
        more than ``limit`` bytes without it."""
        while marker not in self.buf:
            if len(self.buf) > limit or not self._more():
                return None
        head, _, self.buf = self.buf.partition(marker)
        if len(head) > limit:
            return None
        return head + marker

    def read_exactly(self, n: int) -> bytes:
        while len(self.buf) < n:
            if not self._more():
                raise ConnectionError("client closed the connection")
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def copy_exactly(self, n: int, dst: socket.socket) -> None:
        """Send exactly ``n`` bytes of the client's stream to ``dst`` (streamed)."""
        while n:
            if not self.buf and not self._more():
                raise ConnectionError("client closed the connection")
            part, self.buf = self.buf[:n], self.buf[n:]
            dst.sendall(part)
            n -= len(part)


def pump(src: socket.socket, dst: socket.socket) -> None:
    """Copy src to dst until EOF, then pass the EOF on.

    One buffer per direction: small, and grown to ``BULK`` once a read fills
    it (a bulk transfer), so idle and chatty connections hold little memory.
    A plain copy. The zero-copy ways were measured on a 2-core machine (200 MB
    from a loopback server, as ``bench/bench_proxy.py`` does) and both moved
    fewer bytes per second: a ``splice`` relay halves the relay's own CPU, but
    the client's reads of the spliced pages cost nearly twice as much; an
    in-kernel sockmap redirect (root only) hands each segment to a kernel
    work queue and was slower still. Reads average about 900 KiB once the
    buffer has grown, so the interpreter's share of the relay is negligible.
    """
    try:
        buf = bytearray(BUF)
        view = memoryview(buf)
        while True:
            n = src.recv_into(buf)
            if not n:
                return
            dst.sendall(view[:n])
            if n == len(buf) < BULK:
                buf = bytearray(BULK)
                view = memoryview(buf)
    except OSError:
        with contextlib.suppress(OSError):
            src.shutdown(socket.SHUT_RD)
    finally:
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)


# Connections a proxy serves at once. Each holds a thread of the launcher (two
# for a tunnel), and the launcher is outside the run's process limit: without a
# bound, idle connections opened by the command would take the host's threads.
MAX_CONNECTIONS = 256


class Open:
    """The connections being served (``MAX_CONNECTIONS`` at most); those refused
    for being over it are counted."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = 0
        self.refused = 0

    def take(self) -> bool:
        with self.lock:
            if self.now >= MAX_CONNECTIONS:
                self.refused += 1
                return False
            self.now += 1
            return True

    def give(self) -> None:
        with self.lock:
            self.now -= 1


OPEN = Open()


def _served(serve: Callable[[socket.socket], None], conn: socket.socket) -> None:
    try:
        serve(conn)
    finally:
        OPEN.give()


def accept_loop(listener: socket.socket, stopping: Callable[[], bool],
                serve: Callable[[socket.socket], None]) -> None:
    """Accept connections on ``listener`` until ``stopping()``, each handed to
    ``serve`` on a worker thread (blocking); one over ``MAX_CONNECTIONS`` open at
    once is closed at once. A listener closed before the loop got going, or while
    it waits, ends it once ``stopping()`` says so."""
    try:
        listener.setblocking(True)
    except OSError:
        return  # stopped (and closed) before this thread got going
    while not stopping():
        try:
            conn, _ = listener.accept()
        except OSError:
            if stopping():
                return
            time.sleep(0.01)
            continue
        if not OPEN.take():
            with contextlib.suppress(OSError):
                conn.close()
            continue
        conn.setblocking(True)
        WORKERS.submit(_served, serve, conn)


def close_listeners(listeners: list[socket.socket]) -> None:
    """Shut down and close every listener (an accept in progress returns), then
    forget them."""
    for lst in listeners:
        with contextlib.suppress(OSError):
            lst.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            lst.close()
    listeners.clear()


class Workers:
    """Reusable threads: a connection costs no thread start once the proxy is warm.

    As many as the connections served at once need (a relay holds its thread for
    the connection's life; ``accept_loop`` bounds the connections): a job is
    handed to an idle thread, or to a new one when none is idle.
    """

    def __init__(self) -> None:
        import queue

        self.jobs: queue.SimpleQueue[tuple[Callable[..., None], tuple[Any, ...]]] = (
            queue.SimpleQueue())
        self.idle = 0
        self.lock = threading.Lock()

    def submit(self, fn: Callable[..., None], *args: Any) -> None:
        with self.lock:
            spawn = self.idle == 0
            if not spawn:
                self.idle -= 1
        self.jobs.put((fn, args))
        if spawn:
            threading.Thread(target=self._run, name="agent-sandbox-proxy", daemon=True).start()

    def _run(self) -> None:
        while True:
            fn, args = self.jobs.get()
            try:
                fn(*args)
            except Exception:  # noqa: S110 - a job reports its own failures
                pass
            with self.lock:
                self.idle += 1


WORKERS = Workers()


def in_background(fn: Callable[[], None]) -> threading.Event:
    """Run ``fn`` on a worker; the event is set when it has returned."""
    done = threading.Event()

    def job() -> None:
        try:
            fn()
        finally:
            done.set()

    WORKERS.submit(job)
    return done


def relay(a: socket.socket, b: socket.socket) -> None:
    """Relay both directions until both ends have finished; then close both."""
    a.settimeout(None)  # the handshake deadline no longer applies
    b.settimeout(None)
    done = in_background(lambda: pump(b, a))
    pump(a, b)
    done.wait()
    a.close()
    b.close()
