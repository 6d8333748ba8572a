"""``sandbox hook <agent> <event>``: the hook every agent tool call goes through.

Reads the agent's hook JSON on stdin, classifies the call with the repository's
effective policy (``.sandbox/policy.json``, else the managed
``/etc/agent-sandbox/policy.json``), and answers in the agent's protocol.

This is the hot path: stdlib only, no typer, no pydantic, no dataclasses, no
typing at import. Escalation, audit and the queue are imported only when a call
needs them.

It fails closed: malformed JSON, an unknown agent, event or tool, a missing or
broken policy, a missing ``.sandbox/``, a timeout or any internal error gives a
deny with a reason, and exit status 2 where the agent's protocol would treat
another failure as non-blocking.
"""

from __future__ import annotations

import os
import sys
import time

from agent_sandbox import contract
from agent_sandbox.contract import EXIT_SLACK, RUN_WAIT, START_BUDGET, hook_deadline
from agent_sandbox.errors import SandboxError

from ..quickjson import dumps, loads
from ..repo_layout import POLICY, QUEUE, REMEMBERED, under

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ..policy.decision import Call, Decision

MAX_INPUT = 8 * 1024 * 1024
# Where the renderer installs the host policy (render.srt.POLICY_TARGET).
MANAGED_POLICY = (contract.WINDOWS_POLICY_FILE if os.name == "nt" else contract.POLICY_FILE)
AGENTS = {
    "claude": ("pre-tool-use", "post-tool-use", "session-start"),
    "codex": ("pre-tool-use", "post-tool-use", "session-start"),
    "gemini": ("before-tool", "after-tool", "session-start"),
    "cursor": ("before-shell-execution", "before-mcp-execution", "before-read-file"),
}
PRE_EVENTS = contract.BEFORE_CALL_EVENTS
OUTPUT_LIMITS = {"claude": 20_000, "codex": 20_000, "gemini": 20_000, "cursor": 10_000}


MAX_POLICY = 4 * 1024 * 1024
STARTED = 0.0  # time.monotonic() when main() began: the budget counts from here


class Refusal(SandboxError):
    """Deny with this message (bad input, missing policy ...)."""


class OutOfTime(BaseException):
    """The hook's own deadline passed (``contract.hook_deadline``): deny before the agent's
    timeout does, since a timed-out hook lets the tool run. A BaseException, so
    no ``except Exception`` on the way can swallow it."""


def _alarm(signum: int, frame: Any) -> None:
    raise OutOfTime("the hook ran out of its time budget")


def set_deadline(seconds: float) -> None:
    """Interrupt whatever the hook is doing after ``seconds`` (POSIX; the
    builtin ``_signal``: ``signal`` builds enums, ~1 ms of the allow path)."""
    import _signal

    if hasattr(_signal, "setitimer"):
        _signal.signal(_signal.SIGALRM, _alarm)
        _signal.setitimer(_signal.ITIMER_REAL, max(0.001, seconds))


# -- answering in each protocol ----------------------------------------------

def answer(agent: str, event: str, allow: bool, message: str, *, error: bool = False,
           ask: bool = False) -> tuple[str, int]:
    """(stdout, exit status) for a pre-tool decision."""
    if agent in ("claude", "codex"):
        if allow and agent == "codex":
            return "", 0
        decision = "ask" if ask else ("allow" if allow else "deny")
        out: dict[str, Any] = {"hookSpecificOutput": {"hookEventName": "PreToolUse",
                                      "permissionDecision": decision,
                                      "permissionDecisionReason": message}}
        return dumps(out), (2 if error else 0)
    if agent == "gemini":
        gem: dict[str, str] = {"decision": "allow" if allow else "deny", "reason": message}
        if not allow:
            gem["systemMessage"] = message[:500]
        return dumps(gem), (2 if error else 0)
    # cursor
    perm = "allow" if allow else "deny"
    cur: dict[str, str] = {"permission": perm}
    if event != "before-read-file":
        cur.update(user_message=message[:1000], agent_message=message,
                   userMessage=message[:1000], agentMessage=message)
    return dumps(cur), (2 if error else 0)


def _write(fd: int, text: str) -> bool:
    data = text.encode("utf-8", "replace")
    try:
        while data:
            n = os.write(fd, data)
            data = data[n:]
    except OSError:
        return False
    return True


def _emit(out: str, code: int, err: str = "") -> int:
    """Write the answer straight to fd 1. An answer that cannot be delivered
    (stdout closed, full or unwritable) is a block: exit status 2."""
    if err:
        _write(2, err + "\n")
    if out and not _write(1, out + "\n"):
        _write(2, "agent-sandbox: cannot write the hook's answer to stdout; blocking\n")
        return 2
    return code


def refuse(agent: str, event: str, message: str) -> int:
    """A fail-closed answer: deny in the protocol, the reason on stderr, exit 2."""
    set_deadline(EXIT_SLACK)  # answering gets its own short budget, never the agent's
    msg = f"agent-sandbox: {message}"
    if agent not in AGENTS or event not in PRE_EVENTS:
        return _emit("", 2, msg)
    out, _ = answer(agent, event, False, msg, error=True)
    return _emit(out, 2, msg)


# -- policy ----------------------------------------------------------------

def find_repo(cwd: str) -> str | None:
    """The nearest repository at or above ``cwd`` that ``sandbox init`` registered
    (never a ``.sandbox/`` that merely exists: one could have been planted). The
    registry is the account's (``state_paths.account_home``), as for every other
    reader and ``sandbox init``, whatever ``$HOME`` says."""
    from ..policy.registry import CrossedLink, repository_for_call
    from ..state_paths import account_home

    try:
        return repository_for_call(cwd, account_home())
    except CrossedLink as exc:
        raise Refusal(str(exc)) from None


def load_policy(cwd: str) -> tuple[Any, str | None]:
    from ..policy.decision import PolicyError
    from ..policy.engine import Policy

    repo = find_repo(cwd)
    path = under(repo, POLICY) if repo else MANAGED_POLICY
    try:
        doc = loads(read_regular(path, MAX_POLICY))
    except FileNotFoundError:
        if repo:
            raise Refusal(f"{path} is missing: run `sandbox init {repo}`") from None
        raise Refusal(f"no .sandbox/ above {cwd} and no managed policy at {MANAGED_POLICY}: "
                      "run `sandbox init`") from None
    except (OSError, ValueError) as exc:
        raise Refusal(f"cannot read the policy {path}: {exc}") from None
    account_home, shell_home = homes()
    try:
        policy = Policy(doc, repo=repo, home=account_home, shell_home=shell_home,
                        remembered_path=under(repo, REMEMBERED) if repo else None)
    except PolicyError as exc:
        raise Refusal(f"the policy {path} is invalid: {exc}") from None
    return policy, repo


def read_regular(path: str, limit: int) -> bytes:
    """The bytes of a regular file, or Refusal: a FIFO, device or directory
    (which could block the hook or feed it forever) is refused before reading."""
    import stat

    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Refusal(f"the policy {path} is not a regular file")
        if st.st_size > limit:
            raise Refusal(f"the policy {path} is larger than {limit} bytes")
        chunks, size = [], 0
        while True:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            size += len(chunk)
            if size > limit:
                raise Refusal(f"the policy {path} is larger than {limit} bytes")
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def homes() -> tuple[str, str]:
    """(the account's home from the password database, which ``~`` in the
    policy means; ``$HOME``, which ``~`` in a command means to the agent's
    shell). Refusal when ``$HOME`` cannot be judged: unset, empty, relative or
    ``/`` (everything would be "under home")."""
    env = os.environ.get("HOME", "")
    if not env or not os.path.isabs(env) or os.path.normpath(env) in ("/", "//"):
        raise Refusal(f"HOME is {env!r}: set it to the user's home directory")
    from ..state_paths import account_home

    account = account_home()
    if not account or not os.path.isabs(account) or os.path.normpath(account) == "/":
        account = env
    return account, os.path.normpath(env)


def to_call(agent: str, event: str, data: dict[str, Any]) -> Call:
    from .calls import claude_call, cursor_call, gemini_call

    if agent in ("claude", "codex"):
        return claude_call(data)
    if agent == "gemini":
        return gemini_call(data)
    return cursor_call(event, data)


# -- events ------------------------------------------------------------------

def pre_tool(agent: str, event: str, data: dict[str, Any]) -> int:
    from .calls import BadInput, cwd_of

    try:
        cwd = cwd_of(data)
        call = to_call(agent, event, data)
    except BadInput as exc:
        raise Refusal(f"malformed hook input: {exc}") from None
    policy, repo = load_policy(cwd)
    if call.cwd != cwd:  # the call's own folder (Codex's workdir): no planted link either
        find_repo(call.cwd)
    set_deadline(STARTED + hook_deadline(policy.wait) - time.monotonic())
    decision = policy.classify(call)
    verdict = decision.verdict.value
    if verdict in ("allow", "observe"):
        if not _record(repo or _host_site(), "decision", data, quick=True, verdict=verdict,
                                tool=call.tool, agent=agent, summary=decision.summary,
                                remembered=decision.remembered or None):
            raise Refusal("the audit record of this call could not be written")
        out, code = answer(agent, event, True, "allowed by agent-sandbox policy"
                           + (" (remembered approval)" if decision.remembered else ""))
        return _emit(out, code)
    if verdict == "deny":
        msg = f"agent-sandbox denied this call: {decision.reason_text()}"
        _record(repo or _host_site(), "denial", data, tool=call.tool, agent=agent,
                summary=decision.summary, reasons=decision.reasons)
        out, code = answer(agent, event, False, msg)
        return _emit(out, code)
    # escalate: to the repository's queue, or on a host without `sandbox init`
    # to this user's host-level queue (repo_layout.Site), for `sandbox watch`
    return _escalate(agent, event, data, policy, repo or _host_site(queue=True), call,
                     decision)


def _host_site(queue: bool = False) -> str:
    """This user's host-level site (audit, and with ``queue`` its approval
    queue), created on first use in the user's state folder."""
    from ..repo_layout import Site, host_site

    site = host_site()
    os.makedirs(Site(site).audit, mode=0o700, exist_ok=True)
    if queue:
        from ..queue import queue_for

        queue_for(site).ensure()
    return site


def _escalate(agent: str, event: str, data: dict[str, Any], policy: Any, repo: str,
              call: Call, decision: Decision) -> int:
    from ..approval.escalation import escalate

    # both waits end before the hook's own deadline (contract.hook_deadline)
    left = STARTED + hook_deadline(policy.wait) - EXIT_SLACK - time.monotonic()
    wait = max(0.0, min(policy.wait, left))
    outcome = escalate(repo, call, decision, agent=agent,
                       session=str(data.get("session_id") or ""), wait=wait,
                       run_wait=max(0.0, min(RUN_WAIT, left - wait)), ttl=policy.ttl,
                       limit=OUTPUT_LIMITS[agent], use_id=str(data.get("tool_use_id") or ""))
    out, code = answer(agent, event, outcome.allow, outcome.message)
    return _emit(out, code)


def _record(repo: str, event: str, data: dict[str, Any], *, quick: bool = False,
            **fields: Any) -> bool:
    """Every tool call leaves a record, correlated by the client's session and
    tool-use ids; a call whose record cannot be written does not run."""
    from ..audit.repo import append_audit

    fields["session"] = str(data.get("session_id") or "")
    fields["tool_use_id"] = str(data.get("tool_use_id") or "") or None
    return append_audit(repo, event, {k: v for k, v in fields.items() if v is not None},
                        quick=quick)


def _audit(repo: str, event: str, **fields: Any) -> None:
    from ..audit.repo import audit

    audit(repo, event, **fields)


def post_tool(agent: str, data: dict[str, Any]) -> int:
    from .calls import cwd_of

    try:
        cwd = cwd_of(data)
    except ValueError:
        return _emit("", 0)
    repo = find_repo(cwd)
    if repo:
        resp = data.get("tool_response")
        ok = not (isinstance(resp, dict) and (resp.get("error") or resp.get("is_error")))
        _audit(repo, "result", agent=agent, tool=str(data.get("tool_name") or ""),
               session=str(data.get("session_id") or ""), ok=ok)
    return _emit("{}" if agent != "codex" else "", 0)


def session_start(agent: str, data: dict[str, Any]) -> int:
    from .calls import cwd_of

    try:
        cwd = cwd_of(data)
    except ValueError:
        cwd = os.getcwd()
    text = session_summary(find_repo(cwd))
    out = {"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": text}}
    return _emit(dumps(out), 0)


def session_summary(repo: str | None) -> str:
    """What SessionStart tells the agent."""
    lines = [
        "This session runs under agent-sandbox. Every tool call is checked against the "
        "repository's policy: allowed calls run normally, denied ones are refused, and "
        "privileged ones wait for a human to approve them outside this session.",
        "When a call is approved, agent-sandbox runs it itself inside the sandbox and returns "
        "its output to you in the refusal message (the tool did not run; read its output "
        "there). Never try to approve, edit .sandbox/, agent settings, hooks or MCP "
        "configuration: those writes are always refused.",
    ]
    if repo:
        from ..queue import FolderQueue

        q = FolderQueue(under(repo, QUEUE))
        c = q.counts()
        lines.append(f"Repository {repo}: {c['pending']} request(s) waiting for approval, "
                     f"{c['running']} running.")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in AGENTS or argv[1] not in AGENTS[argv[0]]:
        known = "; ".join(f"{a}: {', '.join(ev)}" for a, ev in AGENTS.items())
        sys.stderr.write(f"usage: sandbox hook AGENT EVENT ({known})\n")
        return 2
    agent, event = argv
    global STARTED
    STARTED = time.monotonic()
    try:
        set_deadline(START_BUDGET)
        raw = sys.stdin.buffer.read(MAX_INPUT + 1)
        if len(raw) > MAX_INPUT:
            raise Refusal("hook input is larger than 8 MiB")
        try:
            data = loads(raw)
        except ValueError as exc:
            raise Refusal(f"hook input is not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise Refusal("hook input must be a JSON object")
        if event in PRE_EVENTS:
            return pre_tool(agent, event, data)
        if event in ("post-tool-use", "after-tool"):
            return post_tool(agent, data)
        return session_start(agent, data)
    except Refusal as exc:
        return refuse(agent, event, str(exc))
    except BaseException as exc:  # fail closed, whatever happened
        if isinstance(exc, (KeyboardInterrupt, SystemExit)) and event not in PRE_EVENTS:
            raise
        return refuse(agent, event, f"internal error: {type(exc).__name__}: {exc}")


def run(argv: list[str]) -> int:
    """The hook as a process (``sandbox hook``): ``main``, then an exit that skips
    the interpreter's teardown (about a tenth of the allow path), and no cyclic
    garbage collection meanwhile (a one-shot process makes next to no cycles).

    The teardown is skipped only when nothing can still need it: the answer is
    already written to fd 1, the audit log closed and made durable as its policy
    says; the standard streams are flushed and the exit handlers run here. If
    another thread is alive (never on the decision paths) the normal exit joins it.
    """
    import gc

    gc.disable()
    code = main(argv)
    threading = sys.modules.get("threading")
    if threading is not None and threading.active_count() > 1:
        gc.enable()
        return code
    import atexit

    try:
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:  # an answer already written stands; an unwritten one blocks
        code = code or 2
    os._exit(code)

