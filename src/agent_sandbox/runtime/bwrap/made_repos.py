"""After a brokered run: the git folders the command made, judged.

The broker records each git folder a run's calls made (``broker.files.Made.repos``:
a ``.git`` folder or file, a bare repository, a linked worktree's git folder),
by path and identity; the sweep judges those alone, never a walk of the tree.
"""

from __future__ import annotations

import os
import stat

from agent_sandbox import protected

from . import gitmeta
from .fsview import SweepFs

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping


def made_repos(repos: Mapping[str, tuple[int, int]]) -> list[tuple[str, str]]:
    """(path, why) of each git folder a brokered run made (``Made.repos``: path, device,
    inode) that would make host git run a program (``check_new_git_dir``), and each
    ``.git`` file or link; one gone, or no longer the run's (another inode), is not."""
    fs = SweepFs()
    found: list[tuple[str, str]] = []
    for path, ident in repos.items():
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) != tuple(ident):
            continue
        bare = os.path.basename(path) != protected.GIT_DIR
        if not stat.S_ISDIR(st.st_mode):
            try:
                kept = not bare and (_worktree_of(fs, path) or _submodule_of(fs, path)) \
                    is not None
            except Exception:  # what the command wrote must never stop the sweep
                kept = False
            if not bare and not kept:
                found.append((path, "a .git file or link made during the run"))
            continue
        common = os.path.dirname(os.path.dirname(path))
        try:
            why = (gitmeta.check_new_worktree(fs, path, common) if bare and
                   os.path.basename(os.path.dirname(path)) == "worktrees" and
                   os.path.basename(common) == protected.GIT_DIR
                   else gitmeta.check_new_git_dir(fs, path))
        except Exception as exc:  # what the command wrote must never stop the sweep
            why = f"it cannot be judged ({type(exc).__name__}: {exc})"
        if why and bare:
            # git needs its HEAD (and takes objects/ and refs/ through commondir); the
            # rest of the folder stays where it is
            found += [(os.path.join(path, m), f"a git directory made during the run: {why}")
                      for m in gitmeta.GIT_DIR_MARKS if os.path.lexists(os.path.join(path, m))]
        elif why:
            found.append((path, f"a repository made during the run: {why}"))
    return found


def _submodule_of(fs: SweepFs, dotgit: str) -> str | None:
    """The submodule's git folder a ``.git`` file points to when it is what ``git
    submodule add`` writes: ``R/.git/modules/NAME`` for a file inside R's work
    tree, which ``check_new_git_dir`` passes; else None."""
    admin = gitmeta.gitdir_of_file(fs, dotgit) if os.path.isfile(dotgit) else None
    if admin is None:
        return None
    work = gitmeta.superproject_of(admin)
    if work is None or not os.path.realpath(dotgit).startswith(work.rstrip("/") + "/"):
        return None
    return admin if gitmeta.check_new_git_dir(fs, admin) is None else None


def _worktree_of(fs: SweepFs, dotgit: str) -> str | None:
    """The linked worktree's git folder a ``.git`` file points to when it is what
    ``git worktree add`` writes: ``REPO/.git/worktrees/NAME``, whose ``gitdir``
    names this file back and which ``check_new_worktree`` passes; else None."""
    admin = gitmeta.gitdir_of_file(fs, dotgit) if os.path.isfile(dotgit) else None
    if admin is None or os.path.basename(os.path.dirname(admin)) != "worktrees":
        return None
    common = os.path.dirname(os.path.dirname(admin))
    back = fs.read(os.path.join(admin, "gitdir"), 4096) or b""
    if os.path.basename(common) != protected.GIT_DIR or os.fsdecode(
            back.rstrip(b"\n")) != os.path.realpath(dotgit):
        return None
    return admin if gitmeta.check_new_worktree(fs, admin, common) is None else None
