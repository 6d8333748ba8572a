"""A call the broker refuses, with its reason (what every brokered refusal raises)."""

from __future__ import annotations

import errno

from agent_sandbox.errors import SandboxError


class Refused(SandboxError, OSError):
    """A call the judge refuses, with its reason: ``EROFS``, as the read-only
    mounts of the protected set always answered."""

    def __init__(self, reason: str, code: int = errno.EROFS) -> None:
        super().__init__(code, reason)
        self.reason = reason
