"""Tamper-evident audit: a hash-chained JSON-lines log with redaction, signed
checkpoints, verification, and OCSF export.

Importing this package is cheap (stdlib only); ``cryptography`` is imported
only when a checkpoint is signed or verified.
"""

from __future__ import annotations

from agent_sandbox import contract
from agent_sandbox.audit.log import LOG_NAME, AuditLog
from agent_sandbox.audit.storage import AuditError

from ..repo_layout import AUDIT

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from agent_sandbox.audit.trail import LIFECYCLE, Trail, new_request_id
    from agent_sandbox.audit.verifier import VerifyResult

__all__ = [
    "HOST_LOG_DIR",
    "LIFECYCLE",
    "LOG_NAME",
    "AuditError",
    "AuditLog",
    "Trail",
    "VerifyResult",
    "host_log",
    "new_request_id",
    "repo_log",
    "verify",
]

HOST_LOG_DIR = contract.HOST_AUDIT_DIR
HOST_KEY = contract.HOST_AUDIT_KEY


def _schedule(audit: Any) -> dict[str, Any]:
    if audit is None:
        return {"max_bytes": contract.AUDIT_SEGMENT_BYTES}
    return {
        "checkpoint_every": audit.checkpoint_every,
        "checkpoint_interval": audit.checkpoint_interval,
        "max_bytes": audit.max_file_size,
    }


def repo_log(repo: Any, audit: Any = None, **kwargs: Any) -> AuditLog:
    """The log of one repository connector: ``<repo>/<audit.path>`` (``.sandbox/audit``).

    ``audit`` is the spec's ``Audit`` section (or None for defaults); keyword
    arguments go to :class:`AuditLog` (e.g. ``key_path``, ``sink``).
    """
    from pathlib import Path

    rel = audit.path if audit is not None else AUDIT
    return AuditLog(Path(repo) / rel, **{**_schedule(audit), **kwargs})


def host_log(audit: Any = None, **kwargs: Any) -> AuditLog:
    """The host's log for ``sandbox exec`` and the proxy (``audit.host_path``)."""
    directory = audit.host_path if audit is not None else HOST_LOG_DIR
    kwargs.setdefault("key_path", HOST_KEY)
    return AuditLog(directory, **{**_schedule(audit), **kwargs})


def verify(directory: Any, **kwargs: Any) -> VerifyResult:
    """Verify the log in ``directory``; see :func:`agent_sandbox.audit.verifier.verify`."""
    from agent_sandbox.audit.verifier import verify as _verify

    return _verify(directory, **kwargs)


def __getattr__(name: str) -> Any:
    if name in ("LIFECYCLE", "Trail", "new_request_id"):  # not on the hook's path
        from agent_sandbox.audit import trail

        return getattr(trail, name)
    if name == "VerifyResult":
        from agent_sandbox.audit.verifier import VerifyResult

        return VerifyResult
    raise AttributeError(name)
