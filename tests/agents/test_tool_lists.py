"""Every built-in tool a real client offers its model has a deliberate verdict.

Each client build runs once against the scripted model server, which records
the tool definitions the client sends; every name must be one the policy engine
knows (``policy/tools.py``: a kind of call it judges, or a verdict by name),
never the "unknown tool" denial that would stop an agent's planning. The builds:
the pinned Claude Code, Codex CLI and Gemini CLI, and the Claude Code that
``npm install`` gives on Debian 12's node 20 (an older release).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_sandbox.policy.tools import known

from .harness import PROMPT, ROOT, World, _start_client, client_bin
from .model_server import ModelServer, Shell

DEBIAN_NODE_CLAUDE = ROOT / ".tools" / "agents-debian-node" / "node_modules" / ".bin" / "claude"


def _argv(client: str, program: Path) -> list[str]:
    if client == "claude":
        return [str(program), "-p", PROMPT, "--output-format", "json"]
    if client == "codex":
        return [str(program), "exec", PROMPT]
    return [str(program), "-p", PROMPT, "-o", "json"]


@pytest.mark.parametrize(("client", "program"), [
    ("claude", client_bin("claude")), ("codex", client_bin("codex")),
    ("gemini", client_bin("gemini")), ("claude", DEBIAN_NODE_CLAUDE),
], ids=["claude-pinned", "codex-pinned", "gemini-pinned", "claude-debian-node"])
def test_every_tool_the_client_offers_has_a_verdict(world: World, client: str,
                                                    program: Path) -> None:
    if not program.exists():
        pytest.skip(f"{program} is not installed (make setup installs it)")
    with ModelServer([Shell("true")]) as model:
        world.configure(client, model.url)
        world.sandbox("init", str(world.repo), f"--{client}", "--trust")  # as users set it up
        _start_client(world.wrap(_argv(client, program)), cwd=world.repo,
                      env=world.env(client, model.url), timeout=240)
        names = model.tool_names()
    assert names, f"{client} offered no tools (did it reach the model server?)"
    unknown = [n for n in names if not known(n) and not n.startswith("mcp__")]
    assert not unknown, f"{program}: tools without a verdict: {unknown}"
