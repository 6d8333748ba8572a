"""After a run: disarm protected names the command created deep in a writable root.

The mounts protect every protected name that exists (to a bounded depth) and
the top of each writable root. A command can still ``mkdir -p a/b/.git/hooks``
in a directory where no repository existed. ``find_new`` walks the writable
roots after the command has ended (so nothing inside the sandbox is running)
and reports protected names that are new: created at or after the run's start,
with nothing older inside them (a pre-existing repository always has older
entries, such as ``objects/``). ``disarm`` renames each to
``<name>.sandbox-quarantine-<time>``: an inert name no agent or git will load,
kept as evidence, never deleted.

It must never touch a path outside the writable roots or one that existed
before the run.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Sequence

from .bwrap import PROTECTED_NAMES

WALK_BUDGET = 200_000
# ctime uses the kernel's coarse clock, which can lag wall time by a tick
CLOCK_SLACK = 0.05


def _is_new(path: str, since: float) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if st.st_ctime < since:
        return False
    if os.path.isdir(path) and not os.path.islink(path):
        try:
            with os.scandir(path) as it:
                for e in it:
                    try:
                        if e.stat(follow_symlinks=False).st_ctime < since:
                            return False
                    except OSError:
                        continue
        except OSError:
            return False
    return True


def find_new(roots: Sequence[str], since: float, skip: Iterable[str] = (),
             budget: int = WALK_BUDGET, *, top: bool = False) -> tuple[list[str], bool]:
    """(new protected paths, complete) below ``roots``; ``skip`` are known targets.

    ``top`` also checks the top of each root (the bwrap backend does not need
    to: placeholders and mounts protect it).
    """
    skipped = set(skip)
    found: list[str] = []
    seen = 0
    stack = [r for r in roots if os.path.isdir(r)]
    cutoff = since - CLOCK_SLACK
    while stack:
        d = stack.pop()
        try:
            with os.scandir(d) as it:
                entries = list(it)
        except OSError:
            continue
        for e in entries:
            seen += 1
            if seen > budget:
                return found, False
            if e.path in skipped:
                continue
            if e.name in PROTECTED_NAMES and (
                    e.name != "fish" or os.path.basename(d) == ".config"):
                if d in roots and not top:
                    continue  # the top of a root is covered by placeholders and mounts
                if _is_new(e.path, cutoff):
                    found.append(e.path)
                continue  # never walk into a protected directory (e.g. .git/objects)
            try:
                if e.is_dir(follow_symlinks=False):
                    stack.append(e.path)
            except OSError:
                continue
    return found, True


def disarm(paths: Iterable[str], now: float | None = None) -> list[tuple[str, str]]:
    """Rename each new protected path to an inert quarantine name; (old, new) pairs."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now or time.time()))
    moved = []
    for p in paths:
        target = f"{p}.sandbox-quarantine-{stamp}"
        try:
            os.rename(p, target)
            moved.append((p, target))
        except OSError:
            continue
    return moved
