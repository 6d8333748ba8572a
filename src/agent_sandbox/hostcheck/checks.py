"""``sandbox verify``: the isolation self-check of one host.

Each check is a function that exercises the real components installed on the
host and judges the outcome from outside the sandbox (file contents on the
host, what an upstream server received, the approval queue), never from the
sandboxed command's own exit status:

- ``denied_read``: a canary in a ``denyRead`` path cannot be read through
  ``sandbox exec`` while a control file can;
- ``protected_write``: inside a writable root, an ordinary write lands but
  writes to protected names (agent settings, ``.git/hooks``, shell rc files)
  do not;
- ``denied_domain`` / ``allowed_domain``: through the egress proxy, a denied
  name is refused and nothing reaches the upstream server, while an allowed
  name reaches it (an upstream server in a private network namespace, named
  through the proxy's hosts file, so no resolver or internet is involved);
  where the host runs the proxy service, the service refuses the name too;
- ``escalation``: real Claude Code PreToolUse JSON for a privileged command fed
  to ``sandbox hook claude pre-tool-use`` queues an escalation, and the hook
  does not allow the call (the check denies the request as the approver);
- ``audit``: the audit chains written during the checks verify (the
  repository's, the host's, and the proxy service's, which must record the
  refusal ``denied_domain`` asked of it).

``drift`` (beside it) compares installed files with the render manifest the
roles install; ``netlab`` is the private network the domain checks use.

It must never pass a check it could not run: a missing component, a missing
privilege or an internal error is a failure with the reason. Everything it
creates lives in one scratch folder (and one network namespace) removed at
the end.
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agent_sandbox import contract as _contract

from ..repo_layout import AUDIT, POLICY, QUEUE, SANDBOX, SPEC_LAYER, under
from . import VerifyError
from .netlab import CLIENT, Upstream, upstream_network

SYSTEM_SETTINGS = _contract.SYSTEM_SRT_SETTINGS

VERIFY_ALLOWED_NAME = "allowed.verify.agent-sandbox.test"
UNLISTED_NAME = "unlisted.verify.agent-sandbox.test"
PRIVILEGED_COMMAND = "sudo apt-get install -y jq"
EXEC_TIMEOUT = 60.0
GLOB_CHARS = set("*?[")


@dataclass(frozen=True)
class CheckResult:
    name: str
    passed: bool
    detail: str
    seconds: float = 0.0  # how long it ran


@dataclass
class Context:
    """What every check needs: the settings under test and a scratch folder."""

    settings_path: str
    python: str
    home: str
    scratch: str = ""
    host_only: bool = False
    timeout: float = EXEC_TIMEOUT
    notes: dict[str, Any] = field(default_factory=dict)

    def settings(self) -> dict[str, Any]:
        with open(self.settings_path, encoding="utf-8") as fh:
            data = json.load(fh)
        if not isinstance(data, dict):
            raise VerifyError(f"{self.settings_path} is not a JSON object")
        return data



# -- pure helpers --------------------------------------------------------------


def expand(path: str, home: str) -> str:
    if path == "~":
        return home
    if path.startswith("~/"):
        return os.path.join(home, path[2:])
    return path


def concrete_paths(patterns: list[str], home: str) -> list[str]:
    """The absolute, glob-free entries of a settings path list."""
    out = []
    for p in patterns:
        full = expand(p, home)
        if os.path.isabs(full) and not (GLOB_CHARS & set(full)):
            out.append(os.path.normpath(full))
    return out


def denied_name(denied: list[str]) -> str:
    """A concrete host name the denied patterns cover (one outside every
    allowed pattern when the settings deny nothing explicitly)."""
    for pattern in denied:
        name = pattern[2:] if pattern.startswith("*.") else pattern
        if pattern.startswith("*."):
            name = "verify." + name
        if name and not (GLOB_CHARS & set(name)):
            return name.rstrip(".").lower()
    return UNLISTED_NAME


def with_allowed(settings: dict[str, Any], name: str) -> dict[str, Any]:
    """A copy of srt settings that also allows ``name`` (nothing else changes)."""
    doc: dict[str, Any] = json.loads(json.dumps(settings))
    net = doc.setdefault("network", {})
    net["allowedDomains"] = [*net.get("allowedDomains", []), name]
    net["deniedDomains"] = [d for d in net.get("deniedDomains", []) if d != name]
    return doc


# -- running the real components -------------------------------------------------


def _module_available(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def require(module: str, feature: str) -> None:
    if not _module_available(module):
        raise VerifyError(f"not available: {feature} ({module} is not installed)")


def check_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a check's run: this one's, without proxy variables. The
    egress proxy goes on through the caller's HTTP(S)_PROXY (srt's parentProxy
    fallback); the checks prove this host's own enforcement against their own
    upstream, so their runs never inherit one."""
    from ..runtime.proxy import PROXY_VARIABLES

    base = {k: v for k, v in os.environ.items() if k not in PROXY_VARIABLES}
    return {**base, **(extra or {})}


def sandbox_cli(ctx: Context, args: list[str], *, cwd: str | None = None,
                env: dict[str, str] | None = None, stdin: bytes | None = None,
                timeout: float | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(_contract.self_argv(ctx.python, *args), cwd=cwd,
                          input=stdin, capture_output=True, timeout=timeout or ctx.timeout,
                          env=check_env(env), check=False)


def sandboxed(ctx: Context, settings: str, argv: list[str], *, cwd: str,
              env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    """Run argv under ``sandbox exec`` as this host runs it."""
    require("agent_sandbox.runtime.run", "sandbox exec")
    args = ["exec", "--settings", settings, "--cwd", cwd, "--"]
    proc = sandbox_cli(ctx, [*args, *argv], cwd=cwd, env=env)
    if proc.returncode == 2 and b"No such command" in proc.stderr:
        raise VerifyError("not available: sandbox exec is not a command of this install")
    return proc


def _text(proc: subprocess.CompletedProcess[bytes]) -> str:
    return (proc.stdout + proc.stderr).decode("utf-8", "replace")


def _short(text: str, n: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 3] + "..."


# -- the checks ----------------------------------------------------------------


def check_denied_read(ctx: Context) -> str:
    settings = ctx.settings()
    fs = settings.get("filesystem", {})
    allowed_read = concrete_paths(list(fs.get("allowRead", [])), ctx.home)
    candidates = concrete_paths(list(fs.get("denyRead", [])), ctx.home)
    target_dir = next((p for p in candidates if os.path.isdir(p) or not os.path.exists(p)), None)
    if target_dir is None:
        raise VerifyError("the settings deny no concrete folder to test (denyRead)")
    secret = "canary-" + secrets.token_hex(16)
    created_dir = not os.path.exists(target_dir)
    canary = os.path.join(target_dir, f".agent-sandbox-verify-{secrets.token_hex(4)}")
    if any(canary == a or canary.startswith(a + "/") for a in allowed_read):
        raise VerifyError(f"{canary} is re-allowed by allowRead; cannot test {target_dir}")
    control = os.path.join(ctx.scratch, "control.txt")
    token = "control-" + secrets.token_hex(8)
    with open(control, "w", encoding="utf-8") as fh:
        fh.write(token)
    try:
        os.makedirs(target_dir, mode=0o700, exist_ok=True)
        with open(canary, "w", encoding="utf-8") as fh:
            fh.write(secret)
        proc = sandboxed(ctx, ctx.settings_path,
                         ["/bin/sh", "-c", f'cat "{control}"; echo; cat "{canary}"'],
                         cwd=ctx.scratch)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(canary)
        if created_dir:
            with contextlib.suppress(OSError):
                os.rmdir(target_dir)
    out = _text(proc)
    if secret in out:
        raise AssertionError(f"{canary} was read through the sandbox")
    if token not in out:
        raise VerifyError(f"the sandbox did not run the control read: {_short(out)}")
    return f"{target_dir} hidden, control file read"


def _writable_root(ctx: Context) -> str:
    fs = ctx.settings().get("filesystem", {})
    roots = concrete_paths(list(fs.get("allowWrite", [])), ctx.home)
    # scratch space first: a temporary folder is the least intrusive place to test in
    temp = {os.path.realpath(tempfile.gettempdir()), "/tmp", "/var/tmp"}
    roots.sort(key=lambda r: os.path.realpath(r) not in temp)
    for root in roots:
        if os.path.isdir(root) and os.access(root, os.W_OK):
            return root
    raise VerifyError("no existing folder among the settings' allowWrite roots")


PROTECTED = (".claude/settings.json", POLICY, ".git/hooks/pre-commit",
             ".git/config", ".bashrc", ".mcp.json", ".vscode/settings.json")


def check_protected_write(ctx: Context) -> str:
    work = tempfile.mkdtemp(prefix="agent-sandbox-verify-", dir=_writable_root(ctx))
    try:
        script = ["cd \"$1\"", "echo ok > ok.txt"]
        for rel in PROTECTED:
            parent = os.path.dirname(rel)
            if parent:
                script.append(f"mkdir -p {parent} 2>/dev/null")
            script.append(f"echo pwned > {rel} 2>/dev/null")
        script.append("true")
        proc = sandboxed(ctx, ctx.settings_path,
                         ["/bin/sh", "-c", "; ".join(script), "sh", work], cwd=work)
        ok = os.path.join(work, "ok.txt")
        if not os.path.isfile(ok) or open(ok, encoding="utf-8").read().strip() != "ok":
            raise VerifyError(f"the control write in {work} did not land: {_short(_text(proc))}")
        written = []
        for rel in PROTECTED:
            path = os.path.join(work, rel)
            with contextlib.suppress(OSError):
                if "pwned" in open(path, encoding="utf-8", errors="replace").read():
                    written.append(rel)
        if written:
            raise AssertionError("protected files were written: " + ", ".join(written))
        return (f"{len(PROTECTED)} protected names refused in {os.path.dirname(work)}, "
                "control write landed")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _fetch(ctx: Context, settings: str, up: Upstream, name: str, token: str) -> str:
    client = os.path.join(ctx.scratch, "client.py")
    with open(client, "w", encoding="utf-8") as fh:
        fh.write(CLIENT)
    proc = sandboxed(ctx, settings,
                     [ctx.python, "-I", client, f"http://{name}:{up.port}/{token}"],
                     cwd=ctx.scratch, env={"AGENT_SANDBOX_HOSTS": up.hosts})
    return _text(proc)


PROXY_UNIT = _contract.PROXY_UNIT


def _service_options(unit_text: str, flag: str) -> list[str]:
    """The values given to ``flag`` on a proxy unit's ExecStart line."""
    for line in unit_text.splitlines():
        if line.startswith("ExecStart="):
            return [value for f, value in itertools.pairwise(line.split()) if f == flag]
    return []


def service_http_address(unit_text: str) -> tuple[str, int] | None:
    """The loopback ``--http HOST:PORT`` listener in a proxy unit's ExecStart."""
    for value in _service_options(unit_text, "--http"):
        host, _, port = value.rpartition(":")
        if not value.startswith("unix:") and port.isdigit():
            return host, int(port)
    return None


def service_audit_dir(unit_text: str) -> str | None:
    """The folder a proxy unit chains its decisions in (``--audit-dir``)."""
    found = _service_options(unit_text, "--audit-dir")
    return found[0] if found else None


def refused_by_service(address: tuple[str, int], name: str) -> str:
    """Ask the host's proxy service to CONNECT to ``name``; return its status line."""
    import socket

    with socket.create_connection(address, timeout=10) as sock:
        sock.sendall(f"CONNECT {name}:443 HTTP/1.1\r\nHost: {name}:443\r\n\r\n".encode())
        reply = b""
        while b"\r\n\r\n" not in reply and len(reply) < 65536:
            chunk = sock.recv(4096)
            if not chunk:
                break
            reply += chunk
    return reply.decode("latin-1").split("\r\n", 1)[0]


def check_denied_domain(ctx: Context) -> str:
    name = denied_name(list(ctx.settings().get("network", {}).get("deniedDomains", [])))
    token = "denied-" + secrets.token_hex(6)
    with upstream_network(ctx.scratch, ctx.python, [name]) as up:
        out = _fetch(ctx, ctx.settings_path, up, name, token)
        reached = token in up.requests()
    if reached:
        raise AssertionError(f"a request to {name} reached the upstream server")
    if "STATUS 403" not in out:
        raise AssertionError(f"{name} was not refused by the proxy with 403: {_short(out)}")
    detail = f"{name} refused (403), nothing reached the upstream server"
    if os.path.isfile(PROXY_UNIT):
        with open(PROXY_UNIT, encoding="utf-8") as fh:
            address = service_http_address(fh.read())
        if address is None:
            raise VerifyError(f"{PROXY_UNIT} names no TCP --http listener to test")
        try:
            status = refused_by_service(address, name)
        except OSError as exc:
            raise AssertionError(f"the proxy service at {address[0]}:{address[1]} is not "
                                 f"answering: {exc}") from None
        if " 403" not in status:
            raise AssertionError(f"the proxy service did not refuse {name}: {status!r}")
        ctx.notes["service_refused"] = name  # the audit check looks for its record
        detail += f"; the proxy service ({address[0]}:{address[1]}) refused it too"
    return detail


def check_allowed_domain(ctx: Context) -> str:
    settings = with_allowed(ctx.settings(), VERIFY_ALLOWED_NAME)
    path = os.path.join(ctx.scratch, "allowed-settings.json")
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(settings, fh)
    token = "allowed-" + secrets.token_hex(6)
    retried = ""
    with upstream_network(ctx.scratch, ctx.python, [VERIFY_ALLOWED_NAME]) as up:
        out = _fetch(ctx, path, up, VERIFY_ALLOWED_NAME, token)
        if out.startswith("STATUS 502"):
            # a gateway failure is not a policy decision: the proxy allowed the name
            # and could not connect. Asked once more, in a new sandbox and proxy, so
            # that a passing fault of a loaded machine is not read as a refusal; a
            # second failure fails the check, with both answers.
            first = _short(out)
            out = _fetch(ctx, path, up, VERIFY_ALLOWED_NAME, token)
            retried = f" (the first attempt answered {first})"
        reached = token in up.requests()
    if not reached or f"upstream-ok /{token}" not in out:
        raise AssertionError(f"{VERIFY_ALLOWED_NAME} did not pass the proxy: {_short(out)}"
                             + retried)
    return (f"{VERIFY_ALLOWED_NAME} (allowed for this check) reached the upstream server"
            + retried)


def _repo(ctx: Context) -> str:
    repo = ctx.notes.get("repo")
    if repo:
        return str(repo)
    require("agent_sandbox.repo_init", "sandbox init")
    repo = tempfile.mkdtemp(prefix="agent-sandbox-verify-repo-", dir=_writable_root(ctx))
    ctx.notes["cleanup"] = [*ctx.notes.get("cleanup", []), repo]
    # An empty repository layer: the host's managed policy is what is under test.
    os.makedirs(under(repo, SANDBOX), exist_ok=True)
    with open(under(repo, SPEC_LAYER), "w", encoding="utf-8") as fh:
        fh.write("version: 1\n")
    proc = sandbox_cli(ctx, ["init", repo, "--claude"])
    if proc.returncode != 0:
        raise VerifyError(f"sandbox init failed: {_short(_text(proc))}")
    ctx.notes["repo"] = repo
    return repo


def _pending(repo: str) -> list[str]:
    pending = under(repo, f"{QUEUE}/pending")
    try:
        return sorted(os.listdir(pending))
    except FileNotFoundError:
        return []


def check_escalation(ctx: Context) -> str:
    require("agent_sandbox.hooks.tool_call", "the agent hooks")
    repo = _repo(ctx)
    event = {
        "session_id": "verify-" + secrets.token_hex(8),
        "transcript_path": os.path.join(ctx.scratch, "transcript.jsonl"),
        "cwd": repo,
        "permission_mode": "default",
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": PRIVILEGED_COMMAND,
                       "description": "Install jq system-wide"},
    }
    hook = subprocess.Popen(_contract.hook_argv(ctx.python, "claude", "pre-tool-use"),
                            cwd=repo, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert hook.stdin is not None
    hook.stdin.write(json.dumps(event).encode())
    hook.stdin.close()
    hook.stdin = None  # communicate() must not flush the closed pipe
    try:
        deadline = time.monotonic() + 20
        queued: list[str] = []
        while time.monotonic() < deadline and hook.poll() is None:
            proc = sandbox_cli(ctx, ["pending", repo, "--json"])
            with contextlib.suppress(ValueError):
                queued = [str(r["id"]) for r in json.loads(proc.stdout or b"[]")
                          if PRIVILEGED_COMMAND in json.dumps(r)]
            if queued:
                break
            time.sleep(0.2)
        if not queued:
            hook.kill()
            out = hook.communicate()[0].decode("utf-8", "replace")
            raise AssertionError(f"no escalation was queued for {PRIVILEGED_COMMAND!r}: "
                                 f"{_short(out)}")
        deny = sandbox_cli(ctx, ["deny", repo, queued[0], "--reason",
                                 "sandbox verify: escalation check"])
        if deny.returncode != 0:
            raise VerifyError(f"sandbox deny failed: {_short(_text(deny))}")
        out_b, err_b = hook.communicate(timeout=30)
    finally:
        if hook.poll() is None:
            hook.kill()
            hook.wait()
    out = out_b.decode("utf-8", "replace")
    try:
        decision = json.loads(out)["hookSpecificOutput"]["permissionDecision"]
    except (ValueError, KeyError, TypeError):
        raise AssertionError(f"the hook gave no decision: {_short(out + err_b.decode())}") from None
    if decision == "allow":
        raise AssertionError("the hook allowed a denied escalation")
    return (f"{PRIVILEGED_COMMAND!r} escalated ({queued[0]}), denied by the approver, "
            f"hook said {decision}")


def _tail_holds(log: str, text: str) -> bool:
    """Whether the last MiB of ``log`` contains ``text`` (False when unreadable)."""
    try:
        with open(log, "rb") as fh:
            fh.seek(max(0, os.fstat(fh.fileno()).st_size - (1 << 20)))
            return text.encode() in fh.read()
    except OSError:
        return False


def check_audit(ctx: Context) -> str:
    require("agent_sandbox.audit", "the audit log")
    dirs = []
    repo_audit = under(_repo(ctx), AUDIT)
    dirs.append(repo_audit)
    host_audit = os.environ.get(_contract.AUDIT_DIR_ENV, _contract.HOST_AUDIT_DIR)
    if os.path.isfile(os.path.join(host_audit, "audit.jsonl")):
        dirs.append(host_audit)
    if os.path.isfile(PROXY_UNIT):
        # the proxy service's own chain. When denied_domain had it refuse a name,
        # that decision must be there (it is written off the connection's path,
        # so allow a moment)
        with open(PROXY_UNIT, encoding="utf-8") as fh:
            service_audit = service_audit_dir(fh.read())
        refused = ctx.notes.get("service_refused")
        if service_audit and refused:
            log = os.path.join(service_audit, "audit.jsonl")
            deadline = time.monotonic() + 3
            while not _tail_holds(log, refused) and time.monotonic() < deadline:
                time.sleep(0.05)
            if not _tail_holds(log, refused):
                raise AssertionError(f"the proxy service refused {refused}, but {log} "
                                     "does not record it")
            dirs.append(service_audit)
        elif service_audit and os.path.isfile(os.path.join(service_audit, "audit.jsonl")):
            dirs.append(service_audit)
    details = []
    for d in dirs:
        if not os.path.isfile(os.path.join(d, "audit.jsonl")):
            raise AssertionError(f"{d} holds no audit log")
        proc = sandbox_cli(ctx, ["audit", "verify", d])
        if proc.returncode != 0:
            raise AssertionError(f"audit verify {d} failed: {_short(_text(proc))}")
        details.append(d)
    with open(os.path.join(repo_audit, "audit.jsonl"), encoding="utf-8") as fh:
        events = {json.loads(line).get("event") for line in fh if line.strip()}
    if "escalation" not in events:
        raise AssertionError("the repository audit has no escalation record "
                             f"(events: {sorted(events)})")
    return "chains verify: " + ", ".join(details)


REPOSITORY_CHECKS = ("escalation", "audit")

CHECKS: tuple[tuple[str, Callable[[Context], str]], ...] = (
    ("denied_read", check_denied_read),
    ("protected_write", check_protected_write),
    ("denied_domain", check_denied_domain),
    ("allowed_domain", check_allowed_domain),
    ("escalation", check_escalation),
    ("audit", check_audit),
)


def run_check(ctx: Context, name: str, fn: Callable[[Context], str]) -> CheckResult:
    """One check, timed; anything but a clean return is a failure (fail closed)."""
    start = time.monotonic()
    passed, detail = _outcome(ctx, fn)
    return CheckResult(name, passed, detail, round(time.monotonic() - start, 3))


def _outcome(ctx: Context, fn: Callable[[Context], str]) -> tuple[bool, str]:
    try:
        return True, fn(ctx)
    except AssertionError as exc:
        return False, str(exc) or "assertion failed"
    except VerifyError as exc:
        return False, str(exc)
    except subprocess.TimeoutExpired as exc:
        return False, f"timed out: {' '.join(map(str, exc.cmd))[:200]}"
    except Exception as exc:
        return False, f"internal error: {type(exc).__name__}: {exc}"


def default_settings() -> str:
    if os.path.isfile(SYSTEM_SETTINGS):
        return SYSTEM_SETTINGS
    user = os.path.expanduser("~/.srt-settings.json")
    if os.path.isfile(user):
        return user
    raise VerifyError(f"no sandbox settings: neither {SYSTEM_SETTINGS} nor {user} exists "
                      "(provision this host or pass --settings)")


def run(settings_path: str | None = None, *, only: list[str] | None = None,
        host_only: bool = False) -> list[CheckResult]:
    """Run the checks (all, or those named in ``only``) and clean up after them.
    ``host_only`` leaves out the checks that need a repository connected with
    ``sandbox init`` (the approval loop and its audit)."""
    if os.name == "nt":  # Windows: the engine's fence and account, behind one interface
        from .. import windows_host

        return [CheckResult(c.name, c.ok, c.detail) for c in windows_host.verify()]
    checks = list(CHECKS)
    if os.path.isfile(_contract.WEB_UNIT):  # the web approvals unit, where it is enabled
        from .web import check_web_service

        checks.append(("web_service", lambda ctx: check_web_service()))
    names = [n for n, _ in checks]
    unknown = [n for n in (only or []) if n not in names]
    if unknown:
        raise VerifyError(f"unknown check(s) {', '.join(unknown)}; choose from {', '.join(names)}")
    ctx = Context(settings_path or default_settings(), sys.executable,
                  os.path.expanduser("~"), host_only=host_only)
    # the checks' own files (settings, hosts, logs) where no sandbox can write them
    from agent_sandbox.contract import user_state_dir
    from agent_sandbox.runtime.bwrap.run_records import private_dir

    ctx.scratch = tempfile.mkdtemp(prefix="verify-", dir=private_dir(
        os.path.join(user_state_dir(os.path.expanduser("~")), "verify")))
    try:
        return [run_check(ctx, n, fn) for n, fn in checks
                if (not only or n in only) and not (host_only and n in REPOSITORY_CHECKS)]
    finally:
        for path in ctx.notes.get("cleanup", []):
            shutil.rmtree(path, ignore_errors=True)
        shutil.rmtree(ctx.scratch, ignore_errors=True)
