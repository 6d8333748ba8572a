"""What a run wrote to a private layer, made in the tree the way the broker makes a
call: each change judged by the broker's own rules (``files.Files``) when it is
made, against the tree as it is then, never through a link.

The gVisor backend brings each writable root into its container as an overlay
whose upper layer lives outside the tree (``containers/layer``): the command
changes that layer alone, and nothing it writes reaches the tree while it runs.
After the command, ``Publisher.publish`` walks the upper layer (the cost of what
the command wrote, never of the tree) and replays it as calls: a folder made, a
file written whole (a new one, or a copy renamed over the old one), a link made,
a name removed (an overlay whiteout; in a folder the command removed and made
again, what it did not make again). Each is judged as the broker judges the call
a command makes in place: a protected name, git metadata of a repository no
sandboxed run made, a configuration whose text would make git run a program, a
hook, Python's start-up of a folder the user made, a folder that holds a
repository. A refused change is not made and is said (``refused``); the others
are made. Where the tree changed under the command meanwhile (a file the user or
another run changed after the layers were mounted; a folder it wrote in that is
now a file or a link), the tree's version stays and that is said.

Never published: owners, extended attributes (the mark of a sandboxed run's
folder is set by the publisher, as by the broker), set-user-ID and set-group-ID
bits, device files, FIFOs and sockets.
"""

from __future__ import annotations

import errno
import os
import stat

from ..bwrap import gitmeta
from . import gitfolders, gitwrites
from .files import Files
from .made import mark_file
from .refused import Refused
from .target import Place, Target
from .written import write_whole

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .judge import Judge

# how overlayfs marks a folder the command removed and made again (root's, a user's)
_OPAQUE = ("trusted.overlay.opaque", "user.overlay.opaque")
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
MAX_DEPTH = 200  # folders below a writable root: deeper ones are said, not published


class Publisher(Files):
    """The changes of one run's layers, judged and made (``publish``, one root at
    a time); ``refused``: (path, why) of each change not made; ``made``: what it
    created, as the broker's record of a run (the git folders judged after)."""

    def __init__(self, judge: Judge, since_ns: int = 0) -> None:
        super().__init__(judge, 0)
        # when the layers were mounted: a name the tree changed after that was changed
        # by the user or another run while the command ran, and stays theirs
        self.since_ns = since_ns
        # the publisher is the broker's caller: its own view of the tree, the host's
        self.caller = Target(os.getpid(), pinned=False)
        self.refused: list[tuple[str, str]] = []
        self.changed = 0

    def publish(self, upper: str, root: str) -> None:
        """Replay the upper layer ``upper`` of the writable root ``root`` (its real
        path, as the plan has it) into the tree."""
        up = os.open(upper, _DIR)
        try:
            try:
                real = os.open(root, _DIR)
            except OSError as exc:
                self.refused.append((root, f"the writable root is gone ({exc.strerror})"))
                return
            try:
                self._folder(up, real, 0)
            finally:
                os.close(real)
        finally:
            os.close(up)

    def _folder(self, up: int, real: int, depth: int) -> None:
        # a folder's files before its folders, as tools write them (``pyvenv.cfg``
        # before the site folder's ``.pth``), each folder's in name order
        entries = [(name, os.stat(name, dir_fd=up, follow_symlinks=False))
                   for name in os.listdir(up)]
        entries.sort(key=lambda e: (stat.S_ISDIR(e[1].st_mode), e[0]))
        for name, st in entries:
            # judged where the folder is now (another run may have moved it meanwhile),
            # as the broker judges a call: by the path its open folder has
            path = os.readlink(f"/proc/self/fd/{real}")
            place = Place(real, path, name)  # the folder is the caller's to close
            try:
                if depth > MAX_DEPTH and stat.S_ISDIR(st.st_mode):
                    raise Refused(f"{place.path}: folders nested deeper than {MAX_DEPTH} are "
                                  "not published")
                self._entry(up, name, st, place, depth)
            except Refused as exc:
                self.refused.append((place.path, exc.reason))
            except OSError as exc:
                self.refused.append((place.path, exc.strerror or str(exc)))

    def _entry(self, up: int, name: str, st: os.stat_result, place: Place, depth: int) -> None:
        before = place.lstat()
        if before is not None and not stat.S_ISDIR(before.st_mode) and \
                before.st_ctime_ns > self.since_ns:
            raise Refused(f"{place.path} changed on the host while the command ran: the "
                          "host's version is kept, the command's is not published")
        if stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:  # a whiteout: the name removed
            if before is not None:
                self._remove(place, before)
            return
        if stat.S_ISDIR(st.st_mode):
            self._dir(up, name, st, place, before, depth)
        elif stat.S_ISREG(st.st_mode):
            self._file(up, name, st, place, before)
        elif stat.S_ISLNK(st.st_mode):
            self._check(self.caller, place)
            text = os.readlink(name, dir_fd=up)
            self._linked(place, text)
            if before is not None:
                self._remove(place, before)
            os.symlink(text, name, dir_fd=place.folder)
            self._made_at(place, None)
            self.changed += 1
        else:
            raise Refused(f"{place.path}: {_kind(st)} is never published")

    def _dir(self, up: int, name: str, st: os.stat_result, place: Place,
             before: os.stat_result | None, depth: int) -> None:
        opaque = _opaque(up, name)
        if before is not None and not stat.S_ISDIR(before.st_mode):
            if not opaque:  # the command wrote in a folder; something else is there now
                raise Refused(f"{place.path} is no longer a folder (it changed while the "
                              "command ran): nothing below it is published")
            self._remove(place, before)
            before = None
        if before is None:
            if name != ".git":  # a .git folder alone runs nothing; what goes in is judged
                self._check(self.caller, place)
            os.mkdir(name, 0o700, dir_fd=place.folder)
            self._made_at(place, None)
            self.changed += 1
        sub_up = os.open(name, _DIR, dir_fd=up)
        try:
            try:
                sub = os.open(name, _DIR, dir_fd=place.folder)
            except OSError as exc:
                raise Refused(f"{place.path} changed while the command ran ({exc.strerror}): "
                              "nothing below it is published") from None
            try:
                if opaque and before is not None:  # what the command did not make again
                    keep = set(os.listdir(sub_up))
                    for child in sorted(set(os.listdir(sub)) - keep):
                        gone = Place(sub, place.path, child)
                        was = gone.lstat()
                        if was is not None:
                            try:
                                self._remove(gone, was)
                            except OSError as exc:
                                self.refused.append((gone.path, getattr(
                                    exc, "reason", exc.strerror or str(exc))))
                self._folder(sub_up, sub, depth + 1)
                mode = stat.S_IMODE(st.st_mode) & 0o1777
                if before is None or stat.S_IMODE(before.st_mode) != mode:
                    if before is not None:  # a mode change, judged as ``chmod`` is
                        self._check(self.caller, place)
                    os.fchmod(sub, mode)
            finally:
                os.close(sub)
        finally:
            os.close(sub_up)

    def _file(self, up: int, name: str, st: os.stat_result, place: Place,
              before: os.stat_result | None) -> None:
        self._check(self.caller, place)
        if before is not None and stat.S_ISDIR(before.st_mode):  # removed, then written
            self._remove(place, before)
            before = None
        if name in gitwrites.CONFIGS and self._git_meta(place):
            data = _head(up, name, gitmeta.READ_LIMIT)
            why = gitmeta.config_text_why(data, "configuration", place.parent)
            if why:
                raise Refused(f"{place.path}: {why} (what host git would run)")
        why = gitfolders.becomes_git_dir(place) if before is None else \
            gitfolders.rewrites(place, before, self._git_meta(place))
        if why:
            raise Refused(why)
        src = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=up)

        def fill(out: int) -> None:
            _copy(src, out, st.st_size)
            if name == "pyvenv.cfg":  # the virtualenv the command made is its own
                mark_file(out)
            os.utime(out, ns=(st.st_atime_ns, st.st_mtime_ns))

        try:
            made = write_whole(place.folder, name, stat.S_IMODE(st.st_mode) & 0o777, fill,
                               replace=before is not None, tag=st.st_ino)
        finally:
            os.close(src)
        if before is None:
            self._record(place, made)
        else:
            self.made.drop(before)
        self.changed += 1

    def _remove(self, place: Place, before: os.stat_result) -> None:
        """Remove the name at ``place`` as the command's calls would have (``rm -rf``:
        a folder's contents first, then the emptied folder), each removal judged
        (the first refused keeps the rest); what the host changed after the layers
        were mounted (a file added to a folder the command removed) stays."""
        if before.st_ctime_ns > self.since_ns:
            raise Refused(f"{place.path} changed on the host while the command ran: it "
                          "stays")
        if stat.S_ISDIR(before.st_mode):
            sub = os.open(place.name, _DIR, dir_fd=place.folder)
            try:
                for child in sorted(os.listdir(sub)):
                    inner = Place(sub, place.path, child)
                    was = inner.lstat()
                    if was is not None:
                        self._remove(inner, was)
            finally:
                os.close(sub)
            self._check(self.caller, place, moved=before, leaving=True, removing=True)
            os.rmdir(place.name, dir_fd=place.folder)
        else:
            self._check(self.caller, place, leaving=True, removing=True)
            os.unlink(place.name, dir_fd=place.folder)
        self.made.drop(before)
        self.changed += 1


def _opaque(up: int, name: str) -> bool:
    """Whether the upper layer's folder ``name`` hides what the tree holds there
    (the command removed the folder and made it again)."""
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=up)
    try:
        for attr in _OPAQUE:
            try:
                if os.getxattr(fd, attr) == b"y":
                    return True
            except OSError:
                continue
        return False
    finally:
        os.close(fd)


def _head(up: int, name: str, limit: int) -> bytes:
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=up)
    try:
        data = b""
        while len(data) <= limit and (chunk := os.read(fd, 1 << 16)):
            data += chunk
        return data
    finally:
        os.close(fd)


def _copy(src: int, out: int, size: int) -> None:
    """The whole of ``src`` into ``out``, in the kernel where it can."""
    left = size
    try:
        while left > 0:
            n = os.copy_file_range(src, out, left)
            if n == 0:
                break
            left -= n
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
            raise
    while chunk := os.read(src, 1 << 20):
        view = memoryview(chunk)
        while view:
            view = view[os.write(out, view):]


def _kind(st: os.stat_result) -> str:
    mode = st.st_mode
    return ("a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a device file")
