"""The brokered file calls: each one judged (``judge``) and then made by the broker.

A call that creates, opens for writing, renames, links, removes or changes the
mode or owner of a name comes here from the sandbox. Its path is copied out of
the caller's memory once and resolved as the caller would (``target.locate``);
the broker judges the place it found and makes the call itself on that place
(``*at`` calls on the open folder, never following a link at the name: one
that appears meanwhile fails the call with ``ELOOP``), with the caller's umask
and never with more rights than the caller: a read-only mount refuses it as it
refuses the caller, and the broker's thread holds no capability. An opened
file is handed to the caller as a new descriptor (``ADDFD``).

Every handler returns what the call returns: a descriptor to hand over
(``Fd``), a value, or raises ``OSError`` with the errno the caller gets. A
refusal raises ``Refused`` (``EROFS``) with the reason, which the broker
records. What a call created is remembered (``Made``): a repository the run
builds itself is its own to change (the sweep judges it after the run).

Every folder the broker makes carries the mark ``MARK`` (an extended
attribute, which the command cannot set: ``seccomp`` refuses ``setxattr``
inside the sandbox). Python's start-up (``Judge.python_start``) may be written
only in a folder so marked, or made by this run: a virtualenv one run makes,
the next may ``pip install -e`` into; one the user made, no run may change,
move or remove the start-up of, while any run runs.
"""

from __future__ import annotations

import errno
import os
import stat

from agent_sandbox import approved_claims, protected

from ..bwrap import gitmeta
from ..bwrap.globs import under
from . import gitfolders, gitwrites
from .at_calls import caller_id, chmod_at, path_of, renameat2
from .configs import Configs
from .handed import Fd, Later
from .judge import PYCACHE, Judge
from .made import Made, mark, mark_file, marked
from .reached import Reached
from .refused import Refused
from .shared_configs import SHARED, SharedConfigs
from .surroundings import Surroundings
from .target import (
    AT_FDCWD,
    Place,
    Target,
    absolute,
    fd_alias,
    fd_arg,
    locate,
    not_a_mount,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from .pinned import Pin

_O_TMPFILE = getattr(os, "O_TMPFILE", 0o20200000)
AT_SYMLINK_NOFOLLOW = 0x100
AT_REMOVEDIR = 0x200
AT_SYMLINK_FOLLOW = 0x400
AT_EMPTY_PATH = 0x1000
RENAME_NOREPLACE, RENAME_EXCHANGE, RENAME_WHITEOUT = 1, 2, 4


class Files(Reached):
    """The handlers of one run (its judge, what it made, its own umask)."""

    def __init__(self, judge: Judge, own_umask: int) -> None:
        self.judge = judge
        self.made = Made()
        self.own_umask = own_umask
        self.around = Surroundings(judge.home)
        self.configs = Configs(judge.home)
        # an approved command's tree (``pinned.Pin``), and the files this run created
        # or opened for writing: its own to read back as they are now
        self.pin: Pin | None = None
        self.written: set[tuple[int, int]] = set()
        self.shared = SharedConfigs()  # shared configurations written, with their bytes before
        self.approved = ""  # an approved run's record, its files' claims (approved_files)
        self.max_size: int | None = None  # the run's file size limit (runtime.limits)

    # the decisions --------------------------------------------------------

    def _own(self, path: str) -> bool:
        try:
            return self.made.holds(os.stat(path, follow_symlinks=False))
        except OSError:
            return False

    def _check(self, t: Target, place: Place, *, moved: os.stat_result | None = None,
               leaving: bool = False, removing: bool = False, folder: bool = False) -> None:
        """Refuse changing the name at ``place`` (created, written, replaced, moved or
        removed); ``moved``: the folder a rename brings there or takes away;
        ``leaving``: the name is removed or moved away (bytecode caches may go);
        ``removing``: removed (unlinked), which plants nothing: a protected name
        of the tree (not the home folder's, not ``denyWrite``) may go; ``folder``:
        an empty folder is made."""
        path = place.path
        if any(under(path, s) for s in self.judge.scratch):
            return  # the run's own temporary folder, removed when it ends
        if place.folder >= 0:  # a live approved run's file: it reads it no more
            approved_claims.take(place.name, place.folder, self.approved)
        why = self.judge.protected(path, removing=removing)
        if why and not self._repository_own(place):
            raise Refused(why)
        self._venv(t, place)
        if not leaving:
            self._bin_before_venv(t, place, folder)
        root = f"/proc/{t.pid}/root"
        top = self.judge.repository(path)
        container = self.judge.git_container(path)
        if container is not None:
            # a run's own repository: one whose outermost .git folder this run made
            # (a git folder made inside another's .git is that other's), or, for a
            # .git entry, the folder it sits in, the entry itself, or a .git folder
            # the run made and now moves into place
            # a repository a sandboxed run made (this one or an earlier one: its .git
            # carries the mark) is the command's: its metadata is judged as written
            # (``gitwrites``), in this run as in the one that made it
            own_top = top is not None and top != path and self._own(root + top)
            mine = own_top or (top is not None and top != path
                               and self._sandboxed_path(root + top)) or (
                place.name == ".git" and (self._own(root + container)
                                          or self._own(root + path)
                                          or self.made.holds(moved)))
            if not own_top and top is not None and container.startswith(top + "/worktrees/") \
                    and "/" not in container[len(top) + 11:] and self._own(root + container):
                # a linked worktree's git folder this run made (``git worktree add``): git
                # reads it only in that worktree; the sweep judges it after the run
                mine = True
                self.made.repo(container, os.stat(root + container, follow_symlinks=False))
            if not mine:
                raise Refused(f"{path} is git metadata of {container}, which this run did "
                              "not create (what git runs there is not the sandbox's to change)")
            why = None if leaving else gitwrites.rule_for(
                path, container, moved is not None and not stat.S_ISREG(moved.st_mode))
            if why:
                raise Refused(why)
        kind = self.judge.python_start(path)
        if leaving and (kind in ("c", "t", "u", "m") or place.name == PYCACHE
                        or protected.cwd_module(path)):
            kind = None  # a cache (written again from the source), or a module removed
        if kind is not None:
            self._python(place, kind)
        if moved is not None and stat.S_ISDIR(moved.st_mode) and place.folder >= 0:
            self._project_root(place, path)
            if not leaving and place.name in protected.CWD_MODULES and self.judge.in_roots(path):
                self._python(place, "f")  # a package moved in where Python imports it
        if place.folder >= 0 and self.judge.in_roots(path):
            self._around(place, path, moved is not None and stat.S_ISDIR(moved.st_mode),
                         leaving)
        if moved is not None and stat.S_ISDIR(moved.st_mode) and top is not None \
                and top != path and not self._own(root + top):
            raise Refused(f"{path} is inside {top}, which this run did not create")
        if moved is not None and stat.S_ISLNK(moved.st_mode) and not leaving and \
                place.name in self.judge.firsts and self.judge.in_roots(path):
            raise Refused(f"{path} would lead to files under a protected name: never a link")
        if moved is not None and stat.S_ISDIR(moved.st_mode) and self.judge.carries(path) \
                and not (place.name == ".git" and self.made.holds(moved)):
            raise Refused(f"a folder renamed to or from {path} would carry files under a "
                          "protected name")

    def _repository_own(self, place: Place) -> bool:
        """``place`` names a repository's own entry (``protected.REPOSITORY_OWN``)
        beside a ``.git`` folder a sandboxed run made: the command's, as that
        repository is."""
        return place.name in protected.REPOSITORY_OWN and place.folder >= 0 and \
            self._sandboxed_path(protected.GIT_DIR, place.folder)

    def _exposes(self, src: Place, dst: Place, moved: os.stat_result | None) -> None:
        """Refuse a rename or link that would give a file denied for reading
        (``Judge.reads``) a name that is not: the file itself, or, for a folder and
        rules that name folders, anything below it (a walk of that folder only)."""
        reads = self.judge.reads
        if not reads:
            return
        if reads.denied(src.path) and not reads.denied(dst.path):
            raise Refused(f"{src.path} may not be read; {dst.path} could be", errno.EACCES)
        if moved is None or not stat.S_ISDIR(moved.st_mode) or not reads.structural:
            return
        for folder, _, names, _ in os.fwalk(src.name, dir_fd=src.folder):
            rel = folder[len(src.name):]
            for name in names:
                was = f"{src.path}{rel}/{name}"
                if reads.denied(was) and not reads.denied(f"{dst.path}{rel}/{name}"):
                    raise Refused(f"{was} may not be read; moving {src.path} to {dst.path} "
                                  "would give it a name that may", errno.EACCES)

    def _git_meta(self, place: Place) -> bool:
        """Whether the name at ``place`` is git metadata (of a ``.git`` folder, or of a
        folder git takes for a git directory)."""
        return self.judge.git_container(place.path) is not None or (
            place.folder >= 0 and self.around.git_dir_entry(
                place.name, place.folder, place.parent.rsplit("/", 1)[-1]) == "here")

    def _around(self, place: Place, path: str, folder_moved: bool, leaving: bool) -> None:
        """The rules the folders around ``place`` decide (``surroundings``);
        ``folder_moved``: a folder is moved to or from ``path``, so a path a
        configuration names below it would change too; ``leaving``: the name goes
        (removed, moved away), which plants nothing where a path is named: what is
        made there after is judged (``rm -rf node_modules`` with a hook's binary)."""
        where = self.around.git_dir_entry(place.name, place.folder,
                                          place.parent.rsplit("/", 1)[-1])
        if where is not None:
            gitdir = place.parent if where == "here" else place.parent.rsplit("/", 1)[0]
            if where == "here":
                own = self._sandboxed(place.folder)
            else:
                up = os.open("..", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC,
                             dir_fd=place.folder)
                try:
                    own = self._sandboxed(up)
                finally:
                    os.close(up)
            if not own:
                raise Refused(f"{path} is git metadata of {gitdir}, which git takes for a git "
                              "directory and no sandboxed run made")
            why = gitwrites.rule_for(path, gitdir)
            if why:
                raise Refused(why)
        why = None if leaving else self.around.named_by_git(path, folder_moved) or \
            self.configs.named(path, folder_moved)
        if why:
            raise Refused(why)
        site = self.around.imported_at_start(path)
        if site is not None and not self._sandboxed_path(site):
            raise Refused(f"{path} is imported by a .pth file of {site} at every start")

    def _sandboxed_path(self, path: str, dir_fd: int | None = None) -> bool:
        """``_sandboxed`` of the folder at ``path`` (below ``dir_fd``: not a link)."""
        try:
            fd = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
                         | (os.O_NOFOLLOW if dir_fd is not None else 0), dir_fd=dir_fd)
        except OSError:
            return False
        try:
            return self._sandboxed(fd)
        finally:
            os.close(fd)

    def _sandboxed(self, folder: int) -> bool:
        """Whether a sandboxed run made the folder open at ``folder``: this one (its
        record) or any (``MARK``)."""
        return self.made.holds(os.fstat(folder)) or marked(folder)

    def _place(self, t: Target, dirfd: int, address: int, *, follow: bool) -> Place:
        path = absolute(t, fd_arg(dirfd), os.fsdecode(t.string(address)))
        return self._reach(t, path, follow=follow)

    def _mode(self, t: Target, mode: int) -> tuple[int, int | None]:
        """The mode to create with, and the mode to set after (where this process's
        own umask would take more than the caller's)."""
        wanted = mode & ~t.umask() & 0o7777
        if wanted & self.own_umask:
            return wanted, wanted
        return wanted, None

    def _made_at(self, place: Place, fix: int | None) -> None:
        """What a call just made at ``place``: recorded, and given the mode it asked
        for where this process's umask took more (``_mode``)."""
        st = os.stat(place.name, dir_fd=place.folder, follow_symlinks=False)
        self._record(place, st)
        if fix is not None:
            chmod_at(place, fix)

    def _git_folder(self, place: Place, st: os.stat_result) -> None:
        """A ``.git`` this run made at ``place`` (created or moved there), or a mark of
        a git directory (``HEAD``, written through ``HEAD.lock``) in a folder it made:
        recorded for the sweep."""
        if place.name == ".git":
            if self.made.holds(st):
                self.made.repo(place.path, st)
        elif place.name in gitmeta.GIT_DIR_MARKS and ".git" not in place.parent.split("/"):
            folder = os.fstat(place.folder)
            if self.made.holds(folder):
                self.made.repo(place.parent, folder)  # a bare repository

    def _record(self, place: Place, st: os.stat_result) -> None:
        """A name this run's call created: its identity, its mark (a folder), and a
        git folder the sweep judges (``Made.repos``)."""
        self.made.add(st)
        self._git_folder(place, st)
        if stat.S_ISDIR(st.st_mode):
            mark(place.name, place.folder)

    # the calls ------------------------------------------------------------

    def open(self, t: Target, dirfd: int, address: int, flags: int, mode: int) -> Fd | Later:
        cloexec = bool(flags & os.O_CLOEXEC)
        flags &= ~os.O_CLOEXEC
        raw = os.fsdecode(t.string(address))
        path = absolute(t, fd_arg(dirfd), raw)
        alias = fd_alias(path)
        if alias is not None:  # the caller's own descriptor, opened again
            where = t.alias_path(alias)
            if where.startswith("/"):
                why = self.judge.protected(where)
                if why:
                    raise Refused(why)
                if flags & os.O_ACCMODE != os.O_RDONLY or flags & os.O_TRUNC:
                    self._existing(t, where)  # written: as an open of that file by name
            return Fd(t.reopen(alias, flags & ~(os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW)
                               | os.O_NOCTTY), cloexec)
        if flags & _O_TMPFILE == _O_TMPFILE:  # an unnamed file in that folder
            place = locate(t, path, follow=True)
            try:
                want, fix = self._mode(t, mode)
                fd = os.open(place.name, flags | os.O_NOCTTY | os.O_CLOEXEC, want,
                             dir_fd=place.folder)
                if fix is not None:
                    os.fchmod(fd, fix)
                return Fd(fd, cloexec)
            finally:
                place.close()
        excl = bool(flags & os.O_CREAT) and bool(flags & os.O_EXCL)
        place = self._reach(t, path, follow=not (flags & os.O_NOFOLLOW or excl))
        try:
            before = place.lstat()
            if before is None and not flags & os.O_CREAT:
                raise OSError(errno.ENOENT, "no such file")
            if before is not None and stat.S_ISDIR(before.st_mode) and flags & (
                    os.O_WRONLY | os.O_RDWR | os.O_CREAT):
                raise OSError(errno.EISDIR, "is a folder")
            self._check(t, place)
            if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC):
                self.shared.note(place.path)
            if before is not None and self.judge.reads.denied(place.path):
                raise Refused(self.judge.reads.denied(place.path) or "", errno.EACCES)
            if place.name in gitwrites.CONFIGS and self._git_meta(place):
                raise Refused(f"{place.path} is written in place: git writes its configuration "
                              "through a lock file, whose text the broker judges")
            why = gitfolders.becomes_git_dir(place) if before is None else \
                gitfolders.rewrites(place, before, self._git_meta(place))
            if why:
                raise Refused(why)
            want, fix = self._mode(t, mode)
            if before is not None and stat.S_ISCHR(before.st_mode) and before.st_rdev == \
                    os.makedev(5, 0):
                raise OSError(errno.ENXIO, "no controlling terminal in the sandbox")
            if before is not None and stat.S_ISFIFO(before.st_mode):
                # may wait for a reader: opened in a thread of its own (``Later``)
                folder, place.folder = place.folder, -1
                return Later(folder, place.name, flags, cloexec)
            pin = self.pin if before is not None and not flags & os.O_TRUNC else None
            if pin is not None and before is not None and flags & os.O_ACCMODE == os.O_RDWR:
                pin.check(place.path, before, self.written)  # it reads what is there now
            becomes = before is None and gitfolders.becomes(place)
            fd = approved_claims.fresh(place.name, place.folder, flags, before.st_mode) if (
                self.approved and before is not None and flags & os.O_TRUNC and
                stat.S_ISREG(before.st_mode) and before.st_nlink == 1) else \
                os.open(place.name, flags | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC, want,
                        dir_fd=place.folder)
            st = os.fstat(fd)
            # its own to read back as it is, unless it keeps what changed since the approval
            if pin is None or before is None or pin.kept(place.path, before):
                self.written.add((st.st_dev, st.st_ino))
                if self.approved:  # watched while this run lives (approved_claims)
                    approved_claims.claim(fd, self.approved, pin is None)
            if before is None:
                self._record(place, os.fstat(fd))
                if place.name == "pyvenv.cfg":
                    mark_file(fd)
                if fix is not None:
                    os.fchmod(fd, fix)
            if becomes:
                try:
                    self._republish(place)
                except Refused:
                    os.close(fd)
                    raise
            return Fd(fd, cloexec)
        finally:
            place.close()

    def mkdir(self, t: Target, dirfd: int, address: int, mode: int) -> int:
        place = self._place(t, dirfd, address, follow=False)
        try:
            if place.name in (".", "..") or place.lstat() is not None:
                raise OSError(errno.EEXIST, "exists")
            if place.name != ".git":  # a .git folder alone runs nothing; what goes in is judged
                self._check(t, place, folder=True)
            why = gitfolders.becomes_git_dir(place)  # a folder named HEAD is a mark too
            if why:
                raise Refused(why)
            becomes = gitfolders.becomes(place)
            want, fix = self._mode(t, mode)
            os.mkdir(place.name, want, dir_fd=place.folder)
            self._made_at(place, fix)
            if becomes:
                self._republish(place)
            return 0
        finally:
            place.close()

    def mknod(self, t: Target, dirfd: int, address: int, mode: int, dev: int) -> int:
        kind = stat.S_IFMT(mode)
        if kind not in (0, stat.S_IFREG, stat.S_IFIFO):
            raise OSError(errno.EPERM, "no device files")
        place = self._place(t, dirfd, address, follow=False)
        try:
            self._check(t, place)
            self._linked(place)
            want, fix = self._mode(t, mode)
            becomes = gitfolders.becomes(place)
            os.mknod(place.name, (kind or stat.S_IFREG) | want, dir_fd=place.folder)
            self._made_at(place, fix)
            if becomes:
                self._republish(place)
            return 0
        finally:
            place.close()

    def symlink(self, t: Target, target_address: int, dirfd: int, address: int) -> int:
        target = t.string(target_address)
        place = self._place(t, dirfd, address, follow=False)
        try:
            self._check(t, place)
            self._linked(place, os.fsdecode(target))
            becomes = gitfolders.becomes(place)
            os.symlink(target, place.name, dir_fd=place.folder)
            self._made_at(place, None)
            if becomes:
                self._republish(place)
            return 0
        finally:
            place.close()

    def link(self, t: Target, olddirfd: int, old: int, newdirfd: int, new: int,
             flags: int) -> int:
        if flags & AT_EMPTY_PATH and not t.string(old):
            raise OSError(errno.ENOENT, "linking a descriptor needs a capability")
        src = self._place(t, olddirfd, old, follow=bool(flags & AT_SYMLINK_FOLLOW))
        try:
            dst = self._place(t, newdirfd, new, follow=False)
            try:
                self._check(t, src)  # a second name for it could be written
                self._check(t, dst)
                if src.name in SHARED:  # written through another name, never noted
                    raise Refused(f"{src.path} is a shared configuration: never hard-linked")
                self.shared.note(dst.path)
                self._exposes(src, dst, None)  # or read
                why = gitfolders.by_reference(src)  # no second name for git metadata
                if why:
                    raise Refused(why)
                self._linked(dst)
                becomes = gitfolders.becomes(dst)
                os.link(src.name, dst.name, src_dir_fd=src.folder, dst_dir_fd=dst.folder,
                        follow_symlinks=False)
                if self.approved:
                    approved_claims.claim_at(dst.name, dst.folder, self.approved)
                self._git_folder(dst, os.stat(dst.name, dir_fd=dst.folder,
                                              follow_symlinks=False))
                if becomes:
                    self._republish(dst)
                return 0
            finally:
                dst.close()
        finally:
            src.close()

    def rename(self, t: Target, olddirfd: int, old: int, newdirfd: int, new: int,
               flags: int) -> int:
        if flags & RENAME_WHITEOUT:
            raise OSError(errno.EPERM, "whiteouts need a capability")
        if flags & RENAME_EXCHANGE:  # as a file system without it answers: callers fall back
            raise OSError(errno.EINVAL, "exchanging two names is not supported here")
        src = self._place(t, olddirfd, old, follow=False)
        try:
            dst = self._place(t, newdirfd, new, follow=False)
            try:
                moved = src.lstat()
                if moved is None:
                    raise OSError(errno.ENOENT, "no such file")
                replaced = dst.lstat()
                not_a_mount(src)
                if replaced is not None:
                    not_a_mount(dst)
                self._check(t, src, moved=moved, leaving=True)
                self._check(t, dst, moved=moved)
                self._venv_moved(src, dst, moved)
                self.shared.note(dst.path)
                if stat.S_ISDIR(moved.st_mode):  # what it brings is written there too
                    self.shared.note_moved(f"/proc/{t.pid}/root", src.path, dst.path)
                why = (gitfolders.moved_git_dir(src, dst) if stat.S_ISDIR(moved.st_mode) else
                       gitfolders.becomes_git_dir(dst)
                       or gitfolders.rewrites(dst, replaced, self._git_meta(dst)))
                if why:
                    raise Refused(why)
                self._exposes(src, dst, moved)
                if dst.name in gitwrites.CONFIGS and self._git_meta(dst):
                    if flags:
                        raise Refused(f"{dst.path}: a configuration is published by rename alone")
                    why, published = gitwrites.publish(src, dst)
                    if why or published is None:
                        raise Refused(why or f"{dst.path} cannot be published")
                    self.made.drop(replaced)
                    self.made.add(published)
                    return 0
                was_git = stat.S_ISDIR(moved.st_mode) or gitfolders.is_git_folder(dst.folder)
                renameat2(src, dst, flags)
                if self.approved:
                    approved_claims.claim_at(dst.name, dst.folder, self.approved)
                if replaced is not None:
                    self.made.drop(replaced)
                self.made.moved(src.path, dst.path)
                self._git_folder(dst, moved)
                if stat.S_ISDIR(moved.st_mode) and dst.name == ".git":
                    self._republish(dst, inside=True)
                elif not was_git and dst.name in gitfolders.MARKS:
                    self._republish(dst)
                return 0
            finally:
                dst.close()
        finally:
            src.close()

    def unlink(self, t: Target, dirfd: int, address: int, flags: int) -> int:
        place = self._place(t, dirfd, address, follow=False)
        try:
            st = place.lstat()
            if st is None:
                raise OSError(errno.ENOENT, "no such file")
            self._check(t, place, moved=st if stat.S_ISDIR(st.st_mode) else None, leaving=True,
                        removing=True)
            not_a_mount(place)
            if flags & AT_REMOVEDIR:
                os.rmdir(place.name, dir_fd=place.folder)
            else:
                os.unlink(place.name, dir_fd=place.folder)
            self.made.drop(st)
            return 0
        finally:
            place.close()

    def chmod(self, t: Target, dirfd: int, address: int, mode: int, flags: int) -> int:
        place = self._place(t, dirfd, address, follow=not flags & AT_SYMLINK_NOFOLLOW)
        try:
            self._check(t, place)
            chmod_at(place, mode & 0o7777)
            return 0
        finally:
            place.close()

    def chown(self, t: Target, dirfd: int, address: int, uid: int, gid: int,
              flags: int) -> int:
        if flags & AT_EMPTY_PATH and not t.string(address):
            return self._on_caller_fd(
                t, fd_arg(dirfd), lambda p: os.chown(p, caller_id(uid), caller_id(gid)))
        place = self._place(t, dirfd, address, follow=not flags & AT_SYMLINK_NOFOLLOW)
        try:
            self._check(t, place)
            # the name, not followed: a link there is the link itself (lchown)
            os.chown(place.name, caller_id(uid), caller_id(gid), dir_fd=place.folder,
                     follow_symlinks=False)
            return 0
        finally:
            place.close()

    def truncate(self, t: Target, address: int, length: int) -> int:
        if self.max_size is not None and length > self.max_size:  # the caller's RLIMIT_FSIZE
            raise OSError(errno.EFBIG, "beyond the run's file size limit")
        place = self._place(t, AT_FDCWD, address, follow=True)
        try:
            self._check(t, place)
            fd = os.open(place.name, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
                         | os.O_NOCTTY, dir_fd=place.folder)
            try:
                os.ftruncate(fd, length)
            finally:
                os.close(fd)
            return 0
        finally:
            place.close()

    def fchmod(self, t: Target, fd_of_caller: int, mode: int) -> int:
        return self._on_caller_fd(t, fd_of_caller, lambda p: os.chmod(p, mode & 0o7777))

    def _on_caller_fd(self, t: Target, fd_of_caller: int, act: Callable[[str], None]) -> int:
        """``act`` on the file behind one of the caller's descriptors (its path
        judged; reached through a descriptor of the broker's own on that very file)."""
        path = t.fd_path(fd_of_caller)
        if path.startswith("/"):
            self._existing(t, path)
        fd = t.reopen(fd_of_caller, os.O_PATH)
        try:
            act(path_of(fd))
        finally:
            os.close(fd)
        return 0
