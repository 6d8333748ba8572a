"""Opens for reading, judged by the file they reach (``ReadRules``), when the
settings deny reading by glob (``**/.env``, ``**/*.pem``, credential globs).

The plan hides literal rules with mounts, but a glob names files nobody listed:
finding them before the run means walking the tree (the start then grows with
it), and a file that appears during the run would not be hidden. So, when the
settings have such globs, the filter hands every ``open``/``openat`` to the
broker, which opens the path as the caller would (``openat2`` in the caller's
root, ``RESOLVE_IN_ROOT``, no magic links), judges the path the opened file
really has (a link to a denied file is the denied file), and hands the
descriptor over, or answers ``EACCES``. The caller's memory is read once; the
kernel never reads the path again.

The few paths whose meaning depends on who opens them are read as the caller's:
``/proc/self`` and ``/proc/thread-self`` (the caller's numbers in the sandbox),
the links that lead there (``/etc/mtab``, ``/proc/mounts``, ``/proc/net``), the
caller's own descriptors (``/dev/stdin``, ``/proc/self/fd/N``), its executable,
its root and working folder. ``/dev/tty`` is refused (``ENXIO``): the broker's
terminal is not the sandbox's. A FIFO is opened again, waiting for a writer, in
a thread of its own (``Later``).
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat

from .handed import Fd, Later
from .notify import open_in_root
from .refused import Refused
from .target import AT_FDCWD, absolute, fd_alias

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from .judge import ReadRules
    from .pinned import Pin
    from .target import Target

_TTY = os.makedev(5, 0)
# links in the tree that lead to /proc/self (their text is read in the caller's root)
_SELF_LINKS = ("/etc/mtab", "/proc/mounts", "/proc/net")


class _Reopen(Later):
    """A FIFO opened again through the broker's own descriptor, waiting for a writer."""

    __slots__ = ()

    def open(self) -> Fd:
        try:
            return Fd(os.open(f"/proc/self/fd/{self.folder}", self.flags & ~os.O_NOFOLLOW
                              | os.O_NOCTTY | os.O_CLOEXEC), self.cloexec)
        finally:
            os.close(self.folder)


def open_for_reading(rules: ReadRules, t: Target, dirfd: int, address: int,
                     flags: int, pending: Callable[[], bool], pin: Pin | None = None,
                     own: set[tuple[int, int]] | None = None) -> Fd | Later:
    """``openat(dirfd, path, flags)`` of the caller, with no flag that writes.
    ``pending``: whether the call still waits (checked once what was read of the
    caller, its path and working folder, is known to be its own). ``pin``: the
    tree an approved command may read (``pinned``), ``own`` the files it wrote."""
    cloexec = bool(flags & os.O_CLOEXEC)
    flags &= ~os.O_CLOEXEC
    path = absolute(t, dirfd, os.fsdecode(t.string(address)))
    if not pending():
        raise OSError(errno.ESRCH, "the caller is gone")
    alias = fd_alias(path)
    if alias is not None:  # the caller's own descriptor, opened again
        where = t.alias_path(alias)
        _judge(rules, where)
        again = t.reopen(alias, flags & ~os.O_NOFOLLOW | os.O_NOCTTY)
        if pin is not None and not flags & os.O_PATH:
            try:
                copy = pin.handed(again, where, os.fstat(again), own or set())
            except BaseException:
                os.close(again)
                raise
            if copy is not None:
                os.close(again)
                again = copy
        return Fd(again, cloexec)
    if path.startswith(("/proc/", "/etc/mtab")):
        exe = _own_proc(t, rules, path, flags)
        if exe is not None:
            return Fd(exe, cloexec)
        path = _as_caller(t, path)
    # the path as named (a link under a denied folder is denied, wherever it points),
    # then the file it reaches (a link to a denied file is that file)
    _judge(rules, posixpath.normpath(path))
    # the file itself first (``O_PATH``: nothing of it runs, a device is not opened),
    # judged, then opened through that very descriptor with the caller's flags
    fd = open_in_root(t.root(), path, os.O_PATH | (flags & (os.O_NOFOLLOW | os.O_DIRECTORY)))
    try:
        st = os.fstat(fd)
        if stat.S_ISCHR(st.st_mode) and st.st_rdev == _TTY:
            raise OSError(errno.ENXIO, "no controlling terminal in the sandbox")
        real = os.readlink(f"/proc/self/fd/{fd}")
        _judge(rules, real)
        if flags & os.O_PATH:
            opened, fd = fd, -1
            return Fd(opened, cloexec)
        if stat.S_ISLNK(st.st_mode):
            raise OSError(errno.ELOOP, "a link, with O_NOFOLLOW")
        if pin is not None:
            if real != path:
                pin.route(path)
            copy = pin.handed(fd, real, st, own or set())
            if copy is not None:
                return Fd(copy, cloexec)
        if stat.S_ISFIFO(st.st_mode) and not flags & os.O_NONBLOCK:
            later, fd = _Reopen(fd, "", flags, cloexec), -1  # waits for a writer
            return later
        return Fd(os.open(f"/proc/self/fd/{fd}", flags & ~os.O_NOFOLLOW | os.O_NOCTTY
                          | os.O_CLOEXEC), cloexec)
    finally:
        if fd >= 0:
            os.close(fd)


def _judge(rules: ReadRules, path: str) -> None:
    if path.startswith("/"):
        why = rules.denied(path)
        if why:
            raise Refused(why, errno.EACCES)


def _own_proc(t: Target, rules: ReadRules, path: str, flags: int) -> int | None:
    """The caller's own executable opened again (judged by its path, like any
    file), or None for any other path."""
    if path not in ("/proc/self/exe", "/proc/thread-self/exe"):
        return None
    _judge(rules, t.exe())
    return t.reopen_exe(flags | os.O_NOCTTY)


def _as_caller(t: Target, path: str) -> str:
    """``path`` with the parts that name the opener (``/proc/self``) naming the caller
    instead, and ``/proc/self/root``, ``/proc/self/cwd`` read as the folders they
    are."""
    for _ in range(len(_SELF_LINKS)):
        link = next((x for x in _SELF_LINKS if path == x or path.startswith(x + "/")), None)
        if link is None:
            break
        try:
            text = os.readlink(link.lstrip("/"), dir_fd=t.root())
        except OSError:
            break
        base = link.rsplit("/", 1)[0]
        path = posixpath.normpath(text if text.startswith("/") else f"{base}/{text}") \
            + path[len(link):]
    for self_name in ("/proc/self", "/proc/thread-self"):
        if path == self_name or path.startswith(self_name + "/"):
            rest = path[len(self_name):]
            if rest == "/root" or rest.startswith("/root/"):
                return rest[5:] or "/"
            if rest == "/cwd" or rest.startswith("/cwd/"):
                return t.cwd().rstrip("/") + rest[4:]
            pid, tid = t.numbers()
            return (f"/proc/{pid}" if self_name == "/proc/self"
                    else f"/proc/{pid}/task/{tid}") + rest
    return path


def judge_exec(t: Target, dirfd: int, address: int, empty_path: bool, pin: Pin,
               own: set[tuple[int, int]]) -> None:
    """``execve``/``execveat`` of an approved command (``pin``): ``Refused`` unless
    the program it names is a file the approval recorded, unchanged (the kernel
    reads a program, or a script's ``#!`` line, without an open the broker sees),
    or one outside the tree, or the run's own. The caller goes on once this
    returns (the kernel runs the call itself)."""
    name = os.fsdecode(t.string(address))
    if empty_path and not name:
        raise Refused("running a program from a descriptor is not judged in an approved run",
                      errno.EACCES)
    path = absolute(t, dirfd, name)
    for _ in range(5):  # the kernel follows four levels of interpreters
        try:
            fd = open_in_root(t.root(), path, os.O_PATH)
        except OSError:
            return  # the kernel fails it too
        try:
            real = os.readlink(f"/proc/self/fd/{fd}")
            if real != path:
                pin.route(path)
            pin.check(real, os.fstat(fd), own)  # outside the tree or the run's own: as is
            interp = interpreter(fd)
        finally:
            os.close(fd)
        if interp is None:
            return
        # the kernel opens a script's #! program, or a binary's program interpreter,
        # itself, a relative one from the caller's working folder
        path = absolute(t, AT_FDCWD, interp)
    raise Refused(f"{path}: too many levels of interpreters", errno.ELOOP)


def interpreter(fd: int) -> str | None:
    """The program the kernel runs for the file at ``fd`` (``O_PATH``): a script's
    ``#!`` interpreter, or an ELF binary's ``PT_INTERP``; None for neither."""
    try:
        with open(f"/proc/self/fd/{fd}", "rb") as fh:
            head = fh.read(256)
            if head.startswith(b"#!"):
                line = head[2:].split(b"\n", 1)[0].strip()
                word = line.split(None, 1)[0] if line else b""
                return os.fsdecode(word) or None
            if head[:5] != b"\x7fELF\x02" or head[5:6] != b"\x01":
                return None  # only 64-bit little-endian binaries are read
            import struct

            phoff, = struct.unpack_from("<Q", head, 32)
            phentsize, phnum = struct.unpack_from("<HH", head, 54)
            for i in range(min(phnum, 64)):
                fh.seek(phoff + i * phentsize)
                ph = fh.read(56)
                if len(ph) < 56:
                    return None
                kind, _, offset, _, _, size = struct.unpack_from("<IIQQQQ", ph)
                if kind == 3:  # PT_INTERP
                    fh.seek(offset)
                    return os.fsdecode(fh.read(min(size, 4096)).split(b"\0", 1)[0]) or None
    except (OSError, ValueError):
        return None
    return None
