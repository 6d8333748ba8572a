"""The hook as the agents run it: a subprocess reading real hook JSON."""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_sandbox.hooks import tool_call as entry

from .conftest import claude_pre, decision_of, make_repo, run_hook


def test_allow_and_deny_answer_at_once(repo: Path) -> None:
    p = run_hook("claude", "pre-tool-use", claude_pre("ls -la", repo))
    assert p.returncode == 0 and decision_of(p)[0] == "allow"
    p = run_hook("claude", "pre-tool-use", claude_pre("ls; rm -rf /", repo))
    assert p.returncode == 0
    verdict, reason = decision_of(p)
    assert verdict == "deny" and "no rm -rf" in reason
    assert not any(Path(repo, ".sandbox/escalations/pending").iterdir())


def test_the_quick_exit_keeps_answer_record_and_reason(repo: Path) -> None:
    """The hook process skips the interpreter's teardown (``entry.run``): its
    answer, its audit record (chained, correlated by the tool-use id) and a
    refusal's reason on stderr must all be out before it ends."""
    log = repo / ".sandbox/audit/audit.jsonl"

    def last_record() -> dict[str, Any]:
        return dict(json.loads(log.read_bytes().splitlines()[-1]))

    for command, verdict in (("ls -la", "allow"), ("ls; rm -rf /", "deny")):
        payload = claude_pre(command, repo)
        payload["tool_use_id"] = f"toolu-quick-{verdict}"
        p = run_hook("claude", "pre-tool-use", payload)
        assert p.returncode == 0 and decision_of(p)[0] == verdict
        rec = last_record()
        assert rec["tool_use_id"] == f"toolu-quick-{verdict}" and rec["summary"] == command
        assert rec["verdict" if verdict == "allow" else "event"] in (verdict, "denial")
    p = run_hook("claude", "pre-tool-use", b"{not json")
    assert p.returncode == 2 and "not valid JSON" in p.stderr.decode()
    assert decision_of(p)[0] == "deny"
    # control: the judge tells a record of another call apart
    assert last_record()["tool_use_id"] != "toolu-quick-allow"


def test_writes_to_protected_paths_are_denied_whatever_the_tool(repo: Path) -> None:
    for tool, ti in [("Write", {"file_path": str(repo / ".sandbox/policy.json"), "content": "{}"}),
                     ("Edit", {"file_path": ".claude/settings.json", "old_string": "a",
                               "new_string": "b"}),
                     ("MultiEdit", {"file_path": ".mcp.json", "edits": []}),
                     ("Bash", {"command": "echo '{}' > .sandbox/escalations/decided/x.json"})]:
        p = run_hook("claude", "pre-tool-use", claude_pre("", repo, tool=tool, tool_input=ti))
        assert decision_of(p)[0] == "deny", (tool, p.stdout)


@pytest.mark.parametrize("payload,why", [
    (b"not json", "not valid JSON"),
    (b"[1, 2]", "JSON object"),
    (b'{"tool_name": 5, "cwd": "/"}', "tool_name"),
    (b'{"tool_name": "Bash", "tool_input": "ls", "cwd": "/"}', "tool_input"),
    (b'{"tool_name": "Bash", "tool_input": {}, "cwd": "/"}', "command"),
])
def test_malformed_input_denies_with_exit_2(payload: bytes, why: str) -> None:
    p = run_hook("claude", "pre-tool-use", payload)
    assert p.returncode == 2
    verdict, reason = decision_of(p)
    assert verdict == "deny" and why in reason
    assert why in p.stderr.decode()


def test_unknown_tool_is_denied(repo: Path) -> None:
    p = run_hook("claude", "pre-tool-use",
                 claude_pre("", repo, tool="Teleport", tool_input={"where": "prod"}))
    assert decision_of(p) == ("deny", "agent-sandbox denied this call: deny: unknown tool "
                                      "'Teleport'")


def test_missing_sandbox_denies(tmp_path: Path) -> None:
    p = run_hook("claude", "pre-tool-use", claude_pre("ls", tmp_path))
    assert p.returncode == 2 and decision_of(p)[0] == "deny"
    assert "sandbox init" in decision_of(p)[1]


def test_broken_policy_denies(repo: Path) -> None:
    (repo / ".sandbox/policy.json").write_text('{"commands": {"default": "sure"}}')
    p = run_hook("claude", "pre-tool-use", claude_pre("ls", repo))
    assert p.returncode == 2 and "invalid" in decision_of(p)[1]


def test_unknown_agent_or_event_fails_closed() -> None:
    assert run_hook("claude", "before-tool", b"{}").returncode == 2
    assert run_hook("windsurf", "pre-tool-use", b"{}").returncode == 2


def test_codex_uses_the_claude_shape(repo: Path) -> None:
    p = run_hook("codex", "pre-tool-use", claude_pre("rm -rf /x", repo))
    assert decision_of(p)[0] == "deny"
    p = run_hook("codex", "pre-tool-use", claude_pre("ls", repo))
    assert p.returncode == 0 and p.stdout.strip() == b""
    patch = "*** Begin Patch\n*** Update File: .codex/config.toml\n@@\n-a\n+b\n*** End Patch"
    p = run_hook("codex", "pre-tool-use", claude_pre("", repo, tool="apply_patch",
                                                     tool_input={"command": patch}))
    assert decision_of(p)[0] == "deny"


def test_gemini_before_tool(repo: Path) -> None:
    base = {"session_id": "s", "transcript_path": "/t", "cwd": str(repo),
            "hook_event_name": "BeforeTool", "timestamp": "2026-01-01T00:00:00Z"}
    p = run_hook("gemini", "before-tool", {**base, "tool_name": "run_shell_command",
                                           "tool_input": {"command": "ls"}})
    assert json.loads(p.stdout)["decision"] == "allow"
    p = run_hook("gemini", "before-tool", {**base, "tool_name": "write_file",
                                           "tool_input": {"file_path": ".gemini/settings.json",
                                                          "content": "{}"}})
    out = json.loads(p.stdout)
    assert out["decision"] == "deny" and "protected" in out["reason"]
    p = run_hook("gemini", "before-tool", {**base, "tool_name": "read_file",
                                           "tool_input": {"file_path": "a/.env"}})
    assert json.loads(p.stdout)["decision"] == "deny"
    p = run_hook("gemini", "before-tool", b"{")
    assert p.returncode == 2 and json.loads(p.stdout)["decision"] == "deny"


def test_cursor_events(repo: Path) -> None:
    base = {"conversation_id": "c", "generation_id": "g", "workspace_roots": [str(repo)],
            "hook_event_name": "beforeShellExecution"}
    p = run_hook("cursor", "before-shell-execution", {**base, "command": "ls", "cwd": str(repo)})
    assert json.loads(p.stdout)["permission"] == "allow"
    p = run_hook("cursor", "before-shell-execution",
                 {**base, "command": "rm -rf /", "cwd": str(repo)})
    assert json.loads(p.stdout)["permission"] == "deny"
    p = run_hook("cursor", "before-read-file", {**base, "file_path": str(repo / "x/.env"),
                                                "content": "SECRET=1"})
    assert json.loads(p.stdout) == {"permission": "deny"}
    p = run_hook("cursor", "before-mcp-execution",
                 {**base, "tool_name": "list_issues", "server": "github",
                  "tool_input": json.dumps({"repo": "a/b"})})
    assert json.loads(p.stdout)["permission"] == "allow"


def test_session_start_and_post_tool_use(repo: Path) -> None:
    p = run_hook("claude", "session-start", {"session_id": "s", "cwd": str(repo),
                                             "hook_event_name": "SessionStart",
                                             "source": "startup"})
    ctx = json.loads(p.stdout)["hookSpecificOutput"]["additionalContext"]
    assert "agent-sandbox" in ctx and "0 request(s) waiting" in ctx
    p = run_hook("claude", "post-tool-use", {**claude_pre("ls", repo),
                                             "hook_event_name": "PostToolUse",
                                             "tool_response": {"stdout": "x"}})
    assert p.returncode == 0
    log = (repo / ".sandbox/audit/audit.jsonl").read_text()
    assert '"result"' in log


def test_escalation_times_out_plainly(tmp_path: Path) -> None:
    from .conftest import BASE_POLICY

    doc = json.loads(json.dumps(BASE_POLICY))
    doc["approvals"]["wait"] = 0.5
    repo = make_repo(tmp_path / "r", doc)
    p = run_hook("claude", "pre-tool-use", claude_pre("make deploy", repo))
    verdict, reason = decision_of(p)
    assert verdict == "deny" and "No decision arrived in time" in reason
    done = list((repo / ".sandbox/escalations/done").iterdir())
    assert len(done) == 1 and json.loads(done[0].read_text())["status"] == "timed_out"


# -- fuzzing: garbage never yields an allow ----------------------------------------

def _run_in_process(agent: str, event: str, data: bytes, monkeypatch: Any) -> tuple[str, int]:
    stdin = io.TextIOWrapper(io.BytesIO(data))
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdin", stdin)
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    monkeypatch.setattr(entry, "MANAGED_POLICY", "/nonexistent/agent-sandbox/policy.json")
    code = entry.main([agent, event])
    return out.getvalue(), code


def _allowed(agent: str, out: str, code: int) -> bool:
    if agent == "codex" and code == 0 and not out.strip():
        return True
    try:
        doc = json.loads(out)
    except ValueError:
        return False
    return (doc.get("hookSpecificOutput", {}).get("permissionDecision") == "allow"
            or doc.get("decision") == "allow" or doc.get("permission") == "allow")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=12)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                    HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=300))
def test_fuzz_random_bytes_never_allow(data: bytes, monkeypatch: Any) -> None:
    for agent, event in (("claude", "pre-tool-use"), ("gemini", "before-tool"),
                         ("cursor", "before-shell-execution"), ("codex", "pre-tool-use")):
        out, code = _run_in_process(agent, event, data, monkeypatch)
        assert not _allowed(agent, out, code)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                    HealthCheck.function_scoped_fixture])
@given(tool=st.sampled_from(["Bash", "Write", "Edit", "Read", "WebFetch", "mcp__x__y", "Nope",
                             "", "apply_patch"]),
       tool_input=json_values, cwd=st.one_of(st.just("/nonexistent/dir"), json_values))
def test_fuzz_structured_garbage_never_allows(tool: str, tool_input: Any, cwd: Any,
                                              monkeypatch: Any) -> None:
    """Well-formed JSON with nonsense fields, where no .sandbox/ exists: never allow."""
    data = json.dumps({"tool_name": tool, "tool_input": tool_input, "cwd": cwd}).encode()
    for agent, event in (("claude", "pre-tool-use"), ("gemini", "before-tool")):
        out, code = _run_in_process(agent, event, data, monkeypatch)
        assert not _allowed(agent, out, code)


def _policy(repo: Path, doc: dict[str, Any]) -> Any:
    from agent_sandbox.policy.engine import Policy

    return Policy(doc, repo=str(repo), home=str(repo.parent / "home"))


def test_push_to_a_path_remote_escalates_like_any_push(tmp_path: Path) -> None:
    import subprocess

    from agent_sandbox.policy.decision import Call

    from .conftest import BASE_POLICY

    repo = make_repo(tmp_path / "repo")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "remote", "add", "origin", str(tmp_path / "r.git")],
                   check=True)
    subprocess.run(["git", "-C", str(repo), "remote", "add", "web",
                    "https://github.com/example/x.git"], check=True)
    doc = json.loads(json.dumps(BASE_POLICY))
    doc["commands"]["rules"] = [r for r in doc["commands"]["rules"]
                                if r.get("pattern") != "git push *"]  # "git *" allows
    policy = _policy(repo, doc)

    def verdict(cmd: str) -> tuple[str, str]:
        d = policy.classify(Call("bash", "Bash", {"command": cmd}, str(repo), command=cmd))
        return d.verdict.value, d.reason_text()

    v, why = verdict("git push origin main")
    assert v == "escalate" and "bad host" not in why, why
    v, why = verdict("git push file:///srv/r.git main")
    assert v != "allow" and "bad host" not in why, why
    # control: a push to a remote whose host the policy allows is not refused as a bad
    # host either (it escalates: the engine allows only the read-only git it models)
    v, why = verdict("git push web main")
    assert v == "escalate" and "bad host" not in why, why


def test_an_unreadable_link_is_judged_by_its_name(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from agent_sandbox.policy.decision import Call
    from agent_sandbox.spec import paths

    repo = make_repo(tmp_path / "repo")
    policy = _policy(repo, json.loads((repo / ".sandbox/policy.json").read_text()))
    real = os.path.realpath
    link = str(repo / "unreadable-link")

    def realpath(p: str, *a: Any, **k: Any) -> str:
        if p.startswith(link):
            raise PermissionError(13, "Permission denied", p)
        return real(p, *a, **k)

    monkeypatch.setattr(paths.os.path, "realpath", realpath)
    assert paths.resolve(link + "/x", "/") == link + "/x"
    d = policy.classify(Call("bash", "Bash", {}, str(repo), command=f"ls -la {link}"))
    assert "internal error" not in d.reason_text()
    assert d.verdict.value == "allow"  # ls of a path inside the repository
    d = policy.classify(Call("bash", "Bash", {}, str(repo), command="ls -la /proc/1/exe"))
    assert "internal error" not in d.reason_text()


GEMINI_TOOLS = {"run_shell_command", "write_file", "replace", "edit", "read_file",
                "read_many_files", "list_directory", "glob", "grep_search",
                "search_file_content", "grep", "web_fetch", "google_web_search"}


@pytest.mark.parametrize("tool", sorted(__import__("agent_sandbox.policy.tools",
                                                   fromlist=["KINDS"]).KINDS))
def test_every_tool_in_the_table_reaches_the_engine_as_its_kind(tool: str) -> None:
    """policy/tools.KINDS and hooks/calls agree: no listed tool falls through
    to "unknown" (which would deny it)."""
    from agent_sandbox.hooks.calls import claude_call, gemini_call
    from agent_sandbox.policy.tools import KINDS

    patch = "*** Begin Patch\n*** Add File: x.txt\n+a\n*** End Patch"
    ti = {"command": "ls" if KINDS[tool] == "bash" else patch, "file_path": "/r/x",
          "notebook_path": "/r/x.ipynb", "path": "/r/x", "content": "",
          "url": "https://example.com/", "prompt": "see https://example.com/"}
    data = {"tool_name": tool, "tool_input": ti, "cwd": "/r"}
    call = gemini_call(data) if tool in GEMINI_TOOLS else claude_call(data)
    assert call.kind == KINDS[tool]


def test_a_planted_link_never_takes_a_call_to_another_repository(tmp_path: Path) -> None:
    """Two steps: a sandboxed command in repository A links ``sub`` to repository B;
    the agent's next call, from ``A/sub``, was judged by B's policy and queued in B's
    queue under A's path. It is refused, and neither queue holds anything."""
    import subprocess

    a, b = make_repo(tmp_path / "a"), make_repo(tmp_path / "b")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    r = subprocess.run([sys.executable, "-I", "-m", "agent_sandbox", "exec", "--settings",
                        str(a / ".sandbox/srt-settings.json"), "--", "ln", "-s", str(b), "sub"],
                       cwd=a, capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    for cmd in ("git push origin main", "ls -la"):  # escalated, and allowed, by B's policy
        p = run_hook("claude", "pre-tool-use", claude_pre(cmd, a / "sub"))
        verdict, reason = decision_of(p)
        assert verdict == "deny" and "goes through the link" in reason, p.stdout
    # the same link named as the command's own folder (Codex's workdir), from A itself
    p = run_hook("codex", "pre-tool-use", claude_pre("", a, tool_input={
        "command": "git push origin main", "workdir": "sub"}))
    verdict, reason = decision_of(p)
    assert verdict == "deny" and "goes through the link" in reason, p.stdout
    for repo in (a, b):
        assert not any((repo / ".sandbox/escalations/pending").iterdir())


def test_links_a_user_made_outside_repositories_still_lead_to_them(tmp_path: Path) -> None:
    """Controls: a link outside every repository (``~/src -> /data/src``) and a link
    inside a repository to a folder of the same repository are followed."""
    a = make_repo(tmp_path / "data" / "a")
    (a / "releases" / "v2").mkdir(parents=True)
    (a / "current").symlink_to(a / "releases" / "v2")
    (tmp_path / "alias").symlink_to(tmp_path / "data")
    for cwd in (tmp_path / "alias" / "a", a / "current"):
        p = run_hook("claude", "pre-tool-use", claude_pre("ls -la", cwd))
        assert decision_of(p)[0] == "allow", (cwd, p.stdout)
