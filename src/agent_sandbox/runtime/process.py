"""Small process helpers for the runtime, without the ``subprocess`` import.

``Spawned`` starts a child with ``posix_spawn`` (the command gets the default
dispositions of the signals Python ignores), ``no_inherited_fds`` keeps this
process's inherited descriptors out of a sandbox, ``suppress`` is
``contextlib.suppress`` without the import, and the pipe readers read bwrap's
info and ready pipes. ``signal_wakeup`` wakes a waiting main thread on a signal
whichever thread the kernel hands it to.
"""

from __future__ import annotations

# The C halves: ``signal`` pulls in ``enum``, which costs more at startup than
# the rest of ``sandbox exec``.
import _signal as signal
import os

from .failures import SANDBOX_FAILED

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable


class suppress:
    """``contextlib.suppress`` without importing contextlib on the fast path."""

    def __init__(self, *exc: type[BaseException]) -> None:
        self.exc = exc

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> bool:
        return kind is not None and issubclass(kind, self.exc)


class signal_wakeup:
    """``with signal_wakeup() as fd:`` a pipe the interpreter writes to when a signal
    arrives, whichever thread the kernel hands it to (a process with threads, such as
    one serving a proxy). A main thread blocked in a wait never runs a Python handler
    for a signal another thread took; waiting on ``fd`` as well, it wakes, and the
    handlers run. ``fd`` is -1 off the main thread, where no handlers run either. The
    previous wakeup descriptor is back on exit."""

    def __enter__(self) -> int:
        self.fds: tuple[int, ...] = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            self.previous = signal.set_wakeup_fd(self.fds[1])
        except ValueError:
            self.__exit__(None)
            return -1
        return self.fds[0]

    def __exit__(self, *_: object) -> None:
        if hasattr(self, "previous"):
            with suppress(OSError, ValueError):
                signal.set_wakeup_fd(self.previous)
        for fd in self.fds:
            os.close(fd)
        self.fds = ()


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

    def __init__(self, argv: list[str], env: dict[str, str],
                 stdio: dict[int, int] | None = None,
                 renumber: dict[int, int] | None = None,
                 pre_exec: Callable[[], None] | None = None) -> None:
        # Python ignores SIGPIPE and SIGXFSZ; the command gets the defaults back.
        # ``stdio``: {0|1|2: descriptor} given to the child in place of ours;
        # ``renumber``: {descriptor: number it has in the child}, by way of numbers
        # above every target so that no source is overwritten before it is moved
        actions: list[tuple[int, ...]] = [(os.POSIX_SPAWN_DUP2, src, dst)
                                          for dst, src in (stdio or {}).items()]
        moves = list((renumber or {}).items())
        spare = max([0, *(dst for _, dst in moves), *(src for src, _ in moves)]) + 1
        actions += [(os.POSIX_SPAWN_DUP2, src, spare + i) for i, (src, _) in enumerate(moves)]
        for i, (_, dst) in enumerate(moves):
            actions += [(os.POSIX_SPAWN_DUP2, spare + i, dst), (os.POSIX_SPAWN_CLOSE, spare + i)]
        targets = {dst for _, dst in moves}
        actions += [(os.POSIX_SPAWN_CLOSE, src) for src, _ in moves if src not in targets]
        if pre_exec is None:
            self.pid = os.posix_spawn(argv[0], argv, env, file_actions=actions,
                                      setsigdef=(signal.SIGPIPE, signal.SIGXFSZ))
        else:  # ``pre_exec`` (see seccomp_notify), then the same actions by hand
            self.pid = os.fork()
            if self.pid == 0:  # pragma: no cover - the child
                try:
                    pre_exec()  # first: the actions below may reuse its descriptors
                    for action in actions:
                        if action[0] == os.POSIX_SPAWN_CLOSE:
                            os.close(action[1])
                        elif action[1] == action[2]:
                            os.set_inheritable(action[2], True)
                        else:
                            os.dup2(action[1], action[2])
                    for sig in (signal.SIGPIPE, signal.SIGXFSZ):
                        signal.signal(sig, signal.SIG_DFL)
                    os.execve(argv[0], argv, env)  # noqa: S606 - as posix_spawn above
                finally:
                    os._exit(127)
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


def exited(pidfd: int, timeout: float) -> bool:
    """Whether the process behind ``pidfd`` has ended, waiting up to ``timeout`` s."""
    import select
    import time

    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    deadline = time.monotonic() + timeout
    while True:
        try:
            if poller.poll(max(0, int((deadline - time.monotonic()) * 1000))):
                return True
        except InterruptedError:
            continue
        if time.monotonic() >= deadline:
            return False


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


def reopenable(fd: int) -> bool:
    """Whether a descriptor names a file or folder that a process could reopen
    through ``/proc/self/fd`` with more rights than it was given (a terminal,
    pipe, socket or device node gives nothing more)."""
    import stat

    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISBLK(mode)


class Relay:
    """Standard streams that are files, relayed through pipes: the sandbox gets a
    pipe end, a thread copies between it and our descriptor. Reopening
    ``/proc/self/fd/0`` inside would otherwise open the host's file read-write
    through the host's mount."""

    def __init__(self) -> None:
        self.child: dict[int, int] = {}
        self._threads: list[object] = []
        self._close: list[int] = []

    def start(self) -> dict[int, int]:
        for fd in (0, 1, 2):
            if not reopenable(fd):
                continue
            import threading

            r, w = os.pipe()
            inner, outer = (r, w) if fd == 0 else (w, r)
            self.child[fd] = inner
            self._close.append(inner)
            src, dst = (fd, outer) if fd == 0 else (outer, fd)
            t = threading.Thread(target=_copy, args=(src, dst, fd == 0), daemon=True)
            t.start()
            if fd != 0:  # output is waited for; input the command never read is not
                self._threads.append(t)
        return self.child

    def after_spawn(self) -> None:
        for fd in self._close:
            with suppress(OSError):
                os.close(fd)
        self._close = []

    def finish(self) -> None:
        for t in self._threads:
            t.join(timeout=5)  # type: ignore[attr-defined]


def _copy(src: int, dst: int, close_dst: bool) -> None:
    try:
        while chunk := os.read(src, 65536):
            view = memoryview(chunk)
            while view:
                view = view[os.write(dst, view):]
    except OSError:
        pass
    finally:
        with suppress(OSError):
            os.close(dst if close_dst else src)
