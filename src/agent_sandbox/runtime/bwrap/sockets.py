"""Unix sockets allowed by path: the places a ``connect()`` may reach, resolved
when the run is planned (``Plan.unix_sockets``). Nothing is mounted for them:
each connection is judged when it is made (``broker.connect``), by where the
socket file really is. Pure given an ``FsView``."""

from __future__ import annotations

import posixpath

from agent_sandbox.spec.paths import expand

from ..settings import SettingsError
from .globs import under as _under

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..settings import NetworkSettings
    from .fsview import FsView


def unix_sockets(n: NetworkSettings, home: str, cwd: str, fs: FsView,
                 writable: Sequence[str], carved: Sequence[str],
                 private: Sequence[str]) -> tuple[str, ...] | None:
    """The resolved places allowed (None: no connection is judged by path, none
    listed or all allowed). ``writable``: the writable roots; ``carved``: the
    read-only and hidden mounts inside them; ``private``: the private state's
    resolved paths, never reachable."""
    if not n.allow_unix_sockets or n.allow_all_unix_sockets:
        return None

    def writable_here(path: str) -> bool:
        return any(_under(path, w) for w in writable) and not any(
            _under(path, c) for c in carved)

    listed: list[str] = []
    for s in n.allow_unix_sockets:
        # one missing now may be bound later (judged then): resolved as far as it exists
        p = expand(s, home=home, cwd=cwd)
        rp = fs.realpath(p)
        # an entry the command can also write is dropped (srt's rule): it could put
        # its own socket, or a link to another, where the allowed one was; so is one
        # whose resolution passes through a link the command can write
        if any(writable_here(x) for x in (p, rp, *links_on_the_way(fs, p))):
            continue
        if any(_under(rp, x) for x in private):
            continue  # listed or not, private state is never reachable
        listed.append(rp)
    return tuple(dict.fromkeys(listed))


def links_on_the_way(fs: FsView, path: str) -> list[str]:
    """Every symlink that resolving ``path`` goes through (their own paths)."""
    out: list[str] = []
    todo = [x for x in path.split("/") if x]
    cur = "/"
    while todo:
        part = todo.pop(0)
        if part == ".":
            continue
        if part == "..":
            cur = posixpath.dirname(cur)
            continue
        nxt = posixpath.join(cur, part)
        if fs.lkind(nxt) != "l":
            cur = nxt
            continue
        out.append(nxt)
        target = fs.readlink(nxt)
        if target is None or len(out) > 40:
            raise SettingsError(f"{path}: a symlink loop or an unreadable link; remove it")
        if target.startswith("/"):
            cur = "/"
        todo = [x for x in target.split("/") if x] + todo
    return out
