"""The caller's PATH as the protection reads it: the folders of the programs the
user runs (a program planted in one would run on the host instead of the one the
user types), and the relative entries (``node_modules/.bin``, ``.``), where a
program of the same name as one on the rest of PATH would stand for it in a
shell whose working folder holds it."""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping


def tool_dirs(env: Mapping[str, str] | None = None) -> list[str]:
    """The folders on the caller's PATH: a program planted in one would run on the
    host instead of the one the user types (``bwrap.plan``'s ``tools``)."""
    path = (os.environ if env is None else env).get("PATH", "")
    return list(dict.fromkeys(os.path.normpath(d) for d in path.split(":")
                              if os.path.isabs(d)))


def path_shadows(env: Mapping[str, str] | None = None
                 ) -> tuple[tuple[str, frozenset[str]], ...]:
    """For each relative entry of PATH (``node_modules/.bin``; ``.`` or empty: the
    working folder), the programs found on the rest of PATH: one planted under
    that name in such a folder would run on the host instead, in a shell there."""
    entries = (os.environ if env is None else env).get("PATH", "").split(":")
    relative = [os.path.normpath(d) if d else "." for d in entries if not os.path.isabs(d)]
    if not relative:
        return ()
    names: set[str] = set()
    for d in entries:
        if os.path.isabs(d):
            try:
                names.update(os.listdir(d))
            except OSError:
                continue
    return tuple((rel, frozenset(names)) for rel in dict.fromkeys(relative))
