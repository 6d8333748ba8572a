"""The escalation round trip shared by the hooks, the MCP server and action calls
(``action_request``).

submit the request to the folder queue (``submit``) -> wait (bounded, woken by
inotify) for the one decision -> on approval run it outside the agent (detached
runner, inside the sandbox) and wait for its terminal record, or for tools the
agent must run itself consume the single-use grant -> an ``Answer`` to the agent (``follow``).

It never returns ``allow`` unless a human approval for this exact call was
consumed by this process.
"""

from __future__ import annotations

import sys
import time

from agent_sandbox.contract import RUN_WAIT

from ..audit.repo import audit
from ..queue import FolderQueue, QueueError, new_id, queue_for, request_hash, use_key_of
from ..queue.notify import Watcher
from .executor import fork_runner

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

    from ..policy.decision import Call, Decision

RUN_TOOLS = frozenset({"Write", "Edit", "MultiEdit", "write_file"})
OUTPUT_LIMIT = 20_000  # characters of command output returned to the model


class Answer:
    """What the hook tells the agent: allow, or deny with a message."""

    __slots__ = ("allow", "message", "record", "request_id", "status")

    def __init__(self, allow: bool, message: str, *, request_id: str = "", status: str = "",
                 record: dict[str, Any] | None = None) -> None:
        self.allow, self.message, self.request_id = allow, message, request_id
        self.status, self.record = status, record


def mode_for(call: Call) -> str:
    if call.kind == "bash" or (call.kind == "write" and call.tool in RUN_TOOLS):
        return "run"
    return "grant"


def trim(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    tail = limit - head
    return text[:head] + f"\n[... {len(text) - limit} characters trimmed ...]\n" + text[-tail:]


def describe_result(rec: dict[str, Any], limit: int = OUTPUT_LIMIT, *,
                    intro: str | None = None) -> str:
    """The message returned to the model for a finished request (``intro``
    replaces the first line, which by default speaks to a hook's caller)."""
    rid = rec.get("id", "?")
    status = rec.get("status")
    dec = rec.get("decision") or {}
    req = rec.get("request") or {}
    by = dec.get("by") or "a human"
    if dec.get("owner") and dec.get("owner") != by:  # the file's owner decided
        by = f"{by} (account {dec.get('owner')})"
    if status == "completed":
        out, err = str(rec.get("stdout") or ""), str(rec.get("stderr") or "")
        budget = max(1000, limit - 400)
        out_limit = budget if not err else budget * 2 // 3
        parts = [
            intro or f"Approved by {by} and run by agent-sandbox outside the agent, inside the "
                     f"sandbox (request {rid}). The tool itself did not run; this is its result.",
            f"exit status: {rec.get('exit_code')}"
            + (" (timed out)" if rec.get("timed_out") else ""),
        ]
        parts.append("--- stdout ---\n" + trim(out, out_limit))
        if err:
            parts.append("--- stderr ---\n" + trim(err, budget - min(len(out), out_limit)))
        return "\n".join(parts)
    if status == "denied":
        why = dec.get("reason") or "no reason given"
        return f"Denied by {by} (request {rid}): {why}. Do not retry the same call."
    if status == "timed_out":
        return (f"No decision arrived in time (request {rid}); the call did not run. A human "
                f"can approve it with `sandbox approve` and you may retry afterwards.")
    if status == "cancelled":
        why = dec.get("reason") or "cancelled"
        return (f"Request {rid} was cancelled ({why}); the call did not run. Make the call "
                f"again to ask for approval anew.")
    if status == "granted":
        return f"Approved by {by} (request {rid})."
    reason = rec.get("reason") or status
    return f"Request {rid} ({req.get('summary', '')!s}) ended {status}: {reason}."


def _preload() -> None:
    """Import what the runner needs while a human decides, so the forked runner
    starts the sandbox at once after the approval (saves ~40 ms of latency)."""
    import importlib

    for name in ("agent_sandbox.audit", "agent_sandbox.runtime.run"):
        try:
            importlib.import_module(name)
        except Exception as exc:  # the runner reports the real problem itself
            sys.stderr.write(f"agent-sandbox: preloading {name} failed: {exc}\n")


def _wait_for(q: FolderQueue, rid: str, state: str, deadline: float) -> dict[str, Any] | None:
    get = q.decision if state == "decided" else q.result
    with Watcher([q.dir("decided"), q.dir("done")]) as w:
        while True:
            rec = get(rid)
            if rec is not None:
                return rec
            now = time.monotonic()
            if now >= deadline:
                return None
            w.wait(deadline - now)


def escalate(repo: str, call: Call, decision: Decision, *, agent: str, session: str = "",
             wait: float = 120.0, ttl: float = 1800.0, detach: bool = False,
             run_wait: float = RUN_WAIT, limit: int = OUTPUT_LIMIT, use_id: str = ""
             ) -> Answer:
    """Submit, wait for the decision, act on it. ``detach`` returns as soon as
    the request is stored (the MCP server follows it with ``check_request``).
    ``use_id`` is the client's id of this tool call: a call retried with the same
    id (its first hook died) follows the first request, never a second one."""
    q = queue_for(repo)
    if not q.exists():
        return Answer(False, f"the approval queue {q.root} is missing: run `sandbox init`",
                       status="failed")
    mode = mode_for(call)
    now = time.time()
    rid = new_id()
    if use_id and not detach:
        prior = q.bind_use(use_key_of(agent, session, use_id), rid)
        if prior is not None:
            return _retried(repo, q, prior, call, wait=wait, run_wait=run_wait, limit=limit)
    record = {"id": rid, "tool_use_id": use_id,
        "tool": call.tool, "params": call.params, "cwd": call.cwd, "kind": call.kind,
        "summary": decision.summary, "verdict": decision.verdict.value,
        "reasons": decision.reasons, "risk": decision.risk, "agent": agent,
        "session_id": session, "mode": mode, "repo": repo,
        "wait_until": now + (ttl if detach else wait), "detached": detach,
    }
    seen = decision.remembered_content
    remembered = False
    if call.kind == "bash":  # bound to the content it would run (queue.content)
        from .executor import pin_content, pin_remembered

        remembered = seen is not None and pin_remembered(repo, q, record, seen)
        why = None if remembered else pin_content(repo, q, record)
        if why:
            return Answer(False, f"agent-sandbox: {why}; the call did not run",
                           status="refused")
    rid = submit(repo, q, record, wait=wait, recorded=(
        ("request", {"agent": agent, "session": session, "tool": call.tool,
                     "summary": decision.summary, "cwd": call.cwd}),
        ("decision", {"verdict": "escalate", "risk": decision.risk,
                      "reasons": decision.reasons})))
    if remembered:
        try:  # the content the remembered approval saw: approved without a human
            q.decide(rid, "approve", by="remembered approval",
                     reason="approve --always, for this command with these files")
        except QueueError:
            pass  # decided meanwhile: follow that decision
    elif seen is not None:
        audit(repo, "remembered_refused", request_id=rid,
              reason="the files the command may read changed since it was remembered")
    if detach:
        return Answer(False, f"waiting for approval: request {rid}", request_id=rid,
                       status="pending")
    _preload()
    return follow(repo, rid, wait_deadline=time.monotonic() + wait, run_wait=run_wait,
                  limit=limit, timeout_on_expiry=True, requeue_wait=wait)


def submit(repo: str, q: FolderQueue, record: dict[str, Any], *, wait: float,
           recorded: Iterable[tuple[str, dict[str, Any]]] = ()) -> str:
    """Store the request ``record`` in the queue and audit it: the call's own records
    first (``recorded``: its request and the policy's decision, as the caller words
    them; an action call writes its own before, since one the gate lets through has
    them too), then its escalation. Returns its id."""
    rid = str(q.submit(record)["id"])
    for event, fields in recorded:
        audit(repo, event, request_id=rid, **fields)
    audit(repo, "escalation", request_id=rid, mode=record.get("mode"), wait=wait)
    return rid


def _retried(repo: str, q: FolderQueue, prior: str, call: Call, *, wait: float,
             run_wait: float, limit: int) -> Answer:
    """The agent sent a tool call again whose first hook died: the first
    request stands for it. Finished: its result, nothing runs again; approved:
    follow it to its result; undecided: cancel it visibly (nobody was left to
    receive a decision), and the agent may ask again with a new call."""
    req = q.request(prior) if prior else None
    if req is None:
        return Answer(False, "agent-sandbox: the first hook for this tool call stopped "
                              "before it stored the request; nothing ran. Make the call again.",
                       request_id=prior, status="cancelled")
    if req.get("hash") != request_hash(call.tool, call.params, call.cwd, req.get("content")):
        return Answer(False, f"agent-sandbox: this tool call id was already used for "
                              f"request {prior or '?'} with other parameters; refused",
                       request_id=prior, status="refused")
    audit(repo, "retry", request_id=prior, tool_use_id=req.get("tool_use_id"))
    if q.result(prior) is None and q.decision(prior) is None:
        try:
            q.decide(prior, "cancel", by="hook",
                     reason="the agent retried the call after its first hook stopped")
        except QueueError:
            pass  # decided meanwhile: follow that decision
    return follow(repo, prior, wait_deadline=time.monotonic() + wait, run_wait=run_wait,
                  limit=limit, timeout_on_expiry=True)


def follow(repo: str, rid: str, *, wait_deadline: float, run_wait: float = RUN_WAIT,
           limit: int = OUTPUT_LIMIT, timeout_on_expiry: bool = True,
           requeue_wait: float = 0.0, requeues: int = 0) -> Answer:
    """Wait for the decision on ``rid`` and see it through. A command whose files
    changed after the request is queued anew by the runner (``requeued_as``):
    followed too, ``requeue_wait`` seconds for its decision (a few times at most)."""
    q = queue_for(repo)
    dec = _wait_for(q, rid, "decided", wait_deadline)
    if dec is None:
        if not timeout_on_expiry:
            return Answer(False, f"still waiting for approval: request {rid}", request_id=rid,
                           status="pending")
        try:
            q.decide(rid, "timeout", by="hook", reason="no decision before the hook's deadline")
            audit(repo, "denial", request_id=rid, reason="timed out waiting for approval")
        except QueueError:
            pass  # a decision arrived at the last moment: honour it
        dec = q.decision(rid)
        if dec is None:
            return Answer(False, f"request {rid} vanished from the queue", request_id=rid,
                           status="failed")
    if dec.get("decision") != "approve":
        rec = _wait_for(q, rid, "done", time.monotonic() + 5.0) or {
            "id": rid, "status": "denied", "decision": dec}
        return Answer(False, describe_result(rec, limit), request_id=rid,
                       status=str(rec.get("status")), record=rec)
    req = q.request(rid) or {}
    if req.get("mode") == "grant":
        if q.consume(rid):
            audit(repo, "approval", request_id=rid, by=dec.get("by"), used="granted")
            return Answer(True, f"approved by {dec.get('by') or 'a human'} (request {rid})",
                           request_id=rid, status="granted")
        rec = q.result(rid) or {"id": rid, "status": "refused", "decision": dec}
        return Answer(False, describe_result(rec, limit), request_id=rid,
                       status=str(rec.get("status")), record=rec)
    if q.result(rid) is None and q.state(rid) == "pending":
        fork_runner(repo, rid)
    final = _wait_for(q, rid, "done", time.monotonic() + run_wait)
    if final is None:
        return Answer(False, f"request {rid} was approved and is still running; "
                              f"`sandbox status` shows its result when it ends",
                       request_id=rid, status="running")
    nxt = final.get("requeued_as")
    if isinstance(nxt, str) and nxt and requeue_wait > 0 and requeues < 3:
        then = follow(repo, nxt, wait_deadline=time.monotonic() + requeue_wait,
                      run_wait=run_wait, limit=limit, timeout_on_expiry=timeout_on_expiry,
                      requeue_wait=requeue_wait, requeues=requeues + 1)
        return Answer(then.allow, f"{describe_result(final, 2000)}\n{then.message}",
                       request_id=then.request_id, status=then.status, record=then.record)
    return Answer(False, describe_result(final, limit), request_id=rid,
                   status=str(final.get("status")), record=final)

