"""Every built-in tool the pinned clients offer has a deliberate verdict.

The tool list is read from each installed client itself: the tools it
declares in its first request to the (scripted) model. A tool that
``policy/tools.py`` does not list fails the test, so a client upgrade that
brings a new tool cannot slip in as "unknown" (denied) or unjudged.
"""

from __future__ import annotations

import pytest

from agent_sandbox.hooks.calls import claude_call, gemini_call
from agent_sandbox.policy import tools

from .harness import CLIENTS, World
from .model_server import ModelServer


def unjudged(names: list[str]) -> list[str]:
    """Names neither the table nor our own MCP naming knows."""
    return [n for n in names if not tools.known(n) and tools.own_mcp_tool(
        n.replace(".", "__")) is None and not n.startswith("mcp__agent_sandbox")]


def test_unjudged_fires_on_a_new_tool() -> None:
    assert unjudged(["Bash", "BrandNewTool", "mcp__agent-sandbox__sandbox_status"]) == [
        "BrandNewTool"]


@pytest.mark.parametrize("client", CLIENTS)
def test_installed_client_tools_all_have_a_verdict(world: World, client: str) -> None:
    with ModelServer([]) as model:
        world.configure(client, model.url)
        world.sandbox("init", str(world.repo), f"--{client}", "--mcp", "--trust")
        proc = world.run(client, model.url)
        names = model.tool_names()
    assert len(names) >= 5, (names, proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:])
    assert unjudged(names) == [], f"{client} brings tools policy/tools.py does not judge"


@pytest.mark.parametrize("name,verdict", [
    ("mcp__agent-sandbox__sandbox_status", "allow"),
    ("mcp__agent_sandbox__check_request", "allow"),
    ("mcp_agent-sandbox_sandbox_status", "allow"),
    ("mcp__agent-sandbox__run_privileged", "escalate"),
    ("mcp__agent_sandbox__run_privileged", "escalate"),
    ("mcp__agent-sandbox__approve", None),  # not one of ours: the policy's rules decide
])
def test_own_mcp_tools_under_every_naming(name: str, verdict: str | None) -> None:
    got = tools.own_mcp_verdict(name)
    assert (got[0].value if got else None) == verdict


@pytest.mark.parametrize("tool,kind", [
    ("CronCreate", "internal"), ("SendMessage", "internal"), ("Workflow", "internal"),
    ("EnterWorktree", "internal"), ("Monitor", "bash"), ("Bash", "bash"),
    ("NoSuchTool", "unknown"),
])
def test_claude_tools_map_to_calls(tool: str, kind: str) -> None:
    ti = {"command": "ls"} if kind == "bash" else {}
    call = claude_call({"tool_name": tool, "tool_input": ti, "cwd": "/tmp"})
    assert call.kind == kind


def test_gemini_mcp_context_names_our_server() -> None:
    call = gemini_call({"tool_name": "sandbox_status", "tool_input": {}, "cwd": "/tmp",
                        "mcp_context": {"server_name": "agent-sandbox",
                                        "tool_name": "sandbox_status"}})
    assert tools.own_mcp_verdict(call.mcp_name) is not None
