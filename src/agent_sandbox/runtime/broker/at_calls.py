"""Calls on a name in an open folder, as the broker makes them: never through a
link at the name (``renameat2`` with its flags, a mode set through an ``O_PATH``
descriptor), and whether a folder holds a name."""

from __future__ import annotations

import errno
import os
import stat

from .target import Place


def caller_id(value: int) -> int:
    value &= 0xFFFFFFFF
    return -1 if value == 0xFFFFFFFF else value


def path_of(fd: int) -> str:
    return f"/proc/self/fd/{fd}"


def holds(folder: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=folder, follow_symlinks=False)
        return True
    except OSError:
        return False


def chmod_at(place: Place, mode: int) -> None:
    fd = os.open(place.name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=place.folder)
    try:
        if stat.S_ISLNK(os.fstat(fd).st_mode):
            raise OSError(errno.EOPNOTSUPP, "a link has no mode")
        os.chmod(path_of(fd), mode)
    finally:
        os.close(fd)


def renameat2(src: Place, dst: Place, flags: int) -> None:
    if not flags:
        os.rename(src.name, dst.name, src_dir_fd=src.folder, dst_dir_fd=dst.folder)
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.renameat2(src.folder, os.fsencode(src.name), dst.folder, os.fsencode(dst.name),
                      flags) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
