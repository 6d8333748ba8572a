"""seccomp user notification: the kernel hands a chosen syscall to this process.

The mechanism under every brokered decision (``broker``): a filter whose
action is ``SECCOMP_RET_USER_NOTIF`` is installed, with a listener, in the
child that goes on to exec bubblewrap (``install``, run between fork and exec),
so it holds for bwrap and for everything in the sandbox; the listener comes
back to the launcher over a socket, and the launcher answers each notification
(``Listener``): a result it produced itself, an error, or "continue" where the
decision cannot depend on memory the command can still change.

What a supervisor must never do, and this module makes easy not to: decide on
bytes of the target's memory and then let the kernel read them again
(``continue``); a second thread of the command can change them in between. A
decision about a pointer argument is carried out by the supervisor itself, on
its own copy (``read_memory``), or refused. Every error here refuses: a listener
that goes away makes the pending and every later call fail (``ENOSYS``).
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import select
import sys

from ..bwrap.seccomp import (
    _JEQ_K,
    _JGE_K,
    _JSET_K,
    _LD_W_ABS,
    _RET_K,
    ARCHES,
    ENOSYS,
    RET_ALLOW,
    RET_ERRNO,
    RET_KILL,
    SeccompError,
    assemble,
    ins,
)

RET_USER_NOTIF = 0x7FC00000
_SET_MODE_FILTER = 1
_FLAG_NEW_LISTENER = 1 << 3
_PR_SET_NO_NEW_PRIVS = 38
FLAG_CONTINUE = 1

# struct seccomp_notif (80 bytes) and struct seccomp_notif_resp (24 bytes)
_NOTIF_SIZE = 80
_RESP_SIZE = 24
_IOCTL_RECV = 0xC0502100  # _IOWR('!', 0, struct seccomp_notif)
_IOCTL_SEND = 0xC0182101  # _IOWR('!', 1, struct seccomp_notif_resp)
_IOCTL_ID_VALID = 0x40082102  # _IOW('!', 2, __u64)
_IOCTL_ADDFD = 0x40182103  # _IOW('!', 3, struct seccomp_notif_addfd)
_ADDFD_FLAG_SEND = 1 << 1
_IOCTL_SET_FLAGS = 0x40082104  # _IOW('!', 4, __u64)
_FD_SYNC_WAKE_UP = 1

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

_SYSCALLS = {"x86_64": {"seccomp": 317, "pidfd_getfd": 438, "openat2": 437},
             "aarch64": {"seccomp": 277, "pidfd_getfd": 438, "openat2": 437}}
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_IN_ROOT = 0x10
_OPENAT2_TRIES = 64  # EAGAIN: the host renamed or mounted meanwhile (open_in_root)

# the calls a broker may be handed, by number (x86_64, aarch64)
_X86 = {
    "open": 2, "openat": 257, "creat": 85, "openat2": 437, "mkdir": 83, "mkdirat": 258,
    "mknod": 133, "mknodat": 259, "rename": 82, "renameat": 264, "renameat2": 316,
    "link": 86, "linkat": 265, "symlink": 88, "symlinkat": 266, "unlink": 87,
    "unlinkat": 263, "rmdir": 84, "truncate": 76, "chmod": 90, "fchmodat": 268,
    "fchmodat2": 452, "fchmod": 91, "chown": 92, "lchown": 94, "fchownat": 260,
    "connect": 42, "capset": 126, "capget": 125, "execve": 59, "execveat": 322,
}
_ARM64 = {
    "openat": 56, "openat2": 437, "mkdirat": 34, "mknodat": 33, "renameat": 38,
    "renameat2": 276, "linkat": 37, "symlinkat": 36, "unlinkat": 35, "truncate": 45,
    "fchmodat": 53, "fchmodat2": 452, "fchmod": 52, "fchownat": 54, "connect": 203,
    "capset": 91, "capget": 90, "execve": 221, "execveat": 281,
}
SYSCALLS = {"x86_64": _X86, "aarch64": _ARM64}
FILE_CALLS = tuple(k for k in _X86 if k not in (
    "connect", "capset", "capget", "openat2", "open", "openat", "execve", "execveat"))
# brought in an approved run only (``pinned``): the program a call runs
EXEC_CALLS = ("execve", "execveat")
# open and openat are brought only when they may write (their flags say so)
OPEN_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | 0o20000000



_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _nr(name: str) -> int:
    table = _SYSCALLS.get(os.uname().machine)
    if table is None:
        raise SeccompError(f"no seccomp notification for architecture {os.uname().machine!r}")
    return table[name]


def _checked(ret: int) -> int:
    if ret < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return ret


def program(names: Sequence[str], *, write_opens: bool = False, all_opens: bool = False,
            enosys: Sequence[str] = (), machine: str | None = None) -> bytes:
    """A filter that hands ``names`` to the listener, refuses ``enosys`` with
    ``ENOSYS`` (libc falls back to an older call that is handed over), and allows
    everything else; ``write_opens``: ``open``/``openat`` too, when their flags
    may write (a read-only open is never slowed); ``all_opens``: every ``open``
    and ``openat`` (reading is judged too). The sandbox's own filter,
    stacked under it, still refuses what it refuses (the kernel applies the
    strictest answer). A foreign architecture is killed."""
    machine = machine or os.uname().machine
    arch = ARCHES.get(machine)
    table = SYSCALLS.get(machine)
    if arch is None or table is None:
        raise SeccompError(f"no seccomp notification for architecture {machine!r}")
    code = [ins(_LD_W_ABS, k=4), ins(_JEQ_K, 1, 0, int(arch["audit"])),  # type: ignore[call-overload]
            ins(_RET_K, k=RET_KILL), ins(_LD_W_ABS, k=0)]
    if arch["x32"]:
        code.append(ins(_JGE_K, "kill", 0, 0x40000000))
    for name in (*names, *(("open", "openat") if all_opens else ())):
        if name in table:
            code.append(ins(_JEQ_K, "notify", 0, table[name]))
    for name in enosys:
        if name in table:
            code.append(ins(_JEQ_K, "enosys", 0, table[name]))
    if write_opens and not all_opens:
        if "open" in table:
            code.append(ins(_JEQ_K, "open", 0, table["open"]))
        code.append(ins(_JEQ_K, "openat", 0, table["openat"]))
    code.append(ins(_RET_K, k=RET_ALLOW))
    labels: dict[str, int] = {}
    if write_opens and not all_opens:
        labels["open"] = len(code)
        code.append(ins(_LD_W_ABS, k=24))  # args[1] low word: open's flags
        code.append(ins(_JSET_K, "notify", "allow", OPEN_WRITE_FLAGS))
        labels["openat"] = len(code)
        code.append(ins(_LD_W_ABS, k=32))  # args[2] low word: openat's flags
        code.append(ins(_JSET_K, "notify", "allow", OPEN_WRITE_FLAGS))
    labels["allow"] = len(code)
    code.append(ins(_RET_K, k=RET_ALLOW))
    labels["notify"] = len(code)
    code.append(ins(_RET_K, k=RET_USER_NOTIF))
    labels["enosys"] = len(code)
    code.append(ins(_RET_K, k=RET_ERRNO | ENOSYS))
    labels["kill"] = len(code)
    code.append(ins(_RET_K, k=RET_KILL))
    return assemble(code, labels)


class Installer:
    """What the child runs between fork and exec: no-new-privileges and the filter
    with its listener, which it hands to the launcher and then closes, so that
    bwrap and the command never hold it. Two ways to hand it over: by default
    the child writes the listener's number to a pipe and waits until the
    launcher has taken a copy (``take_listener``, ``pidfd_getfd``); with
    ``send`` (a parent that waits for the exec itself, as ``subprocess`` does)
    it sends a copy over a socket and goes on. Everything it needs is made
    before the fork; on any failure the child ends (the launcher refuses the
    start)."""

    def __init__(self, prog: bytes, *, send: bool = False) -> None:
        self._buf = ctypes.create_string_buffer(prog, len(prog))

        class _Fprog(ctypes.Structure):
            _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

        self._fprog = _Fprog(len(prog) // 8, ctypes.addressof(self._buf))
        self._nr = _nr("seccomp")
        self.send: object = None
        if send:
            import socket

            self.send = socket
            a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            self.tell_r, self.tell_w = a.detach(), b.detach()
            self.taken_r = self.taken_w = -1
        else:
            self.tell_r, self.tell_w = os.pipe2(os.O_CLOEXEC)
            self.taken_r, self.taken_w = os.pipe2(os.O_CLOEXEC)

    def __call__(self) -> None:  # pragma: no cover - runs in the forked child
        if self.tell_r >= 0:  # (``send``: the launcher may be receiving on it already)
            os.close(self.tell_r)
        if self.taken_w >= 0:
            os.close(self.taken_w)
        if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            os._exit(126)
        fd = _libc.syscall(self._nr, _SET_MODE_FILTER, _FLAG_NEW_LISTENER,
                           ctypes.byref(self._fprog))
        if fd < 0:
            os._exit(126)
        if self.send is not None:
            socket = self.send
            s = socket.socket(fileno=self.tell_w)  # type: ignore[attr-defined]
            socket.send_fds(s, [b"L"], [fd])  # type: ignore[attr-defined]
            s.close()
        else:
            os.write(self.tell_w, b"%d\n" % fd)
            os.read(self.taken_r, 1)
            os.close(self.tell_w)
            os.close(self.taken_r)
        os.close(fd)

    def forked(self) -> None:
        """The child exists (``send``): this process's end of the child's socket is
        closed, so a child that ends without sending ends ``receive_listener``."""
        if self.tell_w >= 0:
            os.close(self.tell_w)
            self.tell_w = -1

    def receive_listener(self) -> int:
        """``send``: the listener the child sends, received (``OSError`` when it
        sends none); may wait while the child is forked (``forked``), so that a
        broker serves the child's calls before its ``exec``."""
        refused = OSError(errno.EPROTO, "the sandbox's broker could not be set up "
                          "(seccomp user notification refused)")
        socket = self.send
        s = socket.socket(fileno=self.tell_r)  # type: ignore[attr-defined]
        self.tell_r = -1
        try:
            s.settimeout(30)
            msg, fds, _, _ = socket.recv_fds(s, 4, 1)  # type: ignore[attr-defined]
        finally:
            s.close()
        if msg != b"L" or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            raise refused
        return int(fds[0])

    def take_listener(self, pid: int) -> int:
        """A copy of the listener the child ``pid`` made (``OSError`` when it made
        none); the child goes on to exec once this returns."""
        if self.send is not None:
            self.forked()
            return self.receive_listener()
        for own in (self.tell_w, self.taken_r):
            if own >= 0:
                os.close(own)
        self.tell_w = self.taken_r = -1
        refused = OSError(errno.EPROTO, "the sandbox's broker could not be set up "
                          "(seccomp user notification refused)")
        try:
            line = b""
            while not line.endswith(b"\n"):
                chunk = os.read(self.tell_r, 16)
                if not chunk:
                    raise refused
                line += chunk
            pidfd = os.pidfd_open(pid)
            try:
                return pidfd_getfd(pidfd, int(line))
            finally:
                os.close(pidfd)
        finally:
            if self.taken_w >= 0:
                os.write(self.taken_w, b"x")
            self.close()

    def close(self) -> None:
        for name in ("tell_r", "tell_w", "taken_r", "taken_w"):
            fd = getattr(self, name)
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
                setattr(self, name, -1)


class Notification:
    """One pending call: ``pid`` (in this process's pid namespace), ``nr``, ``args``."""

    __slots__ = ("args", "id", "nr", "pid")

    def __init__(self, raw: bytes) -> None:
        words = memoryview(raw).cast("Q")  # {u64 id; u32 pid, flags; seccomp_data}
        self.id = words[0]
        self.pid = words[1] & 0xFFFFFFFF if sys.byteorder == "little" else words[1] >> 32
        nr = words[2] & 0xFFFFFFFF if sys.byteorder == "little" else words[2] >> 32
        self.nr = nr - (1 << 32) if nr & 0x80000000 else nr
        self.args = tuple(words[4:10])


class Listener:
    """The launcher's end of a notification filter."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._poll: select.poll | None = None
        try:  # the caller's CPU switches straight to this thread (Linux 6.6): faster
            fcntl.ioctl(fd, _IOCTL_SET_FLAGS, _FD_SYNC_WAKE_UP)
        except (OSError, ValueError):
            pass

    def wait(self, stop: int) -> bool:
        """Block until a notification is pending (True) or ``stop`` is readable or
        every process under the filter has ended (False)."""
        p = self._poll
        if p is None:
            p = self._poll = select.poll()
            p.register(self.fd, select.POLLIN)
            p.register(stop, select.POLLIN)
        while True:
            try:
                events = p.poll()
            except InterruptedError:
                continue
            for fd, ev in events:
                if fd == stop:
                    return False
                if ev & select.POLLIN:
                    return True
                return False  # POLLHUP: no process is left under the filter

    def receive(self) -> Notification | None:
        """The next notification; None when its caller went away meanwhile."""
        buf = bytearray(_NOTIF_SIZE)  # must be zeroed: the kernel refuses otherwise
        try:
            fcntl.ioctl(self.fd, _IOCTL_RECV, buf, True)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.EINTR):
                return None
            raise
        return Notification(bytes(buf))

    def valid(self, n: Notification) -> bool:
        """Whether ``n`` is still pending (its caller alive, in the same call): checked
        after anything is opened by its pid, so a reused pid is never trusted."""
        try:
            fcntl.ioctl(self.fd, _IOCTL_ID_VALID, n.id.to_bytes(8, sys.byteorder))
        except OSError:
            return False
        return True

    def answer(self, n: Notification, *, value: int = 0, error: int = 0,
               cont: bool = False) -> None:
        """Complete the call: ``error`` (a positive errno) or ``value``; ``cont``: the
        kernel runs the call itself (only where no decision depends on memory)."""
        resp = (n.id.to_bytes(8, sys.byteorder) + value.to_bytes(8, sys.byteorder, signed=True)
                + (-error).to_bytes(4, sys.byteorder, signed=True)
                + (FLAG_CONTINUE if cont else 0).to_bytes(4, sys.byteorder))
        try:
            fcntl.ioctl(self.fd, _IOCTL_SEND, bytearray(resp), True)
        except OSError as exc:
            if exc.errno != errno.ENOENT:  # the caller went away: nothing to answer
                raise

    def answer_fd(self, n: Notification, fd: int, *, cloexec: bool) -> None:
        """Complete the call with a copy of ``fd`` put into the caller's descriptor
        table (its number is the call's result), in one step (``ADDFD_FLAG_SEND``)."""
        req = (n.id.to_bytes(8, sys.byteorder) + _ADDFD_FLAG_SEND.to_bytes(4, sys.byteorder)
               + fd.to_bytes(4, sys.byteorder) + (0).to_bytes(4, sys.byteorder)
               + (os.O_CLOEXEC if cloexec else 0).to_bytes(4, sys.byteorder))
        try:
            fcntl.ioctl(self.fd, _IOCTL_ADDFD, bytearray(req), True)
        except OSError as exc:
            if exc.errno != errno.ENOENT:
                raise

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def pidfd_getfd(pidfd: int, target_fd: int) -> int:
    """A duplicate of the target's descriptor ``target_fd`` (the same open file)."""
    return _checked(_libc.syscall(_nr("pidfd_getfd"), pidfd, target_fd, 0))


_OPENAT2 = _SYSCALLS.get(os.uname().machine, {}).get("openat2", 437)


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64),
                ("resolve", ctypes.c_uint64)]


def open_in_root(root: int, path: str, flags: int) -> int:
    """``openat2(root, path)`` with ``RESOLVE_IN_ROOT`` and no magic links: the path
    as a process whose root is ``root`` resolves it, in one call (``ENOSYS``
    before Linux 5.6). The kernel answers ``EAGAIN`` when a rename or a mount
    anywhere on the host happened while it resolved a ``..`` (it cannot tell the
    walk stayed in the root): tried again then, as openat2(2) says to, a few times
    (a command's open never fails because the host is busy)."""
    how = _OpenHow(flags | os.O_CLOEXEC, 0, RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)
    name = os.fsencode(path)
    for _ in range(_OPENAT2_TRIES - 1):
        fd = _libc.syscall(_OPENAT2, root, name, ctypes.byref(how), ctypes.sizeof(how))
        if fd >= 0 or ctypes.get_errno() != errno.EAGAIN:
            return _checked(fd)
    return _checked(_libc.syscall(_OPENAT2, root, name, ctypes.byref(how),
                                  ctypes.sizeof(how)))
