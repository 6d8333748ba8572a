"""The sockets below the writable roots, as the planner masks them.

A socket in a writable root (a daemon's, or a hard link to one that an earlier
run made) is as reachable as one the kernel lists where it was bound, so the
planner masks every socket its walks of the roots find. Those walks leave the
insides of ``.git`` folders to ``gitmeta`` (an object store alone can hold more
entries than the rest of the tree); a socket linked or moved into one is walked
for here, every ``.git`` folder below a root included, nested ones too.
"""

from __future__ import annotations

import posixpath

from agent_sandbox import protected

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

    from .bwrap import FsView


def sockets_below(fs: FsView, roots: Iterable[str]) -> list[str]:
    """Every socket (or other special file) the walks of ``roots`` find, and those
    in the ``.git`` folders below them."""
    found: list[str] = []
    queue = list(roots)
    while queue:
        for path, kind in fs.walk(queue.pop()):
            if kind == "s":
                found.append(path)
            elif kind == "d" and posixpath.basename(path) == protected.GIT_DIR:
                queue.append(path)
    return found
