"""The one writer of a repository's audit records (the hook, the runner, the
approver and the MCP server all append through ``append_audit``).

The log is ``<repo>/.sandbox/audit``; the key that signs its checkpoints lives
in the user's state folder (``state_paths.repo_key_path``), never inside the
repository. Stdlib only and light: the hook's allow path imports it. It never
raises: a record that cannot be written is reported on stderr and returned as
False, and the caller decides to refuse.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def append_audit(repo: str, event: str, fields: dict[str, Any], *, quick: bool = False
                 ) -> bool:
    """Append one record to ``repo``'s log. ``quick`` (the hook's allow path):
    no fsync and no timed checkpoint in this process (a count-based one still
    happens; long-running writers and ``sandbox audit checkpoint`` sign the
    timed ones). Returns False, with the reason on stderr, when the record
    could not be written."""
    try:
        from agent_sandbox.audit.log import AuditLog
        from agent_sandbox.state_paths import repo_key_path

        log = AuditLog(os.path.join(repo, ".sandbox", "audit"), key_path=repo_key_path(repo),
                       sync="none" if quick else "always",
                       checkpoint_interval=None if quick else 60.0)
        try:
            log.append(event, **fields)
        finally:
            log.close()
        return True
    except Exception as exc:
        sys.stderr.write(f"agent-sandbox: audit write failed: {exc}\n")
        return False
