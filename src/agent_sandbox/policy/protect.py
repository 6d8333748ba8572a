"""Self-protection: the paths no agent may write, whatever the policy says.

The sandbox's own state (``.sandbox/**``: policy, queue, approvals, audit),
every agent's settings, hooks and MCP configuration, the managed policy in
``/etc/agent-sandbox`` and the interpreter and package that run the hook. The
list is added to every policy at load time; a policy file cannot remove it.
"""

from __future__ import annotations

import os
import sys

from ..spec.paths import MANDATORY_DENY_WRITE

_PER_DIRECTORY = (
    ".sandbox", ".claude", ".codex", ".cursor", ".gemini", ".vscode", ".windsurf", ".idea",
    ".git/hooks",
)
_FILES = (".mcp.json", ".git/config", ".claude.json", ".cursorrules.json")


# Never readable by an agent: the key that signs audit checkpoints.
PROTECTED_READ: tuple[str, ...] = ("**/.sandbox/audit-keys", "**/.sandbox/audit-keys/**",
                                   "**/.local/state/agent-sandbox/audit-keys",
                                   "**/.local/state/agent-sandbox/audit-keys/**")


def protected_paths(repo: str | None, home: str) -> list[str]:
    """Expanded path rules (absolute, or ``**/`` anchored) that are never writable."""
    rules = list(MANDATORY_DENY_WRITE)
    for d in _PER_DIRECTORY:
        rules.append(f"**/{d}")
        rules.append(f"**/{d}/**")
    rules += [f"**/{f}" for f in _FILES]
    rules += [
        "/etc/agent-sandbox",
        "/etc/claude-code",
        "/etc/codex",
        "/etc/gemini-cli",
        "/etc/cursor",
        "/Library/Application Support/ClaudeCode",
        os.path.join(home, ".config", "agent-sandbox"),
        os.path.join(home, ".local", "state", "agent-sandbox"),  # keys, pins, host queue
        os.path.join(home, ".srt-settings.json"),
        os.path.join(home, ".codex"),
        os.path.join(home, ".gemini"),
        os.path.join(home, ".cursor"),
        os.path.join(home, ".claude"),
        os.path.join(home, ".claude.json"),
    ]
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    rules.append(package)
    rules.append(os.path.realpath(package))
    rules.append(sys.prefix)
    rules.append(os.path.realpath(sys.prefix))
    if repo:
        rules.append(os.path.join(repo, ".sandbox"))
    return sorted(set(rules))
