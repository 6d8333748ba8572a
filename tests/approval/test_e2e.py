"""End to end: a real hook subprocess fed real Claude Code PreToolUse JSON, a
real approver process (``sandbox watch`` on a pseudo-terminal, and ``sandbox
approve``), the command run by the real sandbox; the same over a real MCP stdio
session with the SDK client."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from .conftest import claude_pre, decision_of, make_repo
from .watch_pty import ENV, Watch


def start_hook(payload: dict[str, object]) -> subprocess.Popen[bytes]:
    p = subprocess.Popen([sys.executable, "-I", "-m", "agent_sandbox", "hook", "claude",
                          "pre-tool-use"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=ENV)
    assert p.stdin
    p.stdin.write(json.dumps(payload).encode())
    p.stdin.close()
    p.stdin = None
    return p


def wait_pending(repo: Path, n: int = 1, timeout: float = 20) -> list[Path]:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        files = sorted((repo / ".sandbox/escalations/pending").glob("*.json"))
        if len(files) >= n:
            return files
        time.sleep(0.02)
    raise AssertionError("no pending request appeared")


def test_hook_escalation_approved_in_watch_runs_in_the_sandbox(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    watch = Watch(repo)
    try:
        watch.expect("0 pending")
        hook = start_hook(claude_pre("echo from-the-sandbox; id -u; touch approved.txt; exit 7",
                                     repo))
        watch.expect("from-the-sandbox")                 # the exact command is shown
        watch.expect("1 pending")
        watch.press("a")                                 # after a human's look (SETTLE)
        out, err = hook.communicate(timeout=60)
        assert hook.returncode == 0, err
        verdict, reason = decision_of(subprocess.CompletedProcess([], 0, out, err))
        assert verdict == "deny"                        # the tool itself never runs
        assert "exit status: 7" in reason and "from-the-sandbox" in reason, watch.text()
        assert (repo / "approved.txt").exists()         # it ran, once, in the repository
        watch.expect("approved ")
    finally:
        watch.close()
    done = [json.loads(p.read_text()) for p in (repo / ".sandbox/escalations/done").iterdir()]
    assert [d["status"] for d in done] == ["completed"]
    log = [json.loads(line) for line in (repo / ".sandbox/audit/audit.jsonl").read_text()
           .splitlines()]
    rid = done[0]["id"]
    events = [r["event"] for r in log if r.get("request_id") == rid]
    for ev in ("request", "decision", "escalation", "approval", "sandbox_started", "completed"):
        assert ev in events, events


def test_hook_escalation_denied_with_reason(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    hook = start_hook(claude_pre("make deploy", repo))
    rid = wait_pending(repo)[0].stem
    p = subprocess.run([sys.executable, "-I", "-m", "agent_sandbox", "deny", str(repo), rid,
                        "--reason", "not on a Friday"], capture_output=True, text=True, env=ENV,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    out, _ = hook.communicate(timeout=30)
    verdict, reason = decision_of(subprocess.CompletedProcess([], 0, out, b""))
    assert verdict == "deny" and "not on a Friday" in reason
    # a late approval of the same request is refused
    p = subprocess.run([sys.executable, "-I", "-m", "agent_sandbox", "approve", str(repo), rid],
                       capture_output=True, text=True, env=ENV, timeout=60)
    assert p.returncode == 1 and "already" in p.stderr


def test_always_allow_is_remembered_for_that_exact_command(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    hook = start_hook(claude_pre("make lint", repo))
    rid = wait_pending(repo)[0].stem
    p = subprocess.run([sys.executable, "-I", "-m", "agent_sandbox", "approve", str(repo), rid,
                        "--always"], capture_output=True, text=True, env=ENV, timeout=60)
    assert p.returncode == 0, p.stderr
    hook.communicate(timeout=60)
    from .conftest import run_hook

    # approved again without a human (the tree is the one the approval saw), and run by
    # agent-sandbox pinned to it: the hook answers with the result, the tool never runs
    verdict, reason = decision_of(run_hook("claude", "pre-tool-use", claude_pre("make lint",
                                                                                repo)))
    assert verdict == "deny" and "Approved by remembered approval" in reason, reason
    again = start_hook(claude_pre("make lint --fix", repo))
    wait_pending(repo)
    again.kill()
    again.wait()


def test_mcp_stdio_session(tmp_path: Path) -> None:
    import anyio
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    repo = make_repo(tmp_path / "repo")
    approver = subprocess.Popen(
        [sys.executable, "-c", (
            "import sys,time,subprocess,glob,os\n"
            "repo=sys.argv[1]\n"
            "seen=set()\n"
            "end=time.time()+60\n"
            "while time.time()<end and len(seen)<2:\n"
            "    for f in sorted(glob.glob(repo+'/.sandbox/escalations/pending/*.json')):\n"
            "        rid=os.path.basename(f)[:-5]\n"
            "        if rid in seen: continue\n"
            "        seen.add(rid)\n"
            "        time.sleep(1.5 if len(seen)==2 else 0)\n"
            "        subprocess.run([sys.executable,'-I','-m','agent_sandbox','approve',\n"
            "                        repo,rid])\n"
            "    time.sleep(0.05)\n"), str(repo)], env=ENV)

    async def session() -> None:
        params = StdioServerParameters(command=sys.executable,
                                       args=["-I", "-m", "agent_sandbox", "mcp", str(repo)],
                                       env=ENV)
        async with stdio_client(params) as (r, w), ClientSession(r, w) as s:
            await s.initialize()
            names = {t.name for t in (await s.list_tools()).tools}
            assert names == {"run_privileged", "check_request", "sandbox_status",
                             "list_actions", "run_action"}
            res = await s.call_tool("run_privileged", {"command": "ls -a"})
            assert "exit status: 0" in res.content[0].text and ".sandbox" in res.content[0].text
            res = await s.call_tool("run_privileged", {"command": "rm -rf /tmp/x"})
            assert res.content[0].text.startswith("denied by policy")
            # approved while we wait
            res = await s.call_tool("run_privileged",
                                    {"command":
                                     "touch mcp.txt; echo via-mcp > mcp.txt; cat mcp.txt",
                                     "wait_seconds": 30})
            text = res.content[0].text
            assert "via-mcp" in text and "exit status: 0" in text, text
            # a short wait returns the id; check_request follows it to the result
            res = await s.call_tool("run_privileged", {"command": "make slow-approval",
                                                       "wait_seconds": 0.2})
            text = res.content[0].text
            assert "check_request" in text
            rid = text.split("request ")[1].split(" ")[0]
            res = await s.call_tool("check_request", {"request_id": rid, "wait_seconds": 30})
            assert f"request {rid}" in res.content[0].text
            assert "exit status: 2" in res.content[0].text   # make: no rule to make target
            status = json.loads((await s.call_tool("sandbox_status", {})).content[0].text)
            assert status["queue"]["done"] == 2
            res = await s.call_tool("check_request", {"request_id": "../../etc/passwd"})
            assert res.content[0].text.startswith("refused")

    try:
        anyio.run(session)
    finally:
        approver.wait(60)
    assert (repo / "mcp.txt").read_text() == "via-mcp\n"
