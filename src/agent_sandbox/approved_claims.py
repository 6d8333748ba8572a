"""The files an approved command's run writes, kept from every other run while it
lives.

An approved run reads back what it wrote as it is (``pinned``: its own files);
another run of the agent's over the same tree (a command left running in the
background) could rewrite such a file between the approved run's write and its
read (``python3 gen.py > build.sh && bash build.sh``), and the approved command
would run code no one saw. So each file the approved run opens for writing,
makes, or renames into place carries ``CLAIM`` (an extended attribute naming the
approved run's record in the lock folder), and any other run's broker refuses to
write, replace, rename or remove a file whose claim names a run that still lives
(its record locked), and the hook refuses an agent's file tool writing it
(``policy.engine``). No sandboxed command can set or remove an extended attribute
(``bwrap.seccomp``); a claim whose run has ended claims nothing."""

from __future__ import annotations

import errno
import fcntl
import os

CLAIM = "user.agent-sandbox.approved"


def claim(fd: int, record: str) -> None:
    """``CLAIM`` for the run whose record is ``record`` on the file open at ``fd``
    (not ``O_PATH``); where the file system keeps no extended attributes, nothing."""
    try:
        os.setxattr(fd, CLAIM, os.fsencode(record))
    except OSError:
        pass


def claim_at(name: str, folder: int, record: str) -> None:
    """``claim`` of the file ``name`` in the folder open at ``folder`` (no link
    followed, a folder or device left alone)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     dir_fd=folder)
    except OSError:
        return
    try:
        import stat

        if stat.S_ISREG(os.fstat(fd).st_mode):
            claim(fd, record)
    finally:
        os.close(fd)


def claimed(name: str, folder: int, own: str) -> str | None:
    """The live approved run (its record) that claims the file ``name`` in the folder
    open at ``folder``, when it is not ``own``; else None."""
    return claimed_path(f"/proc/self/fd/{folder}/{name}", own)


def claimed_path(path: str, own: str = "") -> str | None:
    """``claimed`` of the file at ``path`` (not followed): what the hook asks before
    an agent's file tool writes it."""
    try:
        value = os.getxattr(path, CLAIM, follow_symlinks=False)
    except OSError:
        return None
    record = os.fsdecode(value)
    return record if record != own and _lives(record) else None


def _lives(record: str) -> bool:
    """Whether the run whose record is at ``record`` still lives (holds its lock)."""
    try:
        fd = os.open(record, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except OSError as exc:
        return exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN)
    finally:
        os.close(fd)
