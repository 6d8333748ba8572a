"""The sandboxed caller of a brokered call, as the broker reaches it from outside.

Everything is read through ``/proc/<pid>`` of the launcher's own view (the
caller's pid as the notification gives it): its memory (a copy, taken once),
its root and working folder, its descriptors, its umask. A path is resolved as
the caller would resolve it (``locate``): one name at a time from its root
(absolute links and ``..`` stay inside its view, with its mounts, so a
read-only mount refuses the broker as it refuses the caller), a link read as
text and followed as a path (a ``/proc`` magic link leads nowhere from
outside; the few a shell uses, ``/dev/stdout`` and ``/proc/self/fd/N``, are
re-opened through the caller's own descriptor), down to an open folder and one
name in it. The broker then acts on that folder and name only (``*at`` calls,
never following a link at the name), so what it judged is what it changes.
"""

from __future__ import annotations

import errno
import os
import stat

from .notify import open_in_root

AT_FDCWD = -100
_PATH_MAX = 4096
_PAGE = 4096
_MAX_LINKS = 40
_FD_ALIASES = {"/dev/stdin": 0, "/dev/stdout": 1, "/dev/stderr": 2}


class Callers:
    """What the broker keeps between calls of one run: the sandbox's root (the same
    for every process in it: ``chroot``, ``pivot_root``, ``setns`` and mounts are
    refused there) and a memory descriptor per caller. A descriptor kept past an
    ``exec`` or past its process's end reads nothing, and is opened again; what
    was read is trusted only once the call is known to be still pending
    (``Listener.valid``), as with a fresh one."""

    def __init__(self) -> None:
        self.root = -1
        self._mems: dict[int, int] = {}

    def set_root(self, pid: int) -> None:
        if self.root < 0:
            self.root = os.open(f"/proc/{pid}/root",
                                os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)

    def memory(self, pid: int, address: int, size: int) -> bytes:
        fd = self._mems.get(pid, -1)
        if fd >= 0:
            try:
                data = os.pread(fd, size, address)
                if data:
                    return data
            except OSError:
                pass
            os.close(self._mems.pop(pid))
        if len(self._mems) >= 256:
            self.close_memories()
        fd = self._mems[pid] = os.open(f"/proc/{pid}/mem", os.O_RDONLY | os.O_CLOEXEC)
        return os.pread(fd, size, address)

    def close_memories(self) -> None:
        for fd in self._mems.values():
            os.close(fd)
        self._mems.clear()

    def close(self) -> None:
        self.close_memories()
        if self.root >= 0:
            os.close(self.root)
            self.root = -1


class Target:
    """One caller: open while its call is handled (``with Target(pid) as t``).
    ``callers``: the run's shared root and memory descriptors (``Callers``);
    ``pinned``: its ``/proc`` folder opened at once (before the call is checked
    to be pending, so nothing reached through it can be another process's)."""

    def __init__(self, pid: int, callers: Callers | None = None, *,
                 pinned: bool = True) -> None:
        self.pid = pid
        self.callers = callers
        self._dir = -1
        self._mem = -1
        self._root = -1
        if pinned:
            self._dir = self.dir

    @property
    def dir(self) -> int:
        if self._dir < 0:
            self._dir = os.open(f"/proc/{self.pid}",
                                os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        return self._dir

    def __enter__(self) -> Target:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for fd in (self._mem, self._root, self._dir):
            if fd >= 0:
                os.close(fd)
        self._mem = self._root = self._dir = -1

    def memory(self, address: int, size: int) -> bytes:
        if self.callers is not None and self._dir < 0:
            return self.callers.memory(self.pid, address, size)
        if self._mem < 0:
            self._mem = os.open("mem", os.O_RDONLY | os.O_CLOEXEC, dir_fd=self.dir)
        return os.pread(self._mem, size, address)

    def string(self, address: int) -> bytes:
        """The NUL-terminated string at ``address`` (read page by page: the rest of
        a page may be unmapped); ``ENAMETOOLONG`` past ``PATH_MAX``."""
        if address == 0:
            raise OSError(errno.EFAULT, "a null path")
        out = b""
        while len(out) < _PATH_MAX:
            size = _PAGE - (address + len(out)) % _PAGE
            try:
                chunk = self.memory(address + len(out), size)
            except OSError:
                raise OSError(errno.EFAULT, "a path the caller cannot read") from None
            if not chunk:
                raise OSError(errno.EFAULT, "a path the caller cannot read")
            end = chunk.find(b"\0")
            if end >= 0:
                return out + chunk[:end]
            out += chunk
        raise OSError(errno.ENAMETOOLONG, "path too long")

    def root(self) -> int:
        if self.callers is not None and self.callers.root >= 0:
            return self.callers.root
        if self._root < 0:
            self._root = os.open("root", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC,
                                 dir_fd=self.dir)
        return self._root

    def fd_path(self, fd: int) -> str:
        return self._readlink(f"fd/{fd}")

    def alias_path(self, fd: int) -> str:
        """Where the caller's own descriptor ``fd`` leads (``/dev/stdout``,
        ``/proc/self/fd/N`` opened again); ``ENOENT`` when it has none such."""
        try:
            return self.fd_path(fd)
        except OSError:
            raise OSError(errno.ENOENT, "no such descriptor") from None

    def cwd(self) -> str:
        return self._readlink("cwd")

    def _readlink(self, name: str) -> str:
        if self._dir < 0:  # not pinned: checked pending afterwards (``Callers``)
            return os.readlink(f"/proc/{self.pid}/{name}")
        return os.readlink(name, dir_fd=self._dir)

    def umask(self) -> int:
        fd = os.open("status", os.O_RDONLY | os.O_CLOEXEC, dir_fd=self.dir)
        try:
            data = os.read(fd, 4096)
        finally:
            os.close(fd)
        at = data.find(b"\nUmask:\t")
        return int(data[at + 8:at + 12], 8) if at >= 0 else 0o022

    def numbers(self) -> tuple[int, int]:
        """The caller's process and thread numbers in its own (the sandbox's) view."""
        fd = os.open("status", os.O_RDONLY | os.O_CLOEXEC, dir_fd=self.dir)
        try:
            data = os.read(fd, 4096)
        finally:
            os.close(fd)
        got = {}
        for line in data.split(b"\n"):
            key, _, value = line.partition(b":")
            if key in (b"NStgid", b"NSpid"):
                got[key] = int(value.split()[-1])
        return got[b"NStgid"], got[b"NSpid"]

    def exe(self) -> str:
        return os.readlink("exe", dir_fd=self.dir)

    def reopen_exe(self, flags: int) -> int:
        """The caller's own executable opened again (what ``/proc/self/exe`` is)."""
        return os.open("exe", flags | os.O_CLOEXEC, dir_fd=self.dir)

    def reopen(self, fd: int, flags: int, mode: int = 0) -> int:
        """The caller's descriptor ``fd`` opened again (what ``/proc/self/fd/N`` does
        for it), never following anything but that descriptor's own file."""
        return os.open(f"fd/{fd}", flags | os.O_CLOEXEC, mode, dir_fd=self.dir)


def fd_arg(value: int) -> int:
    """A descriptor argument as the kernel reads it (an int: AT_FDCWD is -100)."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def fd_alias(path: str) -> int | None:
    """The descriptor number a path names through the caller's own links
    (``/dev/stdout``, ``/dev/fd/N``, ``/proc/self/fd/N``), or None."""
    if path in _FD_ALIASES:
        return _FD_ALIASES[path]
    for prefix in ("/dev/fd/", "/proc/self/fd/", "/proc/thread-self/fd/"):
        if path.startswith(prefix) and path[len(prefix):].isdigit():
            return int(path[len(prefix):])
    return None


def absolute(t: Target, dirfd: int, path: str) -> str:
    """``path`` as an absolute path of the caller's view (``dirfd`` as the call
    names it: ``AT_FDCWD`` or one of its descriptors)."""
    if not path:
        raise OSError(errno.ENOENT, "an empty path")
    if path.startswith(("/proc/self/", "/proc/thread-self/", "/dev/fd/")):
        inside = _through_own_links(t, path)
        if inside is not None:
            return inside
    if path.startswith("/"):
        return path
    base = t.cwd() if dirfd == AT_FDCWD else t.fd_path(dirfd)
    if not base.startswith("/") or base.endswith(" (deleted)"):
        raise OSError(errno.ENOTDIR, "not a folder")
    return base.rstrip("/") + "/" + path


def _through_own_links(t: Target, path: str) -> str | None:
    """A path through the caller's own folder links (``/proc/self/fd/N/name``,
    ``/dev/fd/N/name``, ``/proc/self/cwd/name``, as programs that hold a folder open
    write), as the path of that folder in its view; None for anything else."""
    for prefix in ("/proc/self/fd/", "/proc/thread-self/fd/", "/dev/fd/"):
        if path.startswith(prefix):
            num, sep, rest = path[len(prefix):].partition("/")
            if num.isdigit() and sep:
                base = t.fd_path(int(num))
                break
            return None
    else:
        if path.startswith(("/proc/self/cwd/", "/proc/thread-self/cwd/")):
            base, rest = t.cwd(), path.split("/cwd/", 1)[1]
        else:
            return None
    if not base.startswith("/") or base.endswith(" (deleted)"):
        raise OSError(errno.ENOTDIR, "not a folder")
    return base.rstrip("/") + "/" + rest


class Place:
    """An open folder of the caller's view and one name in it."""

    __slots__ = ("folder", "name", "parent")

    def __init__(self, folder: int, parent: str, name: str) -> None:
        self.folder, self.parent, self.name = folder, parent, name

    @property
    def path(self) -> str:
        return (self.parent.rstrip("/") or "") + "/" + self.name

    def close(self) -> None:
        if self.folder >= 0:
            os.close(self.folder)
            self.folder = -1

    def lstat(self) -> os.stat_result | None:
        try:
            return os.stat(self.name, dir_fd=self.folder, follow_symlinks=False)
        except FileNotFoundError:
            return None


def _parts(path: str) -> list[str]:
    return [p for p in path.split("/") if p and p != "."]


def _ident(fd: int) -> tuple[int, int, int]:
    st = os.fstat(fd)
    return (st.st_dev, st.st_ino, mount_id(fd))


def folder_at(t: Target, path: str) -> int:
    """An ``O_PATH`` descriptor of the folder ``path`` names in the caller's view,
    every link on the way followed as the caller's kernel would (at most 40)."""
    root = t.root()
    try:
        return open_in_root(root, path or "/", os.O_PATH | os.O_DIRECTORY)
    except OSError as exc:
        if exc.errno != errno.ENOSYS:
            raise
    top = _ident(root)  # before Linux 5.6: one name at a time
    fd = os.dup(root)
    todo = _parts(path)
    links = 0
    try:
        while todo:
            part = todo.pop(0)
            if part == "..":
                if _ident(fd) == top:
                    continue  # the caller's root has no parent it can see
                up = os.open("..", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=fd)
                os.close(fd)
                fd = up
                continue
            nxt = os.open(part, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            mode = os.fstat(nxt).st_mode
            if stat.S_ISLNK(mode):
                os.close(nxt)
                links += 1
                if links > _MAX_LINKS:
                    raise OSError(errno.ELOOP, "too many levels of symbolic links")
                link = os.readlink(part, dir_fd=fd)
                if link.startswith("/"):
                    os.close(fd)
                    fd = os.dup(root)
                todo = _parts(link) + todo
                continue
            if not stat.S_ISDIR(mode):
                os.close(nxt)
                raise OSError(errno.ENOTDIR, "not a folder")
            os.close(fd)
            fd = nxt
        return fd
    except BaseException:
        os.close(fd)
        raise


def locate(t: Target, path: str, *, follow: bool) -> Place:
    """The folder and name ``path`` (absolute, of the caller's view) leads to;
    ``follow``: a link at the last name is followed (as far as it leads: a
    link to nothing gives the name it points at)."""
    for _ in range(_MAX_LINKS):
        trimmed = path.rstrip("/") or "/"
        if trimmed == "/":
            raise OSError(errno.EBUSY, "the root folder")
        parent, name = trimmed.rsplit("/", 1)
        folder = folder_at(t, parent or "/")
        try:
            where = os.readlink(f"/proc/self/fd/{folder}")
        except OSError:
            os.close(folder)
            raise
        place = Place(folder, where, name)
        if name in (".", "..") or not follow:
            return place
        st = place.lstat()
        if st is None or not stat.S_ISLNK(st.st_mode):
            return place
        link = os.readlink(name, dir_fd=folder)
        place.close()
        path = link if link.startswith("/") else where.rstrip("/") + "/" + link
    raise OSError(errno.ELOOP, "too many levels of symbolic links")


def mount_id(fd: int) -> int:
    """The mount an open descriptor is on (its ``fdinfo``)."""
    with open(f"/proc/self/fdinfo/{fd}", "rb") as f:
        for line in f:
            if line.startswith(b"mnt_id:"):
                return int(line.split()[1])
    raise OSError(errno.EBUSY, "no mount id")


def not_a_mount(place: Place) -> None:
    """``EBUSY`` where the name is a mount point of the caller's view: the broker's
    own calls are made from the host's mount namespace, where the kernel would
    not refuse renaming or removing it (a read-only file or a hidden one). The
    name, looked up from the caller's folder, lands on the mount's root: on
    another mount than the folder's."""
    fd = os.open(place.name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=place.folder)
    try:
        if mount_id(fd) != mount_id(place.folder):
            raise OSError(errno.EBUSY, "a mount point")
    finally:
        os.close(fd)
