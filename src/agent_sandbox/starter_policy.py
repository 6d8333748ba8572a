"""The repository policy layer ``sandbox init`` starts a repository with.

A spec layer (``sandbox schema``) written once to ``.sandbox/policy.yml``: the
full starter on an unmanaged host, an inheriting one where a managed host
policy exists (whose allow rules and writable roots a repository layer may not
widen). Stdlib only.
"""

from __future__ import annotations

import os

from . import contract

# Where the renderer installs the host policy (render.srt.POLICY_TARGET).
MANAGED_POLICY = (contract.WINDOWS_POLICY_FILE if os.name == "nt" else contract.POLICY_FILE)
STARTER_POLICY = """\
# Repository policy for agent-sandbox (a spec layer; see `sandbox schema`).
# Layers above this one (fleet, group, host) may only be tightened here.
version: 1
filesystem:
  allow_write: ["."]
  deny_read: ["~/.ssh", "~/.aws", "~/.gnupg", "~/.config/gcloud", "**/.env"]
network:
  # loopback services and cloud metadata endpoints (the proxy refuses them too)
  denied_domains: ["localhost", "127.0.0.1", "169.254.169.254", "metadata.google.internal"]
commands:
  default: escalate
  rules:
    - claude: "Bash(ls *)"
      verdict: allow
    - claude: "Bash(pwd)"
      verdict: allow
    - claude: "Bash(cat *)"
      verdict: allow
    - claude: "Bash(head *)"
      verdict: allow
    - claude: "Bash(tail *)"
      verdict: allow
    - claude: "Bash(wc *)"
      verdict: allow
    - claude: "Bash(grep *)"
      verdict: allow
    - claude: "Bash(rg *)"
      verdict: allow
    - claude: "Bash(find *)"
      verdict: allow
    - claude: "Bash(echo *)"
      verdict: allow
    - claude: "Bash(git status *)"
      verdict: allow
    - claude: "Bash(git diff *)"
      verdict: allow
    - claude: "Bash(git log *)"
      verdict: allow
    - claude: "Read"
      verdict: allow
    - pattern: "rm -rf /*"
      verdict: deny
      reason: removes the filesystem root
approvals:
  ttl: 30m
  wait: 10m
"""
MANAGED_STARTER_POLICY = """\
# Repository policy for agent-sandbox (a spec layer; see `sandbox schema`).
# This host has a managed policy; this layer inherits it as it is. Add denies,
# drop allowed domains or pick a stricter default here: a repository may only
# tighten what the managed layers set (unless they delegate a key).
version: 1
"""


def starter_policy() -> str:
    """The starter layer init writes: the full one on an unmanaged host, an
    inheriting one where a managed host policy exists (whose allow rules and
    writable roots a repository layer may not widen)."""
    return MANAGED_STARTER_POLICY if os.path.isfile(MANAGED_POLICY) else STARTER_POLICY
