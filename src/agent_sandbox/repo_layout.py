"""Where a connected repository keeps the project's files: ``<repo>/.sandbox/``.

Every path under ``.sandbox/`` that any part of the project reads or writes is
named here, once: the effective policy the hook applies, the repository's spec
layer, the srt settings approved commands run under, the approval queue and its
states, the audit log, the run state and what init installed, and the originals
init replaced. ``Site`` is one approval queue's files: a connected repository's,
or this user's host-level site in the state folder (fleet hosts, no ``sandbox
init``).

Stdlib only, cheap to import (the hook uses it). It never creates anything.
"""

from __future__ import annotations

import os

from agent_sandbox import contract
from agent_sandbox.state_paths import (
    host_audit_dir,
    host_queue_dir,
    repo_key_path,
    user_state_dir,
)

SANDBOX = ".sandbox"
POLICY = f"{SANDBOX}/policy.json"  # the effective policy the hook reads (init writes it)
SPEC_LAYER = f"{SANDBOX}/policy.yml"  # the repository's own spec layer
SETTINGS = f"{SANDBOX}/srt-settings.json"  # what approved commands run under
QUEUE = f"{SANDBOX}/escalations"
QUEUE_STATES = ("pending", "decided", "claimed", "done")
AUDIT = f"{SANDBOX}/audit"
STATE = f"{SANDBOX}/state"
INSTALLED = f"{STATE}/installed.json"  # what init installed, to uninstall it exactly
REMEMBERED = f"{STATE}/remembered.json"  # decisions a human asked to remember
ORIGINALS = f"{SANDBOX}/originals"  # the files init replaced, kept to restore
# every folder init makes below .sandbox/ (relative to it)
FOLDERS = ("escalations", *[f"escalations/{q}" for q in QUEUE_STATES], "audit", "originals",
           "state")


def under(repo: str, rel: str) -> str:
    """``rel`` (one of the names above) in ``repo``."""
    return os.path.join(repo, *rel.split("/"))


def repo_of_log(directory: str) -> str | None:
    """The repository whose audit log is ``directory`` (``<repo>/.sandbox/audit``), or None."""
    d = os.path.realpath(directory)
    if os.path.basename(d) == "audit" and os.path.basename(os.path.dirname(d)) == SANDBOX:
        return os.path.dirname(os.path.dirname(d))
    return None


def default_audit_key(directory: str) -> str:
    """The signing key of the audit log in ``directory`` unless one is named: a
    repository's log (``<repo>/.sandbox/audit``) signs with the key in the user's
    state folder, never one inside the repository; any other log with
    ``<log dir>/../audit-keys/<name>.ed25519``."""
    repo = repo_of_log(directory)
    if repo is not None:
        return repo_key_path(repo)
    return os.path.join(os.path.dirname(directory), "audit-keys",
                        f"{os.path.basename(directory)}.ed25519")


class Site:
    """Where one approval queue keeps its files: a connected repository
    (``<repo>/.sandbox/...``, its own srt settings and policy), or this user's
    host-level site in the state folder (fleet hosts, no ``sandbox init``: the
    host's managed policy and system srt settings)."""

    __slots__ = ("audit", "host", "policy", "queue", "root", "settings", "state")

    def __init__(self, root: str) -> None:
        self.root = root
        self.host = os.path.realpath(root) == os.path.realpath(user_state_dir())
        if self.host:
            self.queue = host_queue_dir()
            self.audit = host_audit_dir()
            self.state = os.path.join(root, "state")
            self.settings = contract.SYSTEM_SRT_SETTINGS
            self.policy = contract.POLICY_FILE
        else:
            self.queue = under(root, QUEUE)
            self.audit = under(root, AUDIT)
            self.state = under(root, STATE)
            self.settings = under(root, SETTINGS)
            self.policy = under(root, POLICY)


def host_site() -> str:
    """The root of this user's host-level site (pass it where a repository goes)."""
    return user_state_dir()
