"""An approved command reads the tree a human approved, or nothing
(``queue/content.py`` records that tree when the request is made).

For such a run every open is handed to the broker (``reads``). A regular file
below the pinned roots is handed over only if it is still the one recorded
(inode, size, modification and change times: the change time is the kernel's
and moves with every write) and then as a copy taken at that moment and checked
unchanged after the copy (``memfd``), so a file rewritten between the approval
and the read, or while it is read, is never what the command gets. A file
the run itself created or opened for writing is its own and read as is; any
other file not in the record is refused (``EACCES``), like one that changed.
Files larger than ``COPY_MAX`` are handed over as they are, checked only when
opened.
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat

from agent_sandbox import approved_claims

from .refused import Refused

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

COPY_MAX = 64 << 20
_MFD_EXEC = 0x10  # Linux 6.3: a copy the command may map for execution (a .so, a binary)


class Pin:
    """The recorded tree (path: inode, size, mtime_ns, ctime_ns, mode) and its roots."""

    def __init__(self, entries: Mapping[str, tuple[int, int, int, int, int]],
                 roots: Sequence[str], digests: Mapping[str, str] | None = None) -> None:
        self.entries = entries
        self.digests = digests or {}  # the files the human was shown: by their bytes
        self.roots = tuple(r.rstrip("/") or "/" for r in roots)
        self.refused: list[str] = []  # what the run was refused, for its record
        self.record = ""  # the run's record, which its files' claims name (approved_claims)

    def covers(self, path: str) -> bool:
        return any(path == r or path.startswith(r + "/") for r in self.roots)

    def handed(self, fd: int, path: str, st: os.stat_result,
               own: set[tuple[int, int]]) -> int | None:
        """For an open of the file at ``fd`` (``O_PATH``, real path ``path``): a copy to
        hand over instead, None to hand the file itself, or ``Refused``."""
        if not self.check(path, st, own) or st.st_size > COPY_MAX:
            return None
        return self._copy(fd, path, st)

    def check(self, path: str, st: os.stat_result, own: set[tuple[int, int]]) -> bool:
        """``Refused`` unless the file at ``path`` is the one recorded; False when
        it is not the record's to judge (a folder, not below the roots, or the
        run's own). A pipe, socket or device below the roots is refused: what it
        gives is written while the command runs, never what was approved."""
        if stat.S_ISDIR(st.st_mode):
            return False
        if (st.st_dev, st.st_ino) in own:  # its own, wherever (its temporary folder too)
            if self.record and approved_claims.taken(path, self.record):
                self._refuse(f"{path} was changed by another run after this approved "
                             "command wrote it")
            return False
        if not self.covers(path):
            return False
        if not stat.S_ISREG(st.st_mode):
            self._refuse(f"{path} is not a file of the tree approved (a pipe, socket or "
                         "device gives what is written while the command runs)")
        want = self.entries.get(path)
        if want is None:
            self._refuse(f"{path} was not in the tree approved for this command")
        elif (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns) != want[:4]:
            self._refuse(f"{path} changed after this command was approved")
        return True

    def kept(self, path: str, st: os.stat_result) -> bool:
        """Whether the file at ``path`` is the one recorded, unchanged (or no file the
        record judges), without refusing: a write that keeps what is there makes it
        the run's own only then."""
        want = self.entries.get(path)
        if not self.covers(path):
            return True
        return want is not None and (st.st_ino, st.st_size, st.st_mtime_ns,
                                     st.st_ctime_ns) == want[:4]

    def route(self, named: str) -> None:
        """``Refused`` unless every link on the way to ``named`` (the path as the
        command gave it) below the roots is one recorded: a link made after the
        approval would lead a recorded name to another recorded file. Read as
        given and as normalised: ``scripts/../deploy.sh`` passes ``scripts`` (a
        link there leads elsewhere) where the normalised path does not."""
        self._route(named)
        if "/." in named or "//" in named:
            self._route(posixpath.normpath(named))

    def _route(self, named: str) -> None:
        parts = named.split("/")
        for i in range(2, len(parts) + 1):
            if parts[i - 1] in ("", ".", ".."):
                continue  # not a name a link could have
            at = "/".join(parts[:i])
            if not self.covers(posixpath.normpath(at)):
                continue
            try:
                st = os.lstat(at)
            except OSError:
                return
            if stat.S_ISLNK(st.st_mode):
                want = self.entries.get(at)
                if want is None or (want[0], want[4]) != (st.st_ino, st.st_mode):
                    self._refuse(f"{at} is a link made after this command was approved")

    def _copy(self, fd: int, path: str, st: os.stat_result) -> int:
        src = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC)
        try:
            try:
                mem = os.memfd_create("approved", os.MFD_CLOEXEC | _MFD_EXEC)
            except OSError:
                mem = os.memfd_create("approved", os.MFD_CLOEXEC)
            try:
                left = st.st_size
                while left > 0:
                    sent = os.sendfile(mem, src, None, left)
                    if sent == 0:
                        break
                    left -= sent
                after = os.fstat(src)
                if left or (after.st_size, after.st_mtime_ns, after.st_ctime_ns) != (
                        st.st_size, st.st_mtime_ns, st.st_ctime_ns):
                    self._refuse(f"{path} changed while it was read")
                if path in self.digests and _sha256(mem) != self.digests[path]:
                    self._refuse(f"{path} is not the text the human was shown")
                out = os.open(f"/proc/self/fd/{mem}", os.O_RDONLY | os.O_CLOEXEC)
            finally:
                os.close(mem)
        finally:
            os.close(src)
        return out

    def _refuse(self, why: str) -> None:
        self.refused.append(why)
        raise Refused(why, errno.EACCES)


def _sha256(fd: int) -> str:
    """The SHA-256 of the first 16 MiB of the file at ``fd`` (as ``content.named``
    takes it), read from its start."""
    import hashlib

    h = hashlib.sha256()
    at = 0
    while at < 16 << 20 and (chunk := os.pread(fd, min(1 << 20, (16 << 20) - at), at)):
        h.update(chunk)
        at += len(chunk)
    return h.hexdigest()
