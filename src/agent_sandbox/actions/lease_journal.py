"""The broker's lease journal: one file per credential not yet revoked, so that
a runner killed between issue and revoke leaves a trace the next broker can
act on (``Broker.recover``).

A folder of this account, mode 0700; one JSON file per lease, mode 0600,
written under a temporary name and renamed into place, holding the lease id
(a token's accessor), the engine, the action and the request id: never the
secret. The process that issued the lease holds an exclusive ``flock`` on its
file until the lease is revoked; the kernel drops the lock when that process
dies, however it dies. So a file whose lock can be taken belongs to a dead
runner, and one whose lock cannot belongs to a live run that recovery must
leave alone.

Never follows a link, never accepts a folder or file that is not this
account's own, never writes a secret.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..errors import SandboxError

SUFFIX = ".lease"
# an unreadable entry this young may be one being written right now
UNREADABLE_GRACE = 60.0


class JournalError(SandboxError):
    """The journal folder or one of its files is not usable (the message says why)."""


@dataclass
class Held:
    """A journal entry whose lock this process holds."""

    path: str
    fd: int
    entry: dict[str, Any]


def _file_name(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:40] + SUFFIX


class LeaseJournal:
    def __init__(self, folder: str) -> None:
        self.folder = os.path.abspath(folder)

    def _ensure(self) -> None:
        try:
            os.makedirs(self.folder, mode=0o700, exist_ok=True)
            st = os.lstat(self.folder)
        except OSError as exc:
            raise JournalError(f"cannot create the lease journal {self.folder}: "
                               f"{exc.strerror}") from None
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            raise JournalError(f"the lease journal {self.folder} must be a folder of this "
                               "account (not a link)")
        if st.st_mode & 0o077:
            os.chmod(self.folder, 0o700)

    def record(self, key: str, entry: dict[str, Any]) -> Held:
        """Write the entry for lease ``key`` and hold its lock until ``release``."""
        self._ensure()
        path = os.path.join(self.folder, _file_name(key))
        tmp = f"{path}.{os.urandom(8).hex()}.tmp"  # unpredictable, like atomic_file
        data = json.dumps(entry, sort_keys=True).encode() + b"\n"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise JournalError(f"cannot write to the lease journal {self.folder}: "
                               f"{exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
            os.replace(tmp, path)
            self._sync_folder()
        except OSError as exc:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise JournalError(f"cannot write to the lease journal {self.folder}: "
                               f"{exc.strerror}") from None
        return Held(path, fd, entry)

    def _sync_folder(self) -> None:
        fd = os.open(self.folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    @staticmethod
    def release(held: Held, *, forget: bool) -> None:
        """Drop the lock; with ``forget`` (the lease is revoked) remove the entry first."""
        try:
            if forget:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(held.path)
        finally:
            with contextlib.suppress(OSError):
                os.close(held.fd)

    def forget(self, key: str) -> None:
        """Remove the entry of lease ``key`` (revoked by a process that did not record it)."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(self.folder, _file_name(key)))

    def orphans(self) -> Iterator[Held]:
        """Entries no live process holds (their runner died), each locked while
        the caller handles it; the caller must ``release`` each. Unreadable
        entries older than a minute (a write cut short) are removed."""
        try:
            names = sorted(os.listdir(self.folder))
        except FileNotFoundError:
            return
        except OSError as exc:
            raise JournalError(f"cannot read the lease journal {self.folder}: "
                               f"{exc.strerror}") from None
        for name in names:
            if SUFFIX not in name:
                continue
            path = os.path.join(self.folder, name)
            try:
                fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError:
                continue  # gone meanwhile, or not a regular file of ours
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)  # a live run holds it
                continue
            entry = self._read(fd)
            if entry is None:
                try:
                    young = time.time() - os.fstat(fd).st_mtime < UNREADABLE_GRACE
                    if not young:
                        os.unlink(path)
                finally:
                    os.close(fd)
                continue
            yield Held(path, fd, entry)

    @staticmethod
    def _read(fd: int) -> dict[str, Any] | None:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_size > 65536:
            return None
        data = os.pread(fd, 65536, 0)
        try:
            entry = json.loads(data)
        except ValueError:
            return None
        return entry if isinstance(entry, dict) else None

    def entries(self) -> list[dict[str, Any]]:
        """Every readable entry, live or not (for status and tests)."""
        out = []
        try:
            names = sorted(os.listdir(self.folder))
        except FileNotFoundError:
            return []
        for name in names:
            if SUFFIX not in name:
                continue
            try:
                fd = os.open(os.path.join(self.folder, name),
                             os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                entry = self._read(fd)
            finally:
                os.close(fd)
            if entry is not None:
                out.append(entry)
        return out
