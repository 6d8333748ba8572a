"""What sandboxed runs made: this run's record, and the mark every run leaves.

``Made`` is one run's record, by device and inode, of the files and folders its
calls created (what makes a repository or a virtualenv the run's own) and of
the git folders among them (what the sweep judges after the run). ``MARK`` is
an extended attribute the broker sets on every folder it makes, which the
command cannot set (``seccomp`` answers ``setxattr`` with ``EOPNOTSUPP`` inside
the sandbox): a folder so marked was made by a sandboxed run, this one or an
earlier one (``marked``).
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

MARK = "user.agent-sandbox.made"


class Made:
    """The files and folders this run's calls created (``ids``: what makes a
    repository or a virtualenv the run's own), by device and inode."""

    def __init__(self) -> None:
        self.ids: set[tuple[int, int]] = set()
        # the git folders (a ``.git`` folder or file, a bare repository) this run
        # made, by the path it last gave them, and their identities: what the
        # sweep judges after the run, never a walk of the tree
        self.repos: dict[str, tuple[int, int]] = {}
        self.on_repo: Callable[[str, tuple[int, int]], None] | None = None

    def repo(self, path: str, st: os.stat_result) -> None:
        ident = (st.st_dev, st.st_ino)
        self.repos[path] = ident
        if self.on_repo is not None:
            try:  # owed to a later start should this run be killed (``sweep.owe_repo``)
                self.on_repo(path, ident)
            except OSError:
                pass

    def moved(self, old: str, new: str) -> None:
        """A rename the broker made: the recorded paths at or below ``old`` follow."""
        for path in [p for p in self.repos if p == old or p.startswith(old.rstrip("/") + "/")]:
            ident = self.repos.pop(path)
            self.repo(new + path[len(old):], ident_stat(ident))

    def add(self, st: os.stat_result) -> None:
        self.ids.add((st.st_dev, st.st_ino))

    def drop(self, st: os.stat_result | None) -> None:
        if st is not None:
            self.ids.discard((st.st_dev, st.st_ino))

    def holds(self, st: os.stat_result | None) -> bool:
        return st is not None and (st.st_dev, st.st_ino) in self.ids


def ident_stat(ident: tuple[int, int]) -> os.stat_result:
    """A stand-in ``stat_result`` carrying only a device and inode."""
    return os.stat_result((0, ident[1], ident[0], 0, 0, 0, 0, 0, 0, 0))


def mark(name: str, folder: int) -> None:
    """``MARK`` on the folder ``name`` just made in the folder open at ``folder``
    (where the file system keeps extended attributes: elsewhere it is this run's
    alone, by ``Made``)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                     dir_fd=folder)
    except OSError:
        return
    try:
        os.setxattr(fd, MARK, b"1")
    except OSError:
        pass
    finally:
        os.close(fd)


def mark_file(fd: int) -> None:
    """``MARK`` on a file the broker just made (a virtualenv's ``pyvenv.cfg``: who wrote
    it says whose the virtualenv is)."""
    try:
        os.setxattr(fd, MARK, b"1")
    except OSError:
        pass


def marked_file(path: str) -> bool:
    """Whether the file at ``path`` (not followed) carries ``MARK``."""
    try:
        os.getxattr(path, MARK, follow_symlinks=False)
        return True
    except OSError:
        return False


def marked(folder: int) -> bool:
    """Whether the folder open at ``folder`` (any descriptor, ``O_PATH`` too)
    carries ``MARK``."""
    try:
        os.getxattr(f"/proc/self/fd/{folder}", MARK)
        return True
    except OSError:
        return False
