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

from agent_sandbox.atomic_file import create_once

from ..repo_layout import AUDIT, under

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
        from agent_sandbox.repo_layout import Site
        from agent_sandbox.state_paths import repo_key_path

        log = AuditLog(Site(repo).audit, key_path=repo_key_path(repo),
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


def audit(repo: str, event: str, **fields: Any) -> None:
    """Append to the repository's audit log (``append_audit``); an audit failure is
    reported on stderr and never turns a refusal into an allow."""
    append_audit(repo, event, fields)



def pin_verifier(repo: str) -> tuple[str, str]:
    """Create the repository's signing key (in the user's state folder) if it
    does not exist and pin its verifier key beside it, where no agent and no
    sandbox can write. Returns (the pin's path, the verifier key). Refuses to
    replace a pin that names another key: re-pinning is a deliberate act
    (remove the old pin first)."""
    from pathlib import Path

    from agent_sandbox.audit import checkpoint as ck
    from agent_sandbox.audit.storage import AuditError
    from agent_sandbox.state_paths import repo_key_path, repo_pin_path

    signer = ck.load_or_create_signer(Path(repo_key_path(repo)))
    text = str(signer.verifier) + "\n"
    pin = repo_pin_path(repo)
    os.makedirs(os.path.dirname(pin), mode=0o700, exist_ok=True)
    try:
        with open(pin, encoding="utf-8") as fh:
            current = fh.read()
    except FileNotFoundError:
        current = None
    if current is not None and current != text:
        raise AuditError(f"{pin} pins another verifier key for {repo}; remove it first if "
                         "the key was replaced on purpose")
    if current is None:
        create_once(pin, text.encode(), 0o600)  # first writer wins; never replaced
    # the log is anchored from here: a checkpoint now when it has none (of an empty log
    # too), so that one whose checkpoints are all removed fails verification
    from agent_sandbox.audit import AuditLog
    from agent_sandbox.audit.log import CHECKPOINT_DIR

    audit = Path(under(repo, AUDIT))
    if not ck.stored_notes(audit / CHECKPOINT_DIR):
        log = AuditLog(audit, key_path=repo_key_path(repo), checkpoint_interval=None)
        try:
            log.checkpoint(empty=True)
        finally:
            log.close()
    return pin, text.strip()


def pinned_verifier(directory: str) -> tuple[str, str] | None:
    """(pin path, verifier key) pinned for the log in ``directory``, or None."""
    from agent_sandbox.repo_layout import repo_of_log
    from agent_sandbox.state_paths import repo_pin_path

    repo = repo_of_log(directory)
    if repo is None:
        return None
    pin = repo_pin_path(repo)
    try:
        with open(pin, encoding="utf-8") as fh:
            return pin, fh.read().strip()
    except OSError:
        return None
