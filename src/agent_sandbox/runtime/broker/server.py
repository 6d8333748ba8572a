"""The broker of one run: the launcher's thread that answers the sandbox's calls.

``Broker.start`` runs it; ``arm`` marks the moment the command may start (until
then only bubblewrap runs under the filter, setting the sandbox up, and its
calls go on unjudged); ``close`` ends it. Each notification is dispatched by
syscall number to ``files`` or ``connect``; an answer is always given: the
call's own result, its errno, or ``EPERM`` for anything unexpected (a bug here
never lets a call through). Refusals go to ``on_deny`` with their reason.

The thread holds no capability (dropped from its effective set when the
launcher runs as root), so a call it makes for the sandbox is checked against
the caller's rights, never more.
"""

from __future__ import annotations

import _thread
import ctypes
import errno
import os

from .files import Files
from .handed import Fd, Later
from .judge import Judge
from .notify import OPEN_WRITE_FLAGS, SYSCALLS, Listener, Notification
from .reads import judge_exec, open_for_reading
from .refused import Refused
from .target import AT_FDCWD, Callers, Target, fd_arg

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

    from .pinned import Pin


def _drop_capabilities(numbers: dict[str, int]) -> None:
    """Clear this thread's effective capabilities (the others keep theirs)."""
    if os.geteuid() != 0:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this thread
    data = (ctypes.c_uint32 * 6)()  # two of {effective, permitted, inheritable}
    if libc.syscall(numbers["capget"], header, data) != 0:
        raise OSError(ctypes.get_errno(), "capget")
    data[0] = data[3] = 0
    if libc.syscall(numbers["capset"], header, data) != 0:
        raise OSError(ctypes.get_errno(), "capset")


class Broker:
    """Answers one sandbox's brokered calls until closed."""

    def __init__(self, listener: int | Callable[[], int], judge: Judge | None,
                 sockets: Sequence[str] | None,
                 on_deny: Callable[[str], None] | None = None, pin: Pin | None = None) -> None:
        """``listener``: the filter's listener, or how the thread receives it (it then
        serves from the moment the child has sent it: ``wait_listener``)."""
        self._source = listener if callable(listener) else None
        self.listener = Listener(-1 if callable(listener) else listener)
        self.failed: OSError | None = None
        self._got = _thread.allocate_lock()  # held until the listener is there
        self.numbers = SYSCALLS[os.uname().machine]
        self.files = Files(judge, _own_umask()) if judge is not None else None
        # what may not be read, when it is judged at open (every open comes here then)
        self.reads = judge.reads if judge is not None and (judge.reads or pin is not None) \
            else None
        self.pin = pin  # an approved command's tree (``pinned``): every open judged too
        if self.files is not None:
            self.files.pin = pin
        self.callers = Callers()
        self.sockets = tuple(sockets) if sockets is not None else None
        self.on_deny = on_deny
        self.armed = False
        self._ids = (os.getuid(), (os.getgid(), *os.getgroups()))
        self._stop_r, self._stop_w = os.pipe2(os.O_CLOEXEC)
        self._names = {v: k for k, v in self.numbers.items()}
        self._done = _thread.allocate_lock()  # held while the thread serves

    def repos(self) -> dict[str, tuple[int, int]]:
        """The git folders this run's command made (path: device and inode), kept up
        to date as the run goes: what the sweep judges (``Made.repos``)."""
        return self.files.made.repos if self.files is not None else {}

    def start(self) -> None:
        self._done.acquire()
        if self._source is not None:
            self._got.acquire()
        _thread.start_new_thread(self._serve, ())

    def wait_listener(self) -> None:
        """Until the thread holds the listener; ``OSError`` when it got none."""
        if self._source is not None:
            self._got.acquire()
            self._got.release()
        if self.failed is not None:
            raise self.failed

    def arm(self, pid: int) -> None:
        """From now on every call is the command's: judged. ``pid``: a process of the
        sandbox (its root is every caller's)."""
        self.callers.set_root(pid)
        self.armed = True

    def close(self) -> None:
        if self._stop_w >= 0:
            os.write(self._stop_w, b"x")
            if self._done.locked():
                self._done.acquire(True, 5)
            os.close(self._stop_w)
            self._stop_w = -1
            os.close(self._stop_r)
            self.listener.close()
            self.callers.close()

    def _serve(self) -> None:
        try:
            if self._source is not None:
                try:
                    self.listener = Listener(self._source())
                except OSError as exc:
                    self.failed = exc
                    return
                finally:
                    self._got.release()
            self._loop()
        finally:
            self._done.release()

    def _loop(self) -> None:
        try:
            _drop_capabilities(self.numbers)
        except OSError:
            return  # the listener closes with the run: every call then fails (ENOSYS)
        while self.listener.wait(self._stop_r):
            try:
                n = self.listener.receive()
            except OSError:
                return
            if n is None:
                continue
            if not self.armed:  # bubblewrap setting the sandbox up, nothing else yet
                self._answer(n, cont=True)
                continue
            try:
                self._one(n)
            except Exception:  # never a call let through by a fault of ours
                self._answer(n, error=errno.EPERM)

    def _refused(self, why: str) -> None:
        if self.on_deny is not None:
            self.on_deny(why)

    def _one(self, n: Notification) -> None:
        name = self._names.get(n.nr, "")
        if self.reads is not None and name in ("open", "openat") and not (
                n.args[1 if name == "open" else 2] & OPEN_WRITE_FLAGS):
            self._read(n, name)
            return
        if name in ("execve", "execveat"):
            self._exec(n, name)
            return
        t: Target | None
        try:
            t = Target(n.pid, self.callers)
        except OSError:
            self._answer(n, error=errno.EPERM)
            return
        try:
            if not self.listener.valid(n):  # gone: its pid may be another process's now
                return
            if name == "connect":
                handed, t = t, None
                self._connect(handed, n)
                return
            self._hand(n, self._file(name, t, n))
        except Refused as exc:
            self._refused(exc.reason)
            self._answer(n, error=exc.errno or errno.EPERM)
        except OSError as exc:
            self._answer(n, error=exc.errno or errno.EPERM)
        finally:
            if t is not None:
                t.close()

    def _exec(self, n: Notification, name: str) -> None:
        """A program run by an approved command: judged against the approved tree
        (``reads.judge_exec``), then the kernel runs the call."""
        a = n.args
        if self.pin is None:
            self._answer(n, cont=True)
            return
        pin, own = self.pin, self.files.written if self.files is not None else set()

        def judged(t: Target) -> None:
            judge_exec(t, AT_FDCWD if name == "execve" else fd_arg(a[0]),
                       a[0] if name == "execve" else a[1],
                       name == "execveat" and bool(a[4] & 0x1000),  # AT_EMPTY_PATH
                       pin, own)
            if self.listener.valid(n):
                self._answer(n, cont=True)

        self._judged(n, judged)

    def _read(self, n: Notification, name: str) -> None:
        """An open that only reads (handed over only when reading is judged): the
        shortest way through, as most of a command's calls are these."""
        a, reads = n.args, self.reads
        assert reads is not None
        self._judged(n, lambda t: self._hand(n, open_for_reading(
            reads, t, AT_FDCWD if name == "open" else fd_arg(a[0]),
            a[0] if name == "open" else a[1], (a[1] if name == "open" else a[2]) & 0xFFFFFFFF,
            lambda: self.listener.valid(n), self.pin,
            self.files.written if self.files is not None else None)))

    def _judged(self, n: Notification, call: Callable[[Target], None]) -> None:
        """``call`` with the caller as a ``Target``; a refusal said and answered
        ``EACCES``, another failure answered with its error."""
        t = Target(n.pid, self.callers, pinned=False)
        try:
            call(t)
        except Refused as exc:
            self._refused(exc.reason)
            self._answer(n, error=exc.errno or errno.EACCES)
        except OSError as exc:
            self._answer(n, error=exc.errno or errno.EPERM)
        finally:
            t.close()

    def _hand(self, n: Notification, result: Fd | Later | int) -> None:
        """Complete ``n`` with what a handler returned: a descriptor put into the
        caller's table, an open that may wait (in a thread of its own), a value."""
        if isinstance(result, Later):
            _thread.start_new_thread(self._later, (n, result))
        elif isinstance(result, Fd):
            try:
                self.listener.answer_fd(n, result.fd, cloexec=result.cloexec)
            finally:
                os.close(result.fd)
        else:
            self._answer(n, value=result)

    def _later(self, n: Notification, later: Later) -> None:
        try:
            fd = later.open()
        except OSError as exc:
            self._answer(n, error=exc.errno or errno.EPERM)
            return
        try:
            self.listener.answer_fd(n, fd.fd, cloexec=fd.cloexec)
        except OSError:
            pass
        finally:
            os.close(fd.fd)

    def _file(self, name: str, t: Target, n: Notification) -> Fd | Later | int:
        f, a = self.files, n.args
        if f is None or name == "openat2":
            raise OSError(errno.ENOSYS, "openat2")  # libc falls back to openat
        if name == "open":
            return self._open(t, AT_FDCWD, a[0], a[1] & 0xFFFFFFFF, a[2] & 0xFFFF)
        if name == "openat":
            return self._open(t, fd_arg(a[0]), a[1], a[2] & 0xFFFFFFFF, a[3] & 0xFFFF)
        if name == "creat":
            return f.open(t, AT_FDCWD, a[0], os.O_CREAT | os.O_WRONLY | os.O_TRUNC,
                          a[1] & 0xFFFF)
        if name == "mkdir":
            return f.mkdir(t, AT_FDCWD, a[0], a[1] & 0xFFFF)
        if name == "mkdirat":
            return f.mkdir(t, a[0], a[1], a[2] & 0xFFFF)
        if name == "mknod":
            return f.mknod(t, AT_FDCWD, a[0], a[1] & 0xFFFFFFFF, a[2])
        if name == "mknodat":
            return f.mknod(t, a[0], a[1], a[2] & 0xFFFFFFFF, a[3])
        if name == "rename":
            return f.rename(t, AT_FDCWD, a[0], AT_FDCWD, a[1], 0)
        if name == "renameat":
            return f.rename(t, a[0], a[1], a[2], a[3], 0)
        if name == "renameat2":
            return f.rename(t, a[0], a[1], a[2], a[3], a[4] & 0xFFFFFFFF)
        if name == "link":
            return f.link(t, AT_FDCWD, a[0], AT_FDCWD, a[1], 0)
        if name == "linkat":
            return f.link(t, a[0], a[1], a[2], a[3], a[4] & 0xFFFFFFFF)
        if name == "symlink":
            return f.symlink(t, a[0], AT_FDCWD, a[1])
        if name == "symlinkat":
            return f.symlink(t, a[0], a[1], a[2])
        if name == "unlink":
            return f.unlink(t, AT_FDCWD, a[0], 0)
        if name == "unlinkat":
            return f.unlink(t, a[0], a[1], a[2] & 0xFFFFFFFF)
        if name == "rmdir":
            return f.unlink(t, AT_FDCWD, a[0], 0x200)
        if name == "truncate":
            return f.truncate(t, a[0], a[1])
        if name == "chmod":
            return f.chmod(t, AT_FDCWD, a[0], a[1] & 0xFFFF, 0)
        if name == "fchmodat":
            return f.chmod(t, a[0], a[1], a[2] & 0xFFFF, 0)
        if name == "fchmodat2":
            return f.chmod(t, a[0], a[1], a[2] & 0xFFFF, a[3] & 0xFFFFFFFF)
        if name == "fchmod":
            return f.fchmod(t, a[0] & 0xFFFFFFFF, a[1] & 0xFFFF)
        if name == "chown":
            return f.chown(t, AT_FDCWD, a[0], a[1], a[2], 0)
        if name == "lchown":
            return f.chown(t, AT_FDCWD, a[0], a[1], a[2], 0x100)
        if name == "fchownat":
            return f.chown(t, a[0], a[1], a[2], a[3], a[4] & 0xFFFFFFFF)
        raise OSError(errno.ENOSYS, name)

    def _open(self, t: Target, dirfd: int, address: int, flags: int, mode: int) -> Fd | Later:
        assert self.files is not None
        return self.files.open(t, dirfd, address, flags, mode)

    def _connect(self, t: Target, n: Notification) -> None:
        from .connect import Connection  # socket: only where unix sockets are allowed

        try:
            c = Connection.take(t, n, True)
        except OSError as exc:
            t.close()
            self._answer(n, error=exc.errno or errno.EPERM)
            return
        if c is None:  # not a unix socket: the kernel connects it (no decision here)
            t.close()
            self._answer(n, cont=True)
            return
        # a connect may wait (a full backlog): each unix one has a thread of its own
        _thread.start_new_thread(self._connect_unix, (t, n, c))

    def _connect_unix(self, t: Target, n: Notification, c: Any) -> None:
        from .connect import connect

        try:
            if self.sockets is None:
                raise Refused("unix sockets are not allowed by path")
            self._answer(n, value=connect(t, c, self.sockets, self._ids))
        except Refused as exc:
            self._refused(exc.reason)
            self._answer(n, error=errno.EACCES)
        except OSError as exc:
            self._answer(n, error=exc.errno or errno.ECONNREFUSED)
        except Exception:
            self._answer(n, error=errno.EPERM)
        finally:
            t.close()

    def _answer(self, n: Notification, *, value: int = 0, error: int = 0,
                cont: bool = False) -> None:
        try:
            self.listener.answer(n, value=value, error=error, cont=cont)
        except OSError:
            pass  # the listener was closed: the kernel fails the call itself


def _own_umask() -> int:
    """This process's umask, read without changing it."""
    try:
        with open(f"/proc/{os.getpid()}/status", "rb") as f:
            for line in f:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    return 0o022
