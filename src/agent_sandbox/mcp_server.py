"""``sandbox mcp DIR``: the approval loop as MCP tools, over stdio.

Built on the official SDK's ``MCPServer``. Tools:

- ``run_privileged(command, cwd?, wait_seconds?)``: classify the command with
  the repository's policy; allowed ones run in the sandbox at once, denied ones
  are refused, the rest go to the same folder queue as the hooks and wait
  (bounded) for a human; a long wait returns the request id.
- ``check_request(request_id, wait_seconds?)``: follow a request: still pending,
  denied, or its output once approved and run.
- ``sandbox_status()``: the queue and the policy in brief.

There is deliberately no tool that approves, denies or changes policy:
approvals come only from ``sandbox watch`` / ``sandbox approve`` outside the
agent. Every command runs inside ``sandbox exec``, never in this process.

Start-up is on the client's clock: a client whose ``initialize`` is not
answered in time starts its first turn without these tools. So nothing but the
SDK is imported before the answer (``sandbox mcp`` bypasses the CLI framework,
see ``cli.entry``; the policy engine and the queue load inside the tools), and
the policy check and the queue's crash recovery run beside the server, not
before it; the SDK's protocol models are built on first use (``defer_build``,
see ``_sdk_server_class``). Importing the SDK still takes most of the start
(its protocol types package alone costs more than the 300 ms goal, see
``bench/bench_mcp.py``), so ``sandbox mcp`` first asks this user's resident
server, which imported all of it beforehand, to run ``main`` in a forked child
(``mcp_launch``, ``mcp_resident``); this module is the same either way. A broken
policy is reported on stderr and by every tool call, with its reason; it never
lets a call through.
"""

from __future__ import annotations

import json
import os
import sys
import time

from .errors import SandboxError
from .repo_layout import POLICY, QUEUE, REMEMBERED, under

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from mcp.server.mcpserver import MCPServer

    from .policy.engine import Policy

MAX_WAIT = 600.0
DEFAULT_WAIT = 30.0


class McpSetupError(SandboxError):
    pass


def _load(repo: str) -> Policy:
    from .policy.decision import PolicyError
    from .policy.engine import Policy

    path = under(repo, POLICY)
    try:
        with open(path, "rb") as fh:
            doc = json.loads(fh.read())
        from .state_paths import account_home

        # ~ in the policy is the account's home; $HOME only adds denials
        return Policy(doc, repo=repo, home=account_home(),
                      shell_home=os.environ.get("HOME") or None,
                      remembered_path=under(repo, REMEMBERED))
    except (OSError, ValueError, PolicyError) as exc:
        raise McpSetupError(f"cannot load {path}: {exc}") from None


def _policy(repo: str) -> Policy:
    """The policy for a tool call; a broken one fails the call with its reason (the
    SDK shows the model only a generic error for any other exception)."""
    from mcp.server.mcpserver.exceptions import ToolError

    try:
        return _load(repo)
    except McpSetupError as exc:
        raise ToolError(f"refused: {exc}") from None


def _inside(repo: str, cwd: str) -> bool:
    real = os.path.realpath(cwd)
    return real == repo or real.startswith(repo + os.sep)


def _mcp_text(rec: dict[str, Any] | None) -> str:
    """A finished request as this tool's result (the command ran; it is not a refusal)."""
    from .approval.escalation import describe_result

    if not rec or rec.get("status") != "completed":
        return ""
    by = (rec.get("decision") or {}).get("by") or "a human"
    return describe_result(rec, intro=f"Approved by {by} and run in the sandbox "
                                      f"(request {rec.get('id')}).")


def _sdk_server_class() -> type[MCPServer]:
    """The SDK's ``MCPServer``, imported with pydantic's ``defer_build`` on.

    The SDK defines some 550 pydantic models (every protocol era) on import and
    a session uses a dozen. With ``defer_build`` set on ``BaseModel``'s config
    (which every model's config inherits) while the SDK's modules run, a model's
    validator and serializer are built on its first use instead; the setting is
    restored at once, so no model defined later (the tools' argument models
    included) is affected. It changes when a model is built, never what it
    accepts."""
    from pydantic import BaseModel

    config = BaseModel.model_config
    before = config.get("defer_build")
    config["defer_build"] = True
    try:
        from mcp.server.mcpserver import MCPServer
    finally:
        if before is None:
            config.pop("defer_build", None)
        else:
            config["defer_build"] = before
    return MCPServer


def build(repo: str) -> Any:
    repo = _checked(repo)
    server = _sdk_server_class()(
        name="agent-sandbox",
        instructions=(
            "Run privileged shell commands through run_privileged. Commands the policy allows "
            "run in the sandbox at once; others wait for a human to approve them outside this "
            "session. If the wait ends first you get a request id: follow it with "
            "check_request. You cannot approve anything yourself."
        ),
    )
    _command_tools(server, repo)
    _status_tool(server, repo)
    _action_tools(server, repo)
    return server


def _command_tools(server: MCPServer, repo: str) -> None:
    """``run_privileged`` and ``check_request``: a command through the policy and,
    when it escalates, the approval loop."""

    @server.tool(description="Run a shell command in the sandbox, with human approval when "
                             "the policy requires it.")
    async def run_privileged(command: str, cwd: str = "",
                             wait_seconds: float = DEFAULT_WAIT) -> str:
        import anyio

        from .approval.escalation import describe_result, escalate, follow
        from .approval.executor import run_command
        from .audit.repo import audit
        from .policy.decision import Call

        wd = os.path.realpath(cwd or repo)
        if not _inside(repo, wd):
            return f"refused: cwd {wd} is outside the repository {repo}"
        if not isinstance(command, str) or not command.strip():
            return "refused: empty command"
        wait = max(0.0, min(float(wait_seconds), MAX_WAIT))
        policy = _policy(repo)
        call = Call("bash", "run_privileged", {"command": command}, wd, command=command)
        decision = policy.classify(call)
        verdict = decision.verdict.value
        if verdict == "deny":
            audit(repo, "denial", tool="run_privileged", agent="mcp", summary=command,
                  reasons=decision.reasons)
            return f"denied by policy: {decision.reason_text()}"
        if verdict in ("allow", "observe"):
            req = {"id": "direct", "params": {"command": command}, "cwd": wd}
            res = await anyio.to_thread.run_sync(run_command, repo, req)
            audit(repo, "completed", tool="run_privileged", agent="mcp", summary=command,
                  status=res.get("status"), exit_code=res.get("exit_code"))
            return describe_result({"id": "-", **res},
                                   intro="Allowed by the policy and run in the sandbox.")

        def go() -> str:
            out = escalate(repo, call, decision, agent="mcp", detach=True, ttl=policy.ttl)
            if not out.request_id:
                return out.message
            res = follow(repo, out.request_id, wait_deadline=time.monotonic() + wait,
                         timeout_on_expiry=False)
            if res.status == "pending":
                return (f"Waiting for a human to approve request {out.request_id} "
                        f"({decision.reason_text()}). Call check_request with this id to "
                        "follow it.")
            return _mcp_text(res.record) or res.message

        return await anyio.to_thread.run_sync(go)

    @server.tool(description="Follow a request returned by run_privileged.")
    async def check_request(request_id: str, wait_seconds: float = 0.0) -> str:
        import anyio

        from .approval.escalation import describe_result, follow
        from .queue import queue_for, valid_id

        if not valid_id(request_id):
            return f"refused: {request_id!r} is not a request id"
        q = queue_for(repo)
        if q.state(request_id) is None:
            return f"no request {request_id} in this repository"
        wait = max(0.0, min(float(wait_seconds), MAX_WAIT))

        def go() -> str:
            rec = q.result(request_id)
            if rec is not None:
                return _mcp_text(rec) or describe_result(rec)
            res = follow(repo, request_id, wait_deadline=time.monotonic() + wait,
                         timeout_on_expiry=False)
            if res.status == "pending":
                from .approval.executor import changed_since

                moved = changed_since(repo, q.request(request_id) or {})
                return (f"request {request_id} is still waiting for approval"
                        + (f"; since it was made, {len(moved)} of the files it may read "
                           f"changed ({'; '.join(moved[:5])}): an approval would ask again"
                           if moved else ""))
            return _mcp_text(res.record) or res.message

        return await anyio.to_thread.run_sync(go)


def _status_tool(server: MCPServer, repo: str) -> None:
    """``sandbox_status``: the queue and the policy in brief."""

    @server.tool(description="How the sandbox is set up and what is waiting.")
    def sandbox_status() -> str:
        from .approval.executor import recover_and_run
        from .queue import queue_for

        q = queue_for(repo)
        recover_and_run(repo)
        c = q.counts()
        policy = _policy(repo)
        return json.dumps({
            "repository": repo,
            "queue": c,
            "pending": [{"id": r.get("id"), "summary": r.get("summary"), "risk": r.get("risk")}
                        for r in q.pending()],
            "default_verdict": policy.default.value,
            "approval_ttl_seconds": policy.ttl,
            "allowed_domains": policy.allowed_domains,
        }, indent=2)


def _action_tools(server: MCPServer, repo: str) -> None:
    """``list_actions`` and ``run_action``: the repository's declared actions, each
    call through its gate and the approvals (``approval.action_request``)."""

    @server.tool(description="The privileged infrastructure actions this repository "
                             "declares: name, tier, description and parameter schema.")
    def list_actions() -> str:
        from .actions.catalog import listing

        try:
            return json.dumps(listing(repo), indent=2)
        except SandboxError as exc:
            return f"refused: {exc}"

    @server.tool(description="Run a declared action with parameters (an object matching its "
                             "schema). Read actions run at once; destructive changes wait for "
                             "a human: you then get a request id to follow with check_request.")
    async def run_action(name: str, params: dict[str, object] | None = None,
                         wait_seconds: float = DEFAULT_WAIT) -> str:
        import anyio

        from .approval.action_request import request

        wait = max(0.0, min(float(wait_seconds), MAX_WAIT))

        def go() -> str:
            out = request(repo, name, params or {}, agent="mcp", wait=wait, detach=True)
            if out.status == "pending":
                return (f"Waiting for a human to approve request {out.request_id} "
                        f"(action {name}). Call check_request with this id to follow it.")
            return json.dumps(out.as_json(), indent=2)

        return await anyio.to_thread.run_sync(go)


def _checked(repo: str) -> str:
    """``repo`` resolved, or McpSetupError when ``sandbox init`` has not prepared it."""
    repo = os.path.realpath(repo)
    if not os.path.isdir(under(repo, QUEUE)):
        raise McpSetupError(f"{repo} has no .sandbox/escalations: run `sandbox init {repo}`")
    return repo


def _after_start(repo: str) -> None:
    """The start-up chores that need not delay the client's ``initialize``: check
    the policy (every tool call loads it again and answers with the same error)
    and run the approvals an earlier crash left behind."""
    try:
        _load(repo)
    except McpSetupError as exc:
        sys.stderr.write(f"agent-sandbox mcp: {exc}\n")
    try:
        from .approval.executor import recover_and_run

        recover_and_run(repo)
    except Exception as exc:  # the tools still work; sandbox_status recovers again
        sys.stderr.write(f"agent-sandbox mcp: recovering the queue failed: {exc}\n")


def serve(repo: str) -> None:
    """Serve ``repo``'s tools over stdio until the client closes the stream."""
    import threading

    # pydantic plugins are third-party code run on every validation, found by
    # scanning every installed distribution's entry points at start: none here
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    server = build(repo)
    threading.Thread(target=_after_start, args=(_checked(repo),), name="mcp-start",
                     daemon=True).start()
    server.run("stdio")


def main(argv: list[str]) -> int:
    """``sandbox mcp [DIRECTORY]`` without the CLI framework: a client waits for
    this process's ``initialize`` answer before its first turn."""
    if len(argv) > 1:
        sys.stderr.write("usage: sandbox mcp [DIRECTORY]\n")
        return 2
    try:
        serve(argv[0] if argv else ".")
    except SandboxError as exc:
        sys.stderr.write(f"sandbox: {exc}\n")
        return 1
    return 0
