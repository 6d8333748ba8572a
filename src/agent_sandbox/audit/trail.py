"""Correlated audit events for one action, sharing a request id.

An action's life is a fixed sequence of events (``LIFECYCLE``): request ->
decision -> escalation -> approval or denial -> credential issued -> sandbox
started -> completed -> credential revoked -> result. A :class:`Trail` stamps
every event of one action with the same ``request_id`` and with who and where
(actor, agent, session, working directory), plus timing (``elapsed_ms`` since
the request; ``duration_ms`` on ``completed``).

Stdlib only; never writes anything except through ``AuditLog.append``.
"""

from __future__ import annotations

import os
import time

from agent_sandbox.audit.log import AuditLog

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

LIFECYCLE: tuple[str, ...] = (
    "request",
    "decision",
    "escalation",
    "approval",
    "denial",
    "credential_issued",
    "sandbox_started",
    "completed",
    "credential_revoked",
    "result",
)


def new_request_id() -> str:
    """A fresh, unguessable request id."""
    return "req-" + os.urandom(12).hex()


class Trail:
    """Appends the events of one action with shared correlation fields."""

    def __init__(
        self,
        log: AuditLog,
        *,
        request_id: str | None = None,
        actor: str | None = None,
        agent: str | None = None,
        session: str | None = None,
        cwd: str | None = None,
    ) -> None:
        self.log = log
        self.request_id = request_id or new_request_id()
        self.context = {
            k: v
            for k, v in {"actor": actor, "agent": agent, "session": session, "cwd": cwd}.items()
            if v is not None
        }
        self._t0 = time.monotonic()
        self._started: float | None = None

    def emit(self, event: str, **fields: Any) -> dict[str, Any]:
        """Append ``event`` for this action and return the record as written."""
        now = time.monotonic()
        rec: dict[str, Any] = {**self.context, **fields}
        rec["request_id"] = self.request_id
        rec["elapsed_ms"] = round((now - self._t0) * 1000, 3)
        if event == "sandbox_started":
            self._started = now
        elif event == "completed" and self._started is not None:
            rec.setdefault("duration_ms", round((now - self._started) * 1000, 3))
        return self.log.append(event, **rec)
