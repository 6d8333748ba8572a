"""The filesystem as the planner sees it: the view it asks (``FsView``, the
read-only questions; tests answer them from a dictionary), the error of a walk
that cannot finish (``WalkError``), and the view of the real filesystem
(``RealFs``): complete walks, the bound unix sockets, and read-only questions
about paths.

It only reads: it never creates, changes or follows anything it was not asked
to, and it decides nothing except refusing a run it cannot describe completely
(a walk past ``WALK_LIMIT`` entries, a symlink loop, a bound socket that can be
neither found nor shown to be hidden).
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat

from agent_sandbox import protected

from ..settings import SettingsError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence
    from typing import Protocol

    class FsView(Protocol):
        """What the builder needs to know about the filesystem (read-only questions)."""

        def kind(self, path: str) -> str | None:
            """'d', 'f' (anything not a directory) or None when absent (symlinks
            followed); raises ``SettingsError`` on a symlink loop."""

        def lkind(self, path: str) -> str | None:
            """'d', 'f', 'l' (a symlink) or None when absent (not followed)."""

        def realpath(self, path: str) -> str: ...

        def walk(self, root: str) -> list[tuple[str, str]]:
            """Every (path, kind) below ``root``, complete: kind is 'd', 'f', 'l',
            's' (socket, fifo, device) or 'u' for a folder that cannot be listed;
            raises ``WalkError``."""

        def read(self, path: str, limit: int) -> bytes | None:
            """The first ``limit`` bytes of a regular file, or None."""

        def nlink(self, path: str) -> int:
            """How many names the file has (hard links); 1 when unknown."""

        def readlink(self, path: str) -> str | None:
            """A symlink's target as written, or None."""

        def listdir(self, path: str) -> list[str] | None:
            """The names in a folder, or None when it cannot be listed."""


class WalkError(SettingsError):
    """A walk that decides protection cannot finish: the run must not start."""


WALK_LIMIT = 2_000_000  # entries below one root; beyond it the run refuses to start


class RealFs:
    """``FsView`` over the real filesystem: complete walks, no writes.

    A walk visits everything below its root (symlinks are not followed) but the
    insides of ``.git`` folders (``gitmeta`` judges those), and is done once per
    root; past ``limit`` entries it raises ``WalkError``. A path is resolved once
    too (``realpath``): one view answers one plan, as of one moment.
    """

    strict = True  # a folder changed during the walk refuses it (the sweep's is not)

    def __init__(self, limit: int = WALK_LIMIT, skip: Sequence[str] = ()) -> None:
        self.limit = limit
        self.skip = frozenset(skip)  # folders never walked into (the runtime's own)
        self._walked: dict[str, list[tuple[str, str]]] = {}
        self._real: dict[str, str] = {}

    def kind(self, path: str) -> str | None:
        try:
            st = os.stat(path)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise SettingsError(f"{path}: a symlink loop; remove it") from None
            return None
        except ValueError:
            return None
        return "d" if stat.S_ISDIR(st.st_mode) else "f"

    def lkind(self, path: str) -> str | None:
        try:
            st = os.lstat(path)
        except (OSError, ValueError):
            return None
        if stat.S_ISLNK(st.st_mode):
            return "l"
        return "d" if stat.S_ISDIR(st.st_mode) else "f"

    def realpath(self, path: str) -> str:
        """``os.path.realpath``, its parent's answer kept: a path whose last name is
        no link costs one ``lstat`` once its folder is known (the planner asks for
        about a hundred names in the same few folders)."""
        real = self._real.get(path)
        if real is not None:
            return real
        parent, name = posixpath.split(path)
        try:
            if path.startswith("/") and parent != path and name not in ("", ".", ".."):
                real = posixpath.join(self.realpath(parent), name)
                try:
                    link = stat.S_ISLNK(os.lstat(real).st_mode)
                except (OSError, ValueError):
                    link = False  # missing: what realpath gives for it too
                if link:
                    real = os.path.realpath(real)
            else:
                real = os.path.realpath(path)
        except OSError as exc:  # a link changed between realpath's lstat and readlink
            from ..failures import SandboxStartError

            raise SandboxStartError(f"{path} changed while the sandbox was planned "
                                    f"({exc.strerror}); run it again") from None
        self._real[path] = real
        return real

    def read(self, path: str, limit: int) -> bytes | None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
        except OSError:
            return None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            return os.read(fd, limit)
        except OSError:
            return None
        finally:
            os.close(fd)

    def nlink(self, path: str) -> int:
        try:
            return os.stat(path).st_nlink
        except (OSError, ValueError):
            return 1

    def readlink(self, path: str) -> str | None:
        try:
            return os.readlink(path)
        except (OSError, ValueError):
            return None

    def listdir(self, path: str) -> list[str] | None:
        try:
            return os.listdir(path)
        except (OSError, ValueError):
            return None

    def walk(self, root: str) -> list[tuple[str, str]]:
        if root not in self._walked:
            self._walked[root] = self._walk(root)
        return self._walked[root]

    def _walk(self, root: str) -> list[tuple[str, str]]:
        """By descriptors: each folder is opened from the one it was listed in without
        following symlinks, and listed through its descriptor, so that only what is
        really below ``root`` is listed (a folder swapped for a link after it was
        listed is not walked through). Such a change refuses the plan (``strict``);
        the sweep (not ``strict``) does not descend there."""
        out: list[tuple[str, str]] = []
        try:
            top = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return [(root, "u")]  # cannot be listed: protected whole by the planner
        stack: list[tuple[int, Iterator[tuple[str, str, int]]]] = []
        try:
            try:
                stack.append((top, iter(self._list(top, root, root, out))))
            except OSError:
                os.close(top)
                return [(root, "u")]
            while stack:
                fd, subs = stack[-1]
                nxt = next(subs, None)
                if nxt is None:
                    stack.pop()
                    os.close(fd)
                    continue
                name, path, at = nxt
                try:
                    sub = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
                        out[at] = (path, "u")
                        continue
                    if self.strict:
                        raise WalkError(f"{path} changed while the sandbox was planned "
                                        "(a folder became a link or went away); run it "
                                        "again") from None
                    try:  # O_DIRECTORY says ENOTDIR for a link too
                        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                        out[at] = (path, "l" if stat.S_ISLNK(st.st_mode) else "f")
                    except OSError:
                        out[at] = (path, "f")  # gone: nothing to walk
                    continue
                try:
                    listed = self._list(sub, path, root, out)
                except OSError:
                    os.close(sub)
                    out[at] = (path, "u")
                    continue
                stack.append((sub, iter(listed)))
        finally:
            for fd, _ in stack:
                os.close(fd)
        return out

    def _list(self, fd: int, d: str, root: str, out: list[tuple[str, str]]
              ) -> list[tuple[str, str, int]]:
        """List the folder open as ``fd`` (at ``d``) into ``out``: (name, path, index
        in ``out``) of each subfolder to walk."""
        subs: list[tuple[str, str, int]] = []
        with os.scandir(fd) as it:
            entries = list(it)
        if len(out) + len(entries) > self.limit:
            raise WalkError(
                f"{root} holds more than {self.limit} entries, too many to check "
                "for protected and denied paths; make a smaller folder writable "
                "or run from a smaller one")
        prefix = f"{d}/" if d != "/" else "/"
        append = out.append
        for e in entries:
            name = e.name
            path = prefix + name
            try:  # the kind the listing gave (d_type): no call per entry
                if e.is_dir(follow_symlinks=False):
                    # a git directory's insides are judged by ``gitmeta`` (its object
                    # store alone can hold more entries than the rest of the tree)
                    if path not in self.skip and (name != protected.GIT_DIR or (
                            d == root and root.endswith("/.git"))):
                        subs.append((name, path, len(out)))
                    append((path, "d"))
                    continue
                kind = ("f" if e.is_file(follow_symlinks=False) else
                        "l" if e.is_symlink() else "s")  # s: a socket, fifo or device
            except OSError:
                kind = "u"
            append((path, kind))
        return subs


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class SweepFs(RealFs):
    """The real filesystem as the sweep sees it: a symlink loop is not a folder
    (the planner refuses a run over one; the sweep must still finish), and a folder
    that changes while it is walked is not walked into."""

    strict = False

    def kind(self, path: str) -> str | None:
        try:
            st = os.stat(path)
        except (OSError, ValueError):
            return None
        return "d" if stat.S_ISDIR(st.st_mode) else "f"
