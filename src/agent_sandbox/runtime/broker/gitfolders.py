"""Git folders as they are made: what may appear in one, and when a folder becomes one.

Git metadata is judged by what is written to it (``gitwrites``), so a name git
runs or reads must come into being only by being written: never as a link, a
hard link or a node, whose content the broker never sees (a symbolic ``config``
to a file of the command's, a ``hooks`` folder linked to its scripts, a second
name for ``config`` written afterwards). Below ``.git/modules/`` and
``.git/worktrees/`` (where git looks for a submodule's or a worktree's git
folder) no link is made either, but in the object store, refs and logs, where
``git clone`` of a local path hard-links objects.

A folder becomes a git folder when a mark appears in it (``HEAD``,
``commondir``, ``gitdir``: git takes such a folder for a repository), however it
appears: written, renamed, linked, or brought by moving the folder. What it
already holds is judged then (``gitmeta.check_new_git_dir``; a linked worktree's
folder by ``check_new_worktree``), so a configuration written before the mark
cannot wait for a later ``git status`` of the user's; after it, every change is
judged as written.
"""

from __future__ import annotations

import os

from agent_sandbox import protected

from ..bwrap import gitmeta
from ..bwrap.fsview import SweepFs
from .surroundings import looks_like_git_dir
from .target import Place

_META = frozenset(name for name, _, _ in protected.GIT_EXECUTABLE)
MARKS = frozenset(gitmeta.GIT_DIR_MARKS)
_GIT = protected.GIT_DIR
# where git keeps objects, refs and logs: links allowed (``git clone`` of a local path)
_STORE = frozenset({"objects", "refs", "logs", "info", "lfs", "rr-cache", "packed-refs"})


def by_reference(place: Place) -> str | None:
    """Why ``place`` may not be made as a link, hard link or node (or be the
    source of a hard link), or None."""
    parts = place.path.strip("/").split("/")
    name = place.name
    if _GIT in parts[:-1]:
        rest = parts[parts.index(_GIT) + 1:]
        if name in _META or name in MARKS or "hooks" in rest[:-1]:
            return f"{place.path} is git metadata: it is made by writing it (judged), never linked"
        if rest[0] in ("modules", "worktrees") and not _STORE.intersection(rest[1:]):
            return (f"{place.path} is where git looks for a submodule's or worktree's git folder: "
                    "never a link")
    if place.folder < 0:
        return None
    if (name in _META or name in MARKS) and looks_like_git_dir(place.folder):
        return (f"{place.path} is git metadata of {place.parent}: it is made by writing "
                "it, never linked")
    if place.parent.rsplit("/", 1)[-1] == "hooks":
        up = os.open("..", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=place.folder)
        try:
            if looks_like_git_dir(up):
                return f"{place.path} is a hook: it is made by writing it, never linked"
        finally:
            os.close(up)
    return None


def becomes(place: Place) -> bool:
    """Whether making ``place`` makes its folder a git folder: then what was
    written there before, through a descriptor or a second name, is republished
    (``Files._republish``), whichever call makes the mark (open, link, node,
    folder, rename)."""
    return place.name in MARKS and place.folder >= 0 and not is_git_folder(place.folder)


def becomes_git_dir(place: Place) -> str | None:
    """Why the mark about to appear at ``place`` may not: its folder, not yet a git
    folder, holds what host git would run. (Paths are the host's: the writable
    roots are bound at their own paths.)"""
    if place.name not in MARKS or place.folder < 0 or looks_like_git_dir(place.folder):
        return None
    return judged(place.parent, place.parent)


def moved_git_dir(src: Place, dst: Place) -> str | None:
    """Why a folder that is a git folder (``src``) may not be moved to ``dst``."""
    try:
        fd = os.open(src.name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                     dir_fd=src.folder)
    except OSError:
        return None
    try:
        if dst.name != _GIT and not looks_like_git_dir(fd):
            return None  # a folder named .git is one for git, whatever it holds yet
    finally:
        os.close(fd)
    return judged(src.path, dst.path)


def judged(read_at: str, as_path: str) -> str | None:
    """Why the folder at ``read_at``, as a new git folder at ``as_path``, is unsafe."""
    parts = as_path.strip("/").split("/")
    fs = SweepFs()
    try:
        if _GIT in parts and len(parts) == parts.index(_GIT) + 3 and \
                parts[parts.index(_GIT) + 1] == "worktrees":
            common = "/" + "/".join(parts[:parts.index(_GIT) + 1])
            why = gitmeta.check_new_worktree(fs, read_at, common)
        else:
            why = gitmeta.check_new_git_dir(fs, read_at)
    except Exception as exc:  # what the command wrote must never stop the judgement
        why = f"it cannot be judged ({type(exc).__name__})"
    return f"{as_path} would become a git folder that host git would run: {why}" if why else None


def rewrites(place: Place, existing: os.stat_result | None, git_meta: bool) -> str | None:
    """Why replacing an existing ``commondir`` (``git_meta``: a git folder's; a
    worktree's says where git reads its configuration from) is refused: git
    writes it once, when the worktree is added."""
    if existing is None or place.name != "commondir" or not git_meta:
        return None
    return f"{place.path} exists: a worktree's commondir is written once, never rewritten"


def is_git_folder(folder: int) -> bool:
    """Whether git takes the folder open at ``folder`` for a git folder already
    (a mark in it, or its name ``.git``)."""
    return looks_like_git_dir(folder) or os.readlink(f"/proc/self/fd/{folder}").endswith(
        "/" + _GIT)
