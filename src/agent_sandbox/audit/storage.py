"""The audit log's storage primitives, the ones that differ by platform:
positional read, durable sync (F_FULLFSYNC on macOS), the exclusive writer lock
(``flock``, a byte-range lock on Windows), whole writes and directory fsync; and
``AuditError``, which every failure to use the log's files raises.

Stdlib only (the hook appends on its allow path). Nothing here decides what is
written; it must never report a write or a lock it did not get.
"""

from __future__ import annotations

import errno
import os
import sys

from agent_sandbox.errors import SandboxError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

if sys.platform == "win32":  # pragma: no cover - exercised on Windows hosts only
    import msvcrt

    fcntl: Any = None
else:
    import fcntl

    msvcrt: Any = None

CLOEXEC = getattr(os, "OCLOEXEC", 0)
BINARY = getattr(os, "OBINARY", 0)  # Windows: never translate newlines


class AuditError(SandboxError):
    """The audit log cannot be written or read as asked (callers must fail closed)."""


def pread(fd: int, n: int, offset: int) -> bytes:
    if hasattr(os, "pread"):
        return os.pread(fd, n, offset)
    os.lseek(fd, offset, os.SEEK_SET)  # pragma: no cover - Windows; the fd is ours alone
    return os.read(fd, n)  # pragma: no cover


def datasync(fd: int) -> None:
    """Make written data durable (macOS needs F_FULLFSYNC to reach the disk)."""
    if sys.platform == "darwin":  # pragma: no cover - macOS hosts
        fcntl.fcntl(fd, fcntl.F_FULLFSYNC)
    elif hasattr(os, "fdatasync"):
        os.fdatasync(fd)
    else:  # pragma: no cover - Windows
        os.fsync(fd)


def try_lock(fd: int) -> bool:
    """Take the exclusive writer lock without waiting; False if another holds it.

    flock locks die with their holder, so a crashed writer never leaves a stale lock.
    """
    if fcntl is not None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                return False
            raise
    try:  # pragma: no cover - Windows: byte-range lock, released by the OS on exit
        os.lseek(fd, 0, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        return True
    except OSError:  # pragma: no cover
        return False


def unlock(fd: int) -> None:
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_UN)
    else:  # pragma: no cover - Windows
        os.lseek(fd, 0, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except OSError as exc:
            raise AuditError(f"cannot write audit log: {exc}") from exc
        view = view[n:]


def fsync_dir(path: str) -> None:
    try:
        dfd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return  # Windows cannot open directories; NTFS journals the rename
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
