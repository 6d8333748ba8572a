"""The approval loop's and the audit's files in the user's state folder.

The audit signing key of each repository's log, the pinned verifier key that
``audit verify`` trusts, and the host-level approval queue of a fleet host
(escalations from repositories that never ran ``sandbox init``) all live in the
user's state folder (``contract.user_state_dir``) of the account's home, from
the password database, never ``$HOME``.

That folder is outside every repository, so a ``git add -A`` never commits a
key, and every sandbox gets it read-only (``contract.state_paths``).

Stdlib only, cheap to import (the hook uses it). It never creates anything.
"""

from __future__ import annotations

import os

from agent_sandbox import contract


def account_home(uid: int | None = None) -> str:
    """The home directory of ``uid`` (default: the effective uid) from the
    password database; ``$HOME`` only where there is no password database."""
    try:
        import pwd

        home = pwd.getpwuid(os.geteuid() if uid is None else uid).pw_dir
    except (ImportError, KeyError):
        home = os.path.expanduser("~")
    return home


def user_state_dir(home: str | None = None) -> str:
    """The per-user state folder of the account (``contract.user_state_dir``)."""
    return contract.user_state_dir(home or account_home())


def repo_slug(repo: str) -> str:
    """A stable, file-name-safe name for one repository (its real path)."""
    from agent_sandbox.quickhash import sha256_hex  # the cheap one, not hashlib's

    real = os.path.realpath(repo)
    digest = sha256_hex(real.encode("utf-8", "surrogateescape"))[:16]
    base = "".join(c if c.isalnum() or c in "-_." else "_" for c in os.path.basename(real))
    return f"{base[:40] or 'root'}-{digest}"


def repo_of_log(directory: str) -> str | None:
    """The repository whose audit log is ``directory`` (``<repo>/.sandbox/audit``), or None."""
    d = os.path.realpath(directory)
    if os.path.basename(d) == "audit" and os.path.basename(os.path.dirname(d)) == ".sandbox":
        return os.path.dirname(os.path.dirname(d))
    return None


def repo_key_path(repo: str, home: str | None = None) -> str:
    """The Ed25519 key that signs the checkpoints of ``repo``'s audit log."""
    return os.path.join(user_state_dir(home), "audit-keys", repo_slug(repo) + ".ed25519")


def repo_pin_path(repo: str, home: str | None = None) -> str:
    """The verifier key pinned for ``repo``'s audit log when it was connected."""
    return os.path.join(user_state_dir(home), "pins", repo_slug(repo) + ".verifier")


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


def host_queue_dir(home: str | None = None) -> str:
    """The host-level approval queue of this user (fleet hosts, no ``sandbox init``)."""
    return os.path.join(user_state_dir(home), "escalations")  # see Site


def host_audit_dir(home: str | None = None) -> str:
    """The audit log that goes with the host-level queue."""
    return os.path.join(user_state_dir(home), "audit")


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
            sb = os.path.join(root, ".sandbox")
            self.queue = os.path.join(sb, "escalations")
            self.audit = os.path.join(sb, "audit")
            self.state = os.path.join(sb, "state")
            self.settings = os.path.join(sb, "srt-settings.json")
            self.policy = os.path.join(sb, "policy.json")


def host_site() -> str:
    """The root of this user's host-level site (pass it where a repository goes)."""
    return user_state_dir()
