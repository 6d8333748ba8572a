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
from ..errors import SandboxError
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
    return _nearest(os.path.realpath(cwd), repos)


def _nearest(real: str, repos: set[str]) -> str | None:
    d = real
    while True:
        if d in repos:
            return d
        parent = os.path.dirname(d)
        if parent == d:
            return None
        d = parent


class CrossedLink(SandboxError, ValueError):
    """A working folder that reaches its repository through a link inside another."""


def repository_for_call(cwd: str, home: str) -> str | None:
    """``repository_of`` for a tool call's working folder, which a sandboxed command
    may have shaped: a link inside a connected repository (``sub -> ../other``, made
    by a command there) must not move the call to another repository's policy and
    queue, or out of every repository. ``CrossedLink`` says which link did; links
    outside every repository (a user's ``~/src -> /data/src``) are followed."""
    repos = set(registered(home))
    if not repos:
        return None
    path = os.path.abspath(cwd)
    real = os.path.realpath(path)
    found = _nearest(real, repos)
    if real == path:
        return found  # no link on the way: nothing to judge
    here = "/"
    for part in path.split("/")[1:]:
        step = os.path.join(here, part)
        if os.path.islink(step):
            holder = _nearest(os.path.realpath(here), repos)
            if holder is not None and _nearest(os.path.realpath(step), repos) != holder:
                raise CrossedLink(
                    f"the working folder {cwd} goes through the link {step} inside the "
                    f"repository {holder} to {os.path.realpath(step)}, "
                    + (f"the repository {found}" if found else "outside every connected "
                       "repository")
                    + ": a link a command may have made never takes a call to another "
                    "policy (work in the folder itself)")
        here = step
    return found
