"""``sandbox install repo PATH``: connect one repository on a fleet host, as its
owner, once.

The owner is the owner of the repository folder (never a name a front end
guesses). Run as root, the step runs itself again as that owner (``runuser``,
the owner's home from the password database), so nothing in a folder the
owner controls is created or followed with root's rights. As the owner it
starts ``.sandbox/policy.yml`` from the given text when there is none, then runs
``sandbox init`` with the agents' flags unless ``.sandbox/policy.json`` exists
(connected before: a later run changes nothing).

``init_flags`` is the one place that turns a host's spec into those flags; the
Ansible filter and the pyinfra deploy both call it.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from typing import Any

from agent_sandbox.contract import self_argv
from agent_sandbox.errors import InstallError

from ..repo_layout import SANDBOX, under

STARTER_POLICY = """# Repository policy layer (see `sandbox schema`). The fleet's managed layers
# above it may only be tightened here.
version: 1
"""
AGENTS = ("claude", "codex", "cursor", "gemini")
FLAGS = frozenset({*(f"--{a}" for a in AGENTS), "--mcp", "--trust"})


def init_flags(spec: Any) -> list[str]:
    """``sandbox init`` flags for the agents ``spec`` enables, and ``--mcp``."""
    flags = [f"--{name}" for name in AGENTS
             if name in spec.agents and getattr(spec.agents[name], "enabled", True)]
    return [*flags, "--mcp"]


# ``sandbox init``'s "installed, but a chosen client skips the hooks until trusted":
# the files are in place; the fleet's own report is ``sandbox verify`` (which names
# the client), so the play goes on and says it
NOT_ENFORCING = 3


def _run(argv: list[str], what: str, ok: tuple[int, ...] = (0,)) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=300,
                          stdin=subprocess.DEVNULL)
    if proc.returncode == NOT_ENFORCING and NOT_ENFORCING in ok:
        sys.stderr.write(proc.stderr)
        return proc.stdout
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip()
        raise InstallError(f"{what} failed ({proc.returncode}): {detail}")
    return proc.stdout


def _as_owner(repo: str, uid: int, flags: list[str], policy: str, python: str) -> bool:
    import pwd

    try:
        pw = pwd.getpwuid(uid)
    except KeyError:
        raise InstallError(f"{repo} is owned by uid {uid}, which has no account") from None
    out = _run(["runuser", "-u", pw.pw_name, "--", "env", f"HOME={pw.pw_dir}",
                *self_argv(python, "install", "repo", repo, *flags, "--policy", policy)],
               f"sandbox install repo {repo} as {pw.pw_name}")
    lines = out.strip().splitlines()
    return bool(lines) and lines[-1] == "changed"


def _connect(repo: str, flags: list[str], policy: str, python: str) -> bool:
    changed = False
    folder = under(repo, SANDBOX)
    start = os.path.join(folder, "policy.yml")
    if policy and not os.path.lexists(start):
        os.makedirs(folder, mode=0o755, exist_ok=True)
        fd = os.open(start, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(policy)
        changed = True
    if not os.path.lexists(os.path.join(folder, "policy.json")):
        _run(self_argv(python, "init", repo, *flags), f"sandbox init {repo}",
             ok=(0, NOT_ENFORCING))
        changed = True
    return changed


def install(path: str, flags: list[str], policy: str | None = None, *,
            python: str = sys.executable) -> bool:
    """Connect the repository at ``path``. ``policy``: the starter layer's text
    (None: ``STARTER_POLICY``; empty: let ``sandbox init`` write its own).
    Returns whether anything changed."""
    unknown = sorted(set(flags) - FLAGS)
    if unknown:
        raise InstallError(f"unknown sandbox init flags: {unknown}")
    repo = os.path.realpath(path)
    try:
        st = os.stat(repo)
    except OSError as exc:
        raise InstallError(f"{path}: {exc.strerror}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise InstallError(f"{path} is not a directory")
    text = STARTER_POLICY if policy is None else policy
    if os.geteuid() == 0 and st.st_uid != 0:
        return _as_owner(repo, st.st_uid, flags, text, python)
    return _connect(repo, flags, text, python)
