"""One action call, start to end: the only path from an agent's request to a
privileged container, shared by ``sandbox action run`` and the MCP server's
``run_action``.

1. the action is looked up in the repository's effective policy and the
   parameters are checked against its schema and placed into its argv;
2. the gate reads the plan; a call that escalates goes to the folder queue as a
   request bound (by its hash) to the action, the exact parameters, argv, image
   and plan digest, and waits for a human like any other escalation (``sandbox
   watch``, ``sandbox approve``): single use, expiring;
3. ``execute`` (the queue's runner, or at once for a call that needs no human)
   reads the action again, refuses when what would run is not what was
   approved, has the broker mint the credential, runs the one-shot container and
   revokes the lease whatever happened.

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

from ..audit.repo import audit
from ..errors import SandboxError
from ..queue import queue_for
from . import catalog
from . import params as action_params

KIND = "action"
OUTPUT_KEEP = 64 * 1024


class ActionRefused(SandboxError):
    """The call was refused before anything ran (the message says why)."""


@dataclass
class Outcome:
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


def prepare(repo: str, name: str, params: Any) -> tuple[Any, dict[str, Any], Any]:
    """The action, what the call binds (action, params, argv, image, plan digest)
    and the gate's verdict. Raises ``ActionRefused`` (nothing recorded yet)."""
    from . import gate

    try:
        action = catalog.get(repo, name)
        checked = action_params.validate(action, params)
        argv = action_params.render_argv(action, checked)
    except SandboxError as exc:
        raise ActionRefused(str(exc)) from None
    verdict = gate.judge(action, checked)
    bound = {"action": name, "params": checked, "argv": argv, "image": action.image,
             "tier": action.tier.value, "plan_digest": verdict.plan_digest}
    return action, bound, verdict


def request(repo: str, name: str, params: Any, *, agent: str = "cli", wait: float = 120.0,
            detach: bool = False) -> Outcome:
    """Run action ``name`` with ``params`` for an agent: at once when the gate lets
    it, else after a human approves it (waiting at most ``wait`` seconds; with
    ``detach`` the request outlives the wait, status ``pending``)."""
    from ..approval.escalation import follow
    from ..queue import new_id

    repo = os.path.realpath(repo)
    rid = new_id()
    try:
        action, bound, verdict = prepare(repo, name, params)
    except ActionRefused as exc:
        audit(repo, "denial", request_id=rid, agent=agent, tool=f"action:{name}"[:80],
              reason=str(exc))
        return Outcome(rid, str(name), "refused", str(exc))
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
        return Outcome(rid, name, str(result.get("status")), _message(result),
                       {"id": rid, **result}, plan=verdict.summary)
    q = queue_for(repo)
    if not q.exists():
        return Outcome(rid, name, "failed",
                       f"the approval queue {q.root} is missing: run `sandbox init`")
    ttl = 1800.0
    now = time.time()
    q.submit({"id": rid, "tool": f"action:{name}", "params": bound, "cwd": repo, "kind": KIND,
              "summary": f"action {name} ({action.tier.value}): {' '.join(bound['argv'])}"[:500],
              "verdict": "escalate", "reasons": verdict.reasons, "risk": action.tier.value,
              "plan": verdict.summary, "agent": agent, "mode": "run", "repo": repo,
              "approvers": list(action.approvers),
              "wait_until": now + (ttl if detach else wait), "detached": detach})
    audit(repo, "escalation", request_id=rid, mode="run", wait=wait)
    # detached (the MCP server): the request stays approvable after this wait,
    # followed with check_request; else the wait's end denies it
    out = follow(repo, rid, wait_deadline=time.monotonic() + wait,
                 timeout_on_expiry=not detach)
    return Outcome(rid, name, out.status, out.message, out.record or {}, plan=verdict.summary)


def _message(result: dict[str, Any]) -> str:
    status = result.get("status")
    if status == "completed":
        return f"exit {result.get('exit_code')}"
    return str(result.get("reason") or status)


def _keep(data: bytes) -> str:
    text = data.decode("utf-8", "replace")
    return text if len(text) <= OUTPUT_KEEP else text[:OUTPUT_KEEP] + "\n[... trimmed ...]\n"


def execute(repo: str, req: dict[str, Any]) -> dict[str, Any]:
    """Run an allowed or approved action request (its bound fields only)."""
    rid = str(req.get("id"))
    bound = req.get("params") or {}
    name = str(bound.get("action", ""))
    try:
        action, again, _verdict = prepare(repo, name, bound.get("params"))
    except ActionRefused as exc:
        return {"status": "refused", "reason": str(exc)}
    if again != bound:
        changed = sorted(k for k in again if again.get(k) != bound.get(k))
        return {"status": "refused",
                "reason": f"the action changed since the call was made ({', '.join(changed)}); "
                          "nothing ran: ask again"}
    broker = None
    credential = None
    result: dict[str, Any] = {}
    try:
        if action.credential is not None:
            from .broker_config import broker_for_user

            broker = broker_for_user()
            credential = broker.issue(name, action, rid)
            audit(repo, "credential_issued", request_id=rid, **credential.audit_fields())
        from .runner import run_action_container

        run = run_action_container(
            action.image, bound["argv"], limits=action.limits,
            files=credential.files if credential else None,
            env=credential.env if credential else None,
            egress=list(action.egress), connect=list(action.connect),
            labels={"agent-sandbox.request": rid, "agent-sandbox.action": name})
        status = "timed_out" if run.timed_out else "completed"
        result = {"status": status, "exit_code": run.exit_code, "stdout": _keep(run.stdout),
                  "stderr": _keep(run.stderr), "duration": run.duration,
                  "container_id": run.container_id, "runtime": run.runtime,
                  "truncated": run.truncated, "output_digest": run.output_digest}
        audit(repo, "action_container", request_id=rid, action=name,
              container_id=run.container_id, runtime=run.runtime, exit_code=run.exit_code,
              timed_out=run.timed_out, output_digest=run.output_digest,
              duration_ms=round(run.duration * 1000, 3))
    except SandboxError as exc:
        result = {"status": "failed", "reason": str(exc)}
    finally:
        if credential is not None and broker is not None:
            try:
                broker.revoke(credential)
                audit(repo, "credential_revoked", request_id=rid, lease_id=credential.lease_id)
                result["revoked"] = True
            except SandboxError as exc:
                audit(repo, "credential_revoke_failed", request_id=rid,
                      lease_id=credential.lease_id, reason=str(exc))
                result["revoked"] = False
            result["lease_id"] = credential.lease_id
    return result
