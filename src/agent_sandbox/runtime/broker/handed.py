"""What a brokered open hands to the caller: a descriptor (``Fd``), or an open
that may wait, made in a thread of its own (``Later``)."""

from __future__ import annotations

import os


class Fd:
    """An open file the broker hands to the caller."""

    __slots__ = ("cloexec", "fd")

    def __init__(self, fd: int, cloexec: bool) -> None:
        self.fd, self.cloexec = fd, cloexec


class Later:
    """An open that may wait (a FIFO): made by ``open`` in a thread of its own."""

    __slots__ = ("cloexec", "flags", "folder", "name")

    def __init__(self, folder: int, name: str, flags: int, cloexec: bool) -> None:
        self.folder, self.name, self.flags, self.cloexec = folder, name, flags, cloexec

    def open(self) -> Fd:
        try:
            return Fd(os.open(self.name, self.flags | os.O_NOFOLLOW | os.O_NOCTTY
                              | os.O_CLOEXEC, dir_fd=self.folder), self.cloexec)
        finally:
            os.close(self.folder)
