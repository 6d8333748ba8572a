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


def repo_key_path(repo: str, home: str | None = None) -> str:
    """The Ed25519 key that signs the checkpoints of ``repo``'s audit log."""
    return os.path.join(user_state_dir(home), "audit-keys", repo_slug(repo) + ".ed25519")


def repo_pin_path(repo: str, home: str | None = None) -> str:
    """The verifier key pinned for ``repo``'s audit log when it was connected."""
    return os.path.join(user_state_dir(home), "pins", repo_slug(repo) + ".verifier")


def host_queue_dir(home: str | None = None) -> str:
    """The host-level approval queue of this user (fleet hosts, no ``sandbox init``)."""
    return os.path.join(user_state_dir(home), "escalations")  # see repo_layout.Site


def host_audit_dir(home: str | None = None) -> str:
    """The audit log that goes with the host-level queue."""
    return os.path.join(user_state_dir(home), "audit")
