"""Tamper-evident audit: a hash-chained JSON-lines log with redaction, signed
checkpoints, verification, and OCSF export.

Importing this package is cheap (stdlib only); ``cryptography`` is imported
only when a checkpoint is signed or verified.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agent_sandbox.audit.log import LOG_NAME, AuditError, AuditLog

if TYPE_CHECKING:
    from agent_sandbox.audit.verify import VerifyResult

__all__ = ["LOG_NAME", "AuditError", "AuditLog", "VerifyResult", "verify"]


def verify(directory: Any, **kwargs: Any) -> VerifyResult:
    """Verify the log in ``directory``; see :func:`agent_sandbox.audit.verify.verify`."""
    from agent_sandbox.audit.verify import verify as _verify

    return _verify(directory, **kwargs)


def __getattr__(name: str) -> Any:
    if name == "VerifyResult":
        from agent_sandbox.audit.verify import VerifyResult

        return VerifyResult
    raise AttributeError(name)
