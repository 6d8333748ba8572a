"""Where the proxy's decisions (and the runtime's other events) are recorded.

``audit_recorder`` writes ``proxy.decision`` events to the chained audit log
from a writer thread (off the connection's path), denials at a bounded rate
(``denials``: a destination's repeats counted into one summary); once a write fails, every
later record raises, so every later allow becomes a denial. ``refusing`` is
the recorder of a proxy without its audit log: no audit, no egress. Must
never swallow a failure to record.
"""

from __future__ import annotations

import contextlib
import threading

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    Recorder = Callable[[dict[str, Any]], None]


def refusing(reason: str) -> Recorder:
    """The recorder of a proxy without its audit log: recording fails, so every
    allow becomes a denial (no audit, no egress)."""
    def record(event: dict[str, Any]) -> None:
        raise RuntimeError(reason)

    return record


def audit_recorder(directory: str | None) -> tuple[Recorder, Callable[[], None]]:
    """A recorder writing ``proxy.decision`` events to the chained audit log."""
    import queue

    from agent_sandbox.audit import AuditLog

    # checkpointed like every other log (every 1000 records, and when it closes),
    # so truncating the host's decisions is caught as well as rewriting them
    # and rotated into sealed segments of the same chain (``audit.segments``), so no
    # one file grows without end
    from agent_sandbox.contract import AUDIT_SEGMENT_BYTES

    log = AuditLog(directory or default_audit_dir(), sync="batch", checkpoint_every=1000,
                   checkpoint_interval=None, origin="sandbox-exec-proxy",
                   max_bytes=AUDIT_SEGMENT_BYTES)
    pending: queue.SimpleQueue[dict[str, Any] | None] = queue.SimpleQueue()
    failed: list[BaseException] = []

    def writer() -> None:  # off the connection's path; close() waits for the last record
        while (event := pending.get()) is not None:
            try:
                # the sweep writes through the same writer: its records are its own
                name = ("quarantine" if event.get("event_kind") == "quarantine"
                        else "proxy.decision")
                log.append(name, **event)
            except Exception as exc:  # from now on every allow becomes a denial
                failed.append(exc)

    thread = threading.Thread(target=writer, name="agent-sandbox-audit", daemon=True)
    thread.start()

    from .denials import Denials

    denials = Denials(pending.put)  # a flood of denials at a bounded rate
    lock = threading.Lock()

    def record(event: dict[str, Any]) -> None:
        if failed:
            raise RuntimeError(f"the audit log cannot be written: {failed[0]}")
        if event.get("allowed") is False and event.get("event_kind") is None:
            with lock:
                denials.offer(event)
            return
        pending.put(event)

    def close() -> None:
        with lock:
            denials.flush()
        pending.put(None)
        thread.join(timeout=10)
        with contextlib.suppress(Exception):
            log.checkpoint()
        with contextlib.suppress(Exception):
            log.close()

    return record, close


def default_audit_dir() -> str:
    """Where decisions go when nothing else is configured (``contract``)."""
    from agent_sandbox.contract import default_audit_dir as for_home

    from ..host import home_dir

    return for_home(home_dir())
