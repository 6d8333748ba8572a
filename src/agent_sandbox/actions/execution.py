"""One action call's two ends, shared by every way an action is asked for
(``approval.action_request``: ``sandbox action run`` and the MCP server's
``run_action``):

- ``prepare``: the action is looked up in the repository's effective policy, the
  parameters are checked against its schema and placed into its argv, and the
  gate reads the plan; what a request binds (action, parameters, argv, image, plan
  digest) and the gate's verdict;
- ``execute`` (the approval executor, or at once for a call that needs no human)
  reads the action again, refuses when what would run is not what was approved,
  has the broker mint the credential, runs the one-shot container and revokes the
  lease whatever happened.

Nothing here queues, waits for a human or imports the approval loop; every step
is an audit event carrying the request id.
"""

from __future__ import annotations

from typing import Any

from ..audit.repo import audit
from ..errors import SandboxError
from ..queue.records import OUTPUT_KEEP
from . import catalog
from . import params as action_params

KIND = "action"


class ActionRefused(SandboxError):
    """The call was refused before anything ran (the message says why)."""


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
