"""The files an approved command's run writes, watched while it lives.

An approved run reads back what it wrote as it is (``pinned``: its own files);
another run of the agent's over the same tree (a command left running in the
background) could rewrite such a file between the approved run's write and its
read (``python3 gen.py > build.sh && bash build.sh``), and the approved command
would run code no one saw. So each file the approved run opens for writing,
makes, or renames into place carries ``CLAIM``, an extended attribute naming the
approved run's record in the lock folder. Another run's broker that writes,
replaces, moves or removes a file a live run claims goes on (two runs appending
to one log is ordinary), and marks the claim taken (``taint``); the approved run
then refuses to read or run that file of its own, unless it writes it whole again.
The hook refuses an agent's file tool writing a claimed file while the run lives
(``policy.engine``). No sandboxed command can set or remove an extended attribute
(``bwrap.seccomp``); a claim whose run has ended claims nothing. A file the
approved run truncates is made anew (``fresh``): a descriptor opened before
reaches the old one."""

from __future__ import annotations

import errno
import fcntl
import os

CLAIM = "user.agent-sandbox.approved"


TAKEN = "taken:"  # the claim's value once another run changed the file


def claim(fd: int, record: str, whole: bool = True) -> None:
    """``CLAIM`` for the run whose record is ``record`` on the file open at ``fd``
    (not ``O_PATH``); ``whole``: the run writes it whole (made, truncated), which
    lifts a taint; where the file system keeps no extended attributes, nothing."""
    try:
        if not whole and os.fsdecode(os.getxattr(fd, CLAIM)) == TAKEN + record:
            return
    except OSError:
        pass
    try:
        os.setxattr(fd, CLAIM, os.fsencode(record))
    except OSError:
        pass


def taint(name: str, folder: int, record: str) -> None:
    """Mark the claim of ``record`` on the file ``name`` in the folder open at
    ``folder`` taken: another run is about to change the file."""
    try:
        os.setxattr(f"/proc/self/fd/{folder}/{name}", CLAIM, os.fsencode(TAKEN + record),
                    follow_symlinks=False)
    except OSError:
        pass


def take(name: str, folder: int, own: str) -> None:
    """Another run than ``own`` is about to change the file ``name`` in the folder
    open at ``folder``: the claim of a live approved run on it, if any, is taken."""
    holder = claimed(name, folder, own)
    if holder:
        taint(name, folder, holder)


def taken(path: str, record: str) -> bool:
    """Whether the file at ``path`` (a real path, not followed) is one of ``record``'s
    that another run changed since it wrote it."""
    try:
        return os.fsdecode(os.getxattr(path, CLAIM, follow_symlinks=False)) == TAKEN + record
    except OSError:
        return False


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
    if record.startswith(TAKEN):
        return None  # taken already: the approved run reads it no more
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


def fresh(name: str, folder: int, flags: int, mode: int) -> int:
    """The file ``name`` in the folder open at ``folder`` made anew where an approved
    run truncates it: a new file renamed over the old, opened with ``flags`` (but
    truncation), so no descriptor another process opened before (a command of the
    agent's holding it for writing) reaches what the run writes and reads back."""
    tmp = f".{name[:200]}.approved-{os.urandom(6).hex()}"
    fd = os.open(tmp, (flags & ~os.O_TRUNC) | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                 | os.O_NOCTTY | os.O_CLOEXEC, mode & 0o7777, dir_fd=folder)
    try:
        os.fchmod(fd, mode & 0o7777)
        os.rename(tmp, name, src_dir_fd=folder, dst_dir_fd=folder)
    except OSError:
        os.close(fd)
        try:
            os.unlink(tmp, dir_fd=folder)
        except OSError:
            pass
        raise
    return fd

