"""The repositories connected with ``sandbox init``: the only folders whose
``.sandbox/policy.json`` a hook may apply.

A ``.sandbox/`` folder found on the way up from a tool call's working directory
proves nothing: an agent (or an approved command) could have planted one with
a permissive policy in a subfolder. The registry lives in the user's state
folder (``contract.user_state_dir``) of the account's home
(``state_paths.account_home``, never ``$HOME``: every writer and reader names the
same one), which every sandbox mounts read-only and the policy engine
protects; ``sandbox init`` adds a repository, ``sandbox uninstall`` removes it.
The policy for a call is the nearest *registered* repository at or above its
working directory, else the managed one.

Stdlib only (the hook reads it on every call). An unreadable or malformed
registry counts as empty: it never makes a folder count as registered.
"""

from __future__ import annotations

import os

from .. import contract
from ..quickjson import loads

FILE = "repositories.json"


def registry_path(home: str) -> str:
    return os.path.join(contract.user_state_dir(home), FILE)


def registered(home: str) -> list[str]:
    try:
        with open(registry_path(home), "rb") as fh:
            data = loads(fh.read(4_000_000))
    except (OSError, ValueError):
        return []
    repos = data.get("repositories") if isinstance(data, dict) else None
    if not isinstance(repos, list):
        return []
    return [r for r in repos if isinstance(r, str) and r.startswith("/")]


def _write(home: str, repos: list[str]) -> None:
    path = registry_path(home)
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    import json

    from agent_sandbox.atomic_file import replace_file

    replace_file(path, (json.dumps({"repositories": sorted(set(repos))}, indent=1)
                        + "\n").encode(), 0o644)


def register(repo: str, home: str) -> None:
    real = os.path.realpath(repo)
    _write(home, [*registered(home), real])


def unregister(repo: str, home: str) -> None:
    real = os.path.realpath(repo)
    _write(home, [r for r in registered(home) if r != real])


def repository_of(cwd: str, home: str) -> str | None:
    """The nearest registered repository at or above ``cwd`` (symlinks resolved)."""
    repos = set(registered(home))
    if not repos:
        return None
    d = os.path.realpath(cwd)
    while True:
        if d in repos:
            return d
        parent = os.path.dirname(d)
        if parent == d:
            return None
        d = parent
