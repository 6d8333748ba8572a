"""Unix sockets allowed by path, judged when a connection is made.

seccomp cannot read the address of a ``connect()``; with ``allowUnixSockets``
listing paths, every ``connect()`` in the sandbox comes to the broker:

- a socket that is not a unix socket (its family is fixed when it was made, so
  no later change of the address can make it one) goes on as the kernel would
  do it: the sandbox's network namespace holds nothing but the proxy's ports;
- a unix socket's address is copied out of the caller's memory once, and the
  broker connects the caller's own socket (a duplicate of its descriptor)
  itself, from that copy: a path is resolved as the caller sees it (its root,
  its working folder, no ``/proc`` magic links) to the socket file it names,
  which is judged by where it really is; the connection is made to that very
  file (``/proc/self/fd/N``), so nothing the caller changes in between moves it;
- abstract sockets live in the sandbox's own network namespace and are
  reachable as before.

So the host's sockets are never looked for, masked or listed before a run: one
bound, renamed or removed at any time is judged when it is reached, and no
state of the host can refuse a start. A refusal is ``EACCES``.
"""

from __future__ import annotations

import errno
import os
import socket
import stat
import sys

from ..bwrap.globs import under
from .notify import Notification, pidfd_getfd
from .refused import Refused
from .target import Target, locate

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

_SUN_PATH_MAX = 108


def allowed(path: str, listed: Sequence[str]) -> bool:
    """Whether the socket file at ``path`` (resolved) is one the settings allow:
    a listed path, or a socket inside a listed folder."""
    return any(under(path, x) for x in listed)


def may_write(st: os.stat_result, uid: int, gids: Sequence[int]) -> bool:
    """Whether a process with ``uid``/``gids`` and no capabilities may connect to
    the socket file ``st`` (write permission)."""
    if st.st_uid == uid:
        return bool(st.st_mode & stat.S_IWUSR)
    if st.st_gid in gids:
        return bool(st.st_mode & stat.S_IWGRP)
    return bool(st.st_mode & stat.S_IWOTH)


class Connection:
    """One ``connect()`` of the caller, taken apart: None from ``take`` when the
    kernel can make it itself (not a unix socket)."""

    def __init__(self, sock: socket.socket, address: bytes) -> None:
        self.sock, self.address = sock, address

    @staticmethod
    def take(t: Target, n: Notification, valid: bool) -> Connection | None:
        pidfd = os.pidfd_open(t.pid)
        try:
            if not valid:
                raise OSError(errno.ESRCH, "the caller is gone")
            dup = pidfd_getfd(pidfd, n.args[0] & 0xFFFFFFFF)
        finally:
            os.close(pidfd)
        try:
            sock = socket.socket(fileno=dup)
        except OSError:
            os.close(dup)
            raise
        if sock.family != socket.AF_UNIX:
            sock.close()
            return None
        size = n.args[2] & 0xFFFFFFFF
        if size < 3 or size > 2 + _SUN_PATH_MAX:
            sock.close()
            raise OSError(errno.EINVAL, "not a unix address")
        raw = t.memory(n.args[1], size)
        if len(raw) != size or int.from_bytes(raw[:2], sys.byteorder) != socket.AF_UNIX:
            sock.close()
            raise OSError(errno.EINVAL, "not a unix address")
        return Connection(sock, raw[2:])


def connect(t: Target, c: Connection, listed: Sequence[str], ids: tuple[int, Sequence[int]]
            ) -> int:
    """Make the connection ``c`` if the settings allow it (may wait: a full backlog)."""
    try:
        if c.address[:1] == b"\0":  # abstract: the sandbox's own network namespace
            c.sock.connect(c.address)
            return 0
        name = os.fsdecode(c.address.split(b"\0", 1)[0])
        if not name:
            raise OSError(errno.EINVAL, "an empty address")
        if not name.startswith("/"):
            name = t.cwd().rstrip("/") + "/" + name
        place = locate(t, name, follow=True)
        try:
            fd = os.open(place.name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC,
                         dir_fd=place.folder)
        finally:
            place.close()
        try:
            st = os.fstat(fd)
            if not stat.S_ISSOCK(st.st_mode):
                raise OSError(errno.ECONNREFUSED, "not a socket")
            real = os.readlink(f"/proc/self/fd/{fd}")
            if not allowed(real, listed):
                raise Refused(f"the unix socket {real} is not in allowUnixSockets")
            if not may_write(st, *ids):
                raise OSError(errno.EACCES, "permission denied")
            c.sock.connect(f"/proc/self/fd/{fd}")
            return 0
        finally:
            os.close(fd)
    finally:
        c.sock.close()
