"""Writing a file whole, atomically, in a folder someone else may write.

Every file the host writes goes through here: settings and connector files in a
repository (where a sandboxed command has written before), the state under the
account's home, rendered output. A reader sees the old bytes or the new, whole.

The temporary file gets a name nobody can predict (never the pid: a command can
occupy or link every name it can predict), is created exclusively and never
through a link, gets its mode on the descriptor (``chmod`` by path follows a
link), and is renamed within the same open folder, so a folder renamed or
exchanged meanwhile cannot take the bytes elsewhere. A link already at the
target is replaced, never written through. Stdlib only.
"""

from __future__ import annotations

import contextlib
import os

_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
_TRIES = 16


def _open_folder(folder: str) -> int | None:
    """The folder, open, or None where folders cannot be opened (Windows)."""
    if not hasattr(os, "O_DIRECTORY"):
        return None
    return os.open(folder or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def _new_temporary(name: str, dfd: int | None, folder: str) -> tuple[str, int]:
    """A fresh temporary file beside ``name``: (its name, its descriptor)."""
    for _ in range(_TRIES):
        tmp = f".{name}.{os.urandom(8).hex()}.tmp"
        try:
            if dfd is None:
                return tmp, os.open(os.path.join(folder, tmp), _CREATE, 0o600)
            return tmp, os.open(tmp, _CREATE, 0o600, dir_fd=dfd)
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name for {name} in {folder}")


def _write_all(fd: int, data: bytes, mode: int, sync: bool) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    if hasattr(os, "fchmod"):
        os.fchmod(fd, mode)
    if sync:
        os.fsync(fd)


def _unlink(folder: str, name: str, dfd: int | None) -> None:
    with contextlib.suppress(OSError):
        if dfd is None:
            os.unlink(os.path.join(folder, name))
        else:
            os.unlink(name, dir_fd=dfd)


def _place(folder: str, name: str, dfd: int | None, tmp: str, first_wins: bool) -> None:
    """Put ``tmp`` at ``name``: renamed over it, or (``first_wins``) linked there
    unless something is there already."""
    if dfd is None:
        src, dst = os.path.join(folder, tmp), os.path.join(folder, name)
        if first_wins:
            with contextlib.suppress(FileExistsError):
                os.link(src, dst)
        else:
            os.replace(src, dst)
    elif first_wins:
        with contextlib.suppress(FileExistsError):
            os.link(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd, follow_symlinks=False)
    else:
        os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)


def _write_in(folder: str, dfd: int | None, name: str, data: bytes, mode: int, sync: bool,
              first_wins: bool, times_ns: tuple[int, int] | None = None) -> None:
    tmp, fd = _new_temporary(name, dfd, folder)
    try:
        try:
            _write_all(fd, data, mode, sync)
            if times_ns is not None:
                os.utime(fd, ns=times_ns)
        finally:
            os.close(fd)
        _place(folder, name, dfd, tmp, first_wins)
    except BaseException:
        _unlink(folder, tmp, dfd)
        raise
    if first_wins:
        _unlink(folder, tmp, dfd)
    if sync and dfd is not None:
        os.fsync(dfd)


def _write(path: str, data: bytes, mode: int, sync: bool, first_wins: bool) -> None:
    folder, name = os.path.split(path)
    dfd = _open_folder(folder)
    try:
        _write_in(folder, dfd, name, data, mode, sync, first_wins)
    finally:
        if dfd is not None:
            os.close(dfd)


def replace_file(path: str, data: bytes, mode: int = 0o600, *, sync: bool = False) -> None:
    """Write ``data`` as ``path`` with ``mode``, replacing whatever is there (a link
    included: the link goes, its target is untouched). ``sync`` flushes the file and
    the folder to disk before returning."""
    _write(path, data, mode, sync, first_wins=False)


def create_once(path: str, data: bytes, mode: int = 0o600, *, sync: bool = False) -> None:
    """Write ``data`` as ``path`` unless something is already there (the first writer
    wins and is never replaced; a link at ``path`` counts as already there)."""
    _write(path, data, mode, sync, first_wins=True)


def replace_file_at(dir_fd: int, name: str, data: bytes, mode: int = 0o600, *,
                    sync: bool = False, times_ns: tuple[int, int] | None = None) -> None:
    """``replace_file`` for ``name`` in the folder open as ``dir_fd`` (the caller
    opened it, and keeps it open): no path is looked up again. ``times_ns`` sets
    the file's (access, modification) times, as ``os.utime`` takes them."""
    if not name or name in (".", "..") or "/" in name or os.sep in name:
        raise ValueError(f"{name!r} is not a plain file name")
    _write_in(f"<folder {dir_fd}>", dir_fd, name, data, mode, sync, False, times_ns)
