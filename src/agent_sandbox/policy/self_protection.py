"""Self-protection: the paths no agent may write or read, whatever the policy says.

Writes: the one protected set (``agent_sandbox.protected``: what host tools
execute or load later, at any depth and in the home folder, and git's
configuration and hooks in every git directory), every folder of this
project's state and policy (``contract.state_paths``), the managed settings of
every agent, the repository's ``.sandbox/`` and the interpreter and package that
run the hook. Reads: every audit signing key, wherever a log keeps it
(``<log folder>/../audit-keys/``). Added to every policy at load time; a policy
file cannot remove them. Stdlib only; it never reads the filesystem.
"""

from __future__ import annotations

import os
import sys

from .. import contract, protected
from ..repo_layout import SANDBOX, under

# Never readable by an agent: the keys that sign audit checkpoints, in any log's
# key folder (a repository's .sandbox/audit-keys, the host's and the user's state).
PROTECTED_READ: tuple[str, ...] = ("**/audit-keys", "**/audit-keys/**")

# Managed settings of the agents: system-wide, outside any writable root.
_MANAGED = ("/etc/claude-code", "/etc/codex", "/etc/gemini-cli", "/etc/cursor",
            "/Library/Application Support/ClaudeCode")


def protected_paths(repo: str | None, home: str) -> list[str]:
    """Expanded path rules (absolute, or ``**/`` anchored) that are never writable."""
    rules = list(protected.any_depth_rules())
    rules += protected.home_rules(home)
    for folder in (*contract.state_paths(home), *_MANAGED):
        rules += [folder, folder.rstrip("/") + "/**"]
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    rules += [package, os.path.realpath(package), sys.prefix, os.path.realpath(sys.prefix)]
    if repo:
        rules.append(under(repo, SANDBOX))
    return sorted(set(rules))
