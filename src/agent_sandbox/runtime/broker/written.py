"""A file the launcher writes whole into a folder of the tree (``write_whole``):
created under its own name when nothing stands there, otherwise written beside
under a temporary name and renamed over the old one, so a reader (host git, the
command) never meets half a file, and a failed write leaves nothing behind.

Every open is relative to the folder's descriptor and follows no link; the file
is made with mode 0600 and given its mode only once it holds its bytes."""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def write_whole(folder: int, name: str, mode: int, fill: Callable[[int], None], *,
                replace: bool, tag: int) -> os.stat_result:
    """Write ``name`` in the folder open at ``folder`` by ``fill(fd)``, with ``mode``:
    a new file (``replace`` False), or one renamed over the existing name (its
    temporary name carries ``tag``, the source's inode). Returns the written
    file's status, taken before the rename (the same inode after it)."""
    tmp = f".{name}.sandbox-{os.getpid()}-{tag}" if replace else name
    out = os.open(tmp, _NEW, 0o600, dir_fd=folder)
    try:
        fill(out)
        os.fchmod(out, mode)
        written = os.fstat(out)
    except BaseException:
        os.close(out)
        os.unlink(tmp, dir_fd=folder)
        raise
    os.close(out)
    if replace:
        os.rename(tmp, name, src_dir_fd=folder, dst_dir_fd=folder)
    return written


def write_bytes(data: bytes) -> Callable[[int], None]:
    """A ``fill`` that writes ``data`` whole."""
    def fill(out: int) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(out, view):]
    return fill
