"""How a run writes the git metadata of a repository it made, judged as it is written.

A repository a run makes is the run's to change, but the user's git may run in
it before the run ends. So what would make host git run a program never
reaches it, even for a moment:

- its configuration (``config``, ``config.worktree``) is written the way git
  writes it, to a lock file renamed into place: the broker reads the lock
  file's text, judges it (``gitmeta.config_text_why``: only keys git writes
  itself), and publishes a copy of its own in its place, so nothing the
  command still holds open can change it afterwards; written in place, it is
  refused;
- a hook is refused unless it is a sample (``*.sample``, which git never runs:
  what ``git init`` copies from its templates);
- ``commondir`` (where git reads the configuration and hooks from) is refused
  but in a linked worktree's git folder (judged by the sweep after the run).
"""

from __future__ import annotations

import os
import stat

from ..bwrap import gitmeta
from .target import Place
from .written import write_bytes, write_whole

CONFIGS = ("config", "config.worktree")
_HOOKS = "hooks"


def rule_for(path: str, container: str, brought: bool = False) -> str | None:
    """Why writing ``path``, git metadata of the git folder ``container`` the run
    made, is refused whatever is written (None: allowed, or judged by content
    through ``publish``). ``brought``: a folder or link moved there, with what it
    holds (a ``hooks`` folder so brought would bring programs git runs)."""
    rest = path[len(container.rstrip("/")) + 1:]
    if rest == _HOOKS and brought:
        return f"{path}: a folder moved in as hooks would bring programs git runs"
    if rest == _HOOKS or not rest.startswith(_HOOKS + "/"):
        if rest == "commondir" and "/worktrees/" not in container:
            return f"{path}: a repository's commondir (git reads its configuration from there)"
        return None
    if not rest.endswith(".sample") or rest.count("/") != 1:
        return f"{path} is a hook (git runs it)"
    return None


def publish(src: Place, dst: Place) -> tuple[str | None, os.stat_result | None]:
    """Put a copy of the configuration at ``src`` (a lock file) at ``dst`` when its
    text is safe: (why not, None) or (None, the published file's status)."""
    try:
        fd = os.open(src.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     dir_fd=src.folder)
    except OSError as exc:
        return f"{src.path} cannot be read ({exc.strerror})", None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return f"{src.path} is not a file", None
        data = b""
        while len(data) <= gitmeta.READ_LIMIT and (chunk := os.read(fd, 1 << 16)):
            data += chunk
    finally:
        os.close(fd)
    why = gitmeta.config_text_why(data, "configuration", dst.parent)
    if why:
        return f"{dst.path}: {why} (what host git would run)", None
    published = write_whole(dst.folder, dst.name, stat.S_IMODE(st.st_mode),
                            write_bytes(data), replace=True, tag=st.st_ino)
    os.unlink(src.name, dir_fd=src.folder)
    return None, published


def republish(folder: int, where: str) -> str | None:
    """The configuration files of the folder open at ``folder`` (``where``), which has
    just become a git folder, replaced by copies of their text, judged: a descriptor
    the command opened before now writes a file no git reads. Why one could not be
    kept (it is removed then), or None."""
    for name in CONFIGS:
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                         dir_fd=folder)
        except FileNotFoundError:
            continue
        except OSError as exc:
            return f"{where}/{name} cannot be read ({exc.strerror})"
        try:
            st = os.fstat(fd)
            data = b""
            while stat.S_ISREG(st.st_mode) and len(data) <= gitmeta.READ_LIMIT and \
                    (chunk := os.read(fd, 1 << 16)):
                data += chunk
        finally:
            os.close(fd)
        why = "not a file" if not stat.S_ISREG(st.st_mode) else (
            "too large to judge" if len(data) > gitmeta.READ_LIMIT else
            gitmeta.config_text_why(data, "configuration", where))
        if why:
            os.unlink(name, dir_fd=folder)
            return f"{where}/{name}: {why} (what host git would run); removed"
        write_whole(folder, name, stat.S_IMODE(st.st_mode), write_bytes(data), replace=True,
                    tag=st.st_ino)
    return None
