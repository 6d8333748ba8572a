"""An agent's action call, start to end, shared by ``sandbox action run`` and the
MCP server's ``run_action``: the only path from an agent's request to a
privileged container.

1. ``actions.execution.prepare`` looks the action up in the repository's effective
   policy, checks the parameters against its schema, places them into its argv and
   has the gate read the plan;
2. a call the gate lets through runs at once (``actions.execution.execute``); one
   that escalates goes through the escalation like any other call
   (``escalation.submit`` and ``follow``): a request bound (by its hash) to the
   action, the exact parameters, argv, image and plan digest, waiting for a human
   (``sandbox watch``, ``sandbox approve``): single use, expiring;
3. the approved request runs in the executor (``executor.execute_request``, which
   calls ``actions.execution.execute``).

Every step is an audit event carrying the request id: ``sandbox audit show
--request ID`` tells the whole story.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from typing import Any

from ..actions.execution import KIND, ActionRefused, execute, prepare
from ..audit.repo import audit
from ..queue import new_id, queue_for
from .escalation import follow, submit


@dataclass
class ActionOutcome:
    request_id: str
    action: str
    status: str  # completed | failed | timed_out | pending | denied | ... (queue statuses)
    message: str = ""
    record: dict[str, Any] = field(default_factory=dict)
    plan: str = ""  # what the gate read the plan to change (shown before it runs)

    def as_json(self) -> dict[str, Any]:
        rec = self.record or {}
        keys = ("exit_code", "stdout", "stderr", "container_id", "runtime", "lease_id",
                "revoked", "duration", "truncated", "output_digest")
        result: dict[str, Any] = {k: rec.get(k) for k in keys if k in rec}
        return {"request_id": self.request_id, "action": self.action, "status": self.status,
                "message": self.message, **({"plan": self.plan} if self.plan else {}),
                **result}


def _digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":"),
                                     ensure_ascii=False).encode()).hexdigest()


def request(repo: str, name: str, params: Any, *, agent: str = "cli", wait: float = 120.0,
            detach: bool = False) -> ActionOutcome:
    """Run action ``name`` with ``params`` for an agent: at once when the gate lets
    it, else after a human approves it (waiting at most ``wait`` seconds; with
    ``detach`` the request outlives the wait, status ``pending``)."""
    repo = os.path.realpath(repo)
    rid = new_id()
    try:
        action, bound, verdict = prepare(repo, name, params)
    except ActionRefused as exc:
        audit(repo, "denial", request_id=rid, agent=agent, tool=f"action:{name}"[:80],
              reason=str(exc))
        return ActionOutcome(rid, str(name), "refused", str(exc))
    audit(repo, "request", request_id=rid, agent=agent, tool=f"action:{name}",
          summary=f"action {name} ({action.tier.value})", argv=bound["argv"],
          params_digest=_digest(bound["params"]), plan_digest=verdict.plan_digest, cwd=repo)
    audit(repo, "decision", request_id=rid, verdict="escalate" if verdict.escalate else "allow",
          risk=action.tier.value, reasons=verdict.reasons, plan=verdict.summary)
    if not verdict.escalate:
        result = execute(repo, {"id": rid, "kind": KIND, "tool": f"action:{name}",
                                "params": bound, "cwd": repo})
        audit(repo, "completed", request_id=rid, status=result.get("status"),
              exit_code=result.get("exit_code"), uid=os.geteuid())
        return ActionOutcome(rid, name, str(result.get("status")), _message(result),
                       {"id": rid, **result}, plan=verdict.summary)
    q = queue_for(repo)
    if not q.exists():
        return ActionOutcome(rid, name, "failed",
                       f"the approval queue {q.root} is missing: run `sandbox init`")
    ttl = 1800.0
    now = time.time()
    submit(repo, q, {
        "id": rid, "tool": f"action:{name}", "params": bound, "cwd": repo, "kind": KIND,
        "summary": f"action {name} ({action.tier.value}): {' '.join(bound['argv'])}"[:500],
        "verdict": "escalate", "reasons": verdict.reasons, "risk": action.tier.value,
        "plan": verdict.summary, "agent": agent, "mode": "run", "repo": repo,
        "approvers": list(action.approvers),
        "wait_until": now + (ttl if detach else wait), "detached": detach}, wait=wait)
    # detached (the MCP server): the request stays approvable after this wait,
    # followed with check_request; else the wait's end denies it
    out = follow(repo, rid, wait_deadline=time.monotonic() + wait,
                 timeout_on_expiry=not detach)
    return ActionOutcome(rid, name, out.status, out.message, out.record or {}, plan=verdict.summary)


def _message(result: dict[str, Any]) -> str:
    status = result.get("status")
    if status == "completed":
        return f"exit {result.get('exit_code')}"
    return str(result.get("reason") or status)
