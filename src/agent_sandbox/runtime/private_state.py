"""The user's private folders (``contract.private_paths``: the resident MCP
server's socket, the action broker's token, the web approvers' token, the audit
signing keys), made before any sandbox is planned.

A sandbox hides each of them, but only a folder that exists can be hidden: the
state folder around them is bound read-only, so a private folder first made
while a sandbox runs (the first ``sandbox serve`` writing its token) would be
readable inside it. Made here, empty and 0700, every sandbox finds them and
hides them. It never changes a folder that exists, and a folder it cannot make
(a read-only home) cannot be made inside a sandbox either.
"""

from __future__ import annotations

import os

from agent_sandbox import contract


def private_paths(home: str) -> list[str]:
    """``contract.private_paths(home)``, each made (0700) where it is missing."""
    paths = contract.private_paths(home)
    for path in paths:
        if not os.path.lexists(path):
            try:
                if os.path.basename(path) == contract.AUDIT_KEYS:
                    os.mkdir(path, 0o700)  # beside a log or state that exists, or not at all
                else:
                    os.makedirs(path, mode=0o700, exist_ok=True)
            except OSError:  # made by nobody, then: a sandbox cannot make it either
                pass
    return paths
