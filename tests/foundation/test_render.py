"""The renderer: pure, deterministic, every example host renders, and the
agent client files match their published schemas and shapes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import jsonschema
import pytest

from agent_sandbox.fleet import FleetRenderer
from agent_sandbox.inventory import HostFacts, Inventory, User
from agent_sandbox.render import Artifact, render
from agent_sandbox.render import agents as A
from agent_sandbox.spec.loader import load_stack, parse_yaml
from agent_sandbox.spec.models import Spec

from .conftest import EXAMPLE_FLEET, REPO, load_schema


def claude_schema() -> dict:
    return load_schema("claude-code", "claude-code-settings.schema.json")


def codex_hooks_schema() -> dict:
    return load_schema("codex", "codex-hooks.schema.json")
HOSTS = list(Inventory.load(str(EXAMPLE_FLEET)))


@pytest.fixture(scope="module")
def fleet() -> FleetRenderer:
    return FleetRenderer.from_path(str(EXAMPLE_FLEET))


def spec_from(text: str) -> Spec:
    return load_stack([parse_yaml(text, "spec.yml")])


def by_kind(arts: dict[str, Artifact], kind: str) -> list[Artifact]:
    return [a for a in arts.values() if a.kind == kind]


def test_example_fleet_has_three_groups_and_every_os() -> None:
    inv = Inventory.load(str(EXAMPLE_FLEET))
    assert len(inv.hosts) >= 10
    assert {"engineering", "data_science", "ci_runners"} <= set(inv.group_order)
    assert {inv.facts(h).os for h in inv} == {"linux", "macos", "windows"}


@pytest.mark.parametrize("host", HOSTS)
def test_every_host_renders_deterministically(fleet: FleetRenderer, host: str) -> None:
    first = fleet.render_host(host)
    spec = load_stack([parse_yaml(Path(p).read_text(), p)
                       for p in fleet.inventory.layer_paths(host)])  # a fresh spec object
    second = render(spec, fleet.facts(host))
    assert list(first) == list(second)
    for target, art in first.items():
        assert second[target] == art, target
        assert os.path.isabs(target) or target[1:3] == ":/", target
    facts = fleet.facts(host)
    assert A.CLAUDE_MANAGED[facts.os] in first
    for art in first.values():
        if art.target.endswith(".json"):
            json.loads(art.content)
        elif art.target.endswith(".toml"):
            tomllib.loads(art.content.decode())


def test_fresh_processes_render_identical_bytes(tmp_path: Path) -> None:
    """Same input, same bytes, across interpreters with different hash seeds."""
    outs = []
    for seed in ("1", "2"):
        out = tmp_path / seed
        env = {**os.environ, "PYTHONHASHSEED": seed}
        subprocess.run([sys.executable, "-m", "agent_sandbox", "render", str(EXAMPLE_FLEET),
                        "--host", "dev-mac-01", "--out", str(out)],
                       check=True, env=env, capture_output=True, timeout=60)
        outs.append((out / "manifest.json").read_bytes())
    assert outs[0] == outs[1]


@pytest.mark.parametrize("host", HOSTS)
def test_claude_settings_validate_against_the_published_schema(
    fleet: FleetRenderer, host: str
) -> None:
    arts = fleet.render_host(host)
    docs = by_kind(arts, "claude-managed-settings") + by_kind(arts, "claude-settings")
    assert docs
    validator = jsonschema.Draft7Validator(claude_schema())
    for art in docs:
        errors = sorted(validator.iter_errors(json.loads(art.content)), key=str)
        assert not errors, (art.target, [e.message for e in errors[:3]])


@pytest.mark.parametrize("host", HOSTS)
def test_codex_hooks_validate_against_the_published_schema(
    fleet: FleetRenderer, host: str
) -> None:
    arts = fleet.render_host(host)
    docs = [json.loads(a.content) for a in by_kind(arts, "codex-hooks")]
    # on managed hosts the hooks live in requirements.toml ([hooks], managed-only)
    docs += [{"hooks": tomllib.loads(a.content.decode())["hooks"]}
             for a in by_kind(arts, "codex-requirements")]
    assert docs
    for d in docs:
        jsonschema.validate(d, codex_hooks_schema())


def test_the_schemas_can_fail() -> None:
    validator = jsonschema.Draft7Validator(claude_schema())
    assert list(validator.iter_errors({"permissions": {"allow": ["Teleport(x)"]}}))
    assert list(validator.iter_errors({"sandbox": {"network": {"allowedDomain": []}}}))
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"hooks": {"PreToolUse": [{"hooks": [{"type": "command"}]}]}},
                            codex_hooks_schema())


SPEC = """
filesystem:
  deny_read: ["~/.ssh", /srv/secrets, "**/.env"]
  allow_write: [., /tmp]
  deny_write: ["**/secrets/**"]
network:
  allowed_domains: [github.com, "*.npmjs.org"]
  denied_domains: [evil.example.com]
  allow_unix_sockets: [/run/user/1000/gnupg/S.gpg-agent]
commands:
  rules:
    - {claude: "Bash(npm run *)", verdict: allow}
    - {pattern: "git push *", verdict: escalate}
    - {prefix: [rm, -rf], verdict: deny}
    - {prefix: [git, [fetch, pull]], verdict: allow}
    - {claude: "Read(./.env.local)", verdict: deny}
    - {claude: "WebFetch(domain:docs.example.com)", verdict: allow}
    - {claude: "mcp__docs__search", verdict: observe}
    - {pattern: "echo (x)", verdict: deny}
approvals: {wait: 45s}
agents:
  claude: {extra: {model: opus, permissions: {defaultMode: plan}}, allow_managed_hooks_only: true}
  codex: {}
  cursor: {}
  gemini: {}
  vscode: {}
  windsurf: {}
  claude_desktop: {}
mcp_servers:
  docs: {command: /opt/docs/bin/docs-mcp, args: [--stdio], env: {LOG: "1"}}
  remote: {url: "https://mcp.example.com/mcp"}
  events: {url: "https://mcp.example.com/sse", transport: sse}
  only_vscode: {command: vs-only, clients: [vscode]}
"""

LINUX = HostFacts("dev", "linux", (User("alice", "/home/alice"),), ("/home/alice/app",),
                  python="/opt/as/venv/bin/python3")


@pytest.fixture(scope="module")
def arts() -> dict[str, Artifact]:
    return render(spec_from(SPEC), LINUX)


def doc(arts: dict[str, Artifact], target: str) -> dict:
    return json.loads(arts[target].content)


def test_claude_managed_settings(arts: dict[str, Artifact]) -> None:
    d = doc(arts, "/etc/claude-code/managed-settings.json")
    sandbox = d["sandbox"]
    assert sandbox["enabled"] is True and sandbox["allowUnsandboxedCommands"] is False
    assert sandbox["network"]["allowedDomains"] == ["github.com", "*.npmjs.org"]
    assert sandbox["network"]["deniedDomains"] == ["evil.example.com"]
    assert sandbox["network"]["allowUnixSockets"] == ["/run/user/1000/gnupg/S.gpg-agent"]
    assert sandbox["filesystem"]["denyRead"] == ["~/.ssh", "//srv/secrets", "**/.env"]
    perms = d["permissions"]
    assert perms["defaultMode"] == "plan"  # AgentOptions.extra merged in
    assert d["model"] == "opus"
    assert "Bash(npm run *)" in perms["allow"]
    assert "Bash(git fetch *)" not in perms["allow"]  # alternatives: left to the hook
    assert "WebFetch(domain:docs.example.com)" in perms["allow"]
    assert "mcp__docs__search" in perms["allow"]
    assert perms["ask"] == ["Bash(git push *)"]
    assert "Bash(rm -rf *)" in perms["deny"]
    assert "Read(./.env.local)" in perms["deny"]
    assert not any("echo (x)" in r for r in perms["deny"])  # no Claude form: hook only
    for rule in ("Read(~/.ssh)", "Read(~/.ssh/**)", "Read(//srv/secrets/**)", "Read(**/.env)",
                 "Edit(**/secrets/**)", "Edit(**/.claude/**)", "Write(**/.sandbox/**)",
                 "Edit(**/.mcp.json)"):
        assert rule in perms["deny"], rule
    assert d["allowManagedHooksOnly"] is True
    assert d["allowedMcpServers"] == [{"serverName": "docs"}, {"serverName": "events"},
                                      {"serverName": "remote"}]


def test_hooks_call_the_absolute_interpreter(arts: dict[str, Artifact]) -> None:
    py = ('"/opt/as/venv/bin/python3" -I -c '
          '"from agent_sandbox.cli.entry import hook; hook()"')
    # a call's judgement blocks when the hook itself fails (exit status 2)
    fails = (' || { s=$?; [ "$s" = 2 ] || echo "agent-sandbox: the hook failed (status $s):'
             ' the call is blocked" >&2; exit 2; }')
    claude = doc(arts, "/etc/claude-code/managed-settings.json")["hooks"]
    assert {e: claude[e][0]["hooks"][0]["command"] for e in claude} == {
        "PreToolUse": f"{py} claude pre-tool-use{fails}",
        "PostToolUse": f"{py} claude post-tool-use",
        "SessionStart": f"{py} claude session-start",
    }
    assert claude["PreToolUse"][0]["hooks"][0]["timeout"] >= 45
    codex = tomllib.loads(arts["/etc/codex/requirements.toml"].content.decode())["hooks"]
    assert codex["PreToolUse"][0]["hooks"][0]["command"] == f"{py} codex pre-tool-use{fails}"
    assert set(codex) == {"PreToolUse", "PostToolUse", "SessionStart"}
    gemini = doc(arts, "/etc/gemini-cli/settings.json")["hooks"]
    assert {e: gemini[e][0]["hooks"][0]["command"] for e in gemini} == {
        "BeforeTool": f"{py} gemini before-tool{fails}",
        "AfterTool": f"{py} gemini after-tool",
        "SessionStart": f"{py} gemini session-start",
    }
    from agent_sandbox.contract import agent_timeout, hook_deadline

    # milliseconds; beyond the hook's own deadline, so the client never times it out
    rendered = gemini["BeforeTool"][0]["hooks"][0]["timeout"]
    assert rendered == agent_timeout(45) * 1000 > hook_deadline(45) * 1000
    assert "matcher" not in gemini["BeforeTool"][0]  # a regex there; none matches every tool
    assert doc(arts, "/etc/gemini-cli/settings.json")["hooksConfig"] == {"enabled": True}
    cursor = doc(arts, "/home/alice/app/.cursor/hooks.json")
    assert cursor["version"] == 1
    assert {e: h[0]["command"] for e, h in cursor["hooks"].items()} == {
        "beforeShellExecution": f"{py} cursor before-shell-execution{fails}",
        "beforeMCPExecution": f"{py} cursor before-mcp-execution{fails}",
        "beforeReadFile": f"{py} cursor before-read-file{fails}",
    }
    # Cursor lets a call through when a hook crashes or times out (seconds), unless
    # the entry fails closed
    assert all(h[0]["failClosed"] is True and h[0]["timeout"] == agent_timeout(45)
               for h in cursor["hooks"].values())


def test_mcp_entries_in_each_clients_shape(arts: dict[str, Artifact]) -> None:
    stdio = {"command": "/opt/docs/bin/docs-mcp", "args": ["--stdio"], "env": {"LOG": "1"}}
    assert doc(arts, "/home/alice/app/.mcp.json")["mcpServers"] == {
        "docs": {"type": "stdio", **stdio},
        "events": {"type": "sse", "url": "https://mcp.example.com/sse"},
        "remote": {"type": "http", "url": "https://mcp.example.com/mcp"},
    }
    assert doc(arts, "/home/alice/app/.vscode/mcp.json") == {"servers": {
        "docs": {"type": "stdio", **stdio},
        "events": {"type": "sse", "url": "https://mcp.example.com/sse"},
        "only_vscode": {"type": "stdio", "command": "vs-only", "args": []},
        "remote": {"type": "http", "url": "https://mcp.example.com/mcp"},
    }}
    assert doc(arts, "/home/alice/.codeium/windsurf/mcp_config.json")["mcpServers"] == {
        "docs": stdio,
        "events": {"serverUrl": "https://mcp.example.com/sse"},
        "remote": {"serverUrl": "https://mcp.example.com/mcp"},
    }
    for target in ("/home/alice/.cursor/mcp.json", "/home/alice/app/.cursor/mcp.json"):
        assert doc(arts, target)["mcpServers"]["remote"] == {"url": "https://mcp.example.com/mcp"}
    assert doc(arts, "/home/alice/.config/Claude/claude_desktop_config.json") == {
        "mcpServers": {"docs": stdio}}
    gemini = doc(arts, "/home/alice/app/.gemini/settings.json")["mcpServers"]
    # trusted: a headless run has no one to confirm; the BeforeTool hook judges each call
    assert gemini["remote"] == {"httpUrl": "https://mcp.example.com/mcp", "trust": True}
    assert gemini["events"] == {"url": "https://mcp.example.com/sse", "trust": True}
    config = tomllib.loads(arts["/home/alice/.codex/config.toml"].content.decode())
    # each MCP call is approved up front: our hook, not a second prompt, decides
    assert config["mcp_servers"]["docs"] == {**stdio, "default_tools_approval_mode": "approve"}
    assert config["mcp_servers"]["remote"] == {"url": "https://mcp.example.com/mcp",
                                               "default_tools_approval_mode": "approve"}
    assert "only_vscode" not in config["mcp_servers"]
    assert config["features"]["hooks"] is True


def test_codex_requirements(arts: dict[str, Artifact]) -> None:
    art = arts["/etc/codex/requirements.toml"]
    assert art.content.startswith(b"# Managed by agent-sandbox")
    req = tomllib.loads(art.content.decode())
    # "never" (what codex exec asks for) only because the managed hooks below decide
    assert "never" in req["allowed_approval_policies"]
    assert req["allow_managed_hooks_only"] is True
    assert set(req["hooks"]) == {"PreToolUse", "PostToolUse", "SessionStart"}
    assert req["permissions"]["filesystem"]["deny_read"] == ["~/.ssh", "/srv/secrets",
                                                             "**/.env"]
    unhooked = render(spec_from("agents: {codex: {hooks: false}}"), LINUX)
    assert "never" not in tomllib.loads(
        unhooked["/etc/codex/requirements.toml"].content.decode())["allowed_approval_policies"]
    assert "danger-full-access" not in req["allowed_sandbox_modes"]
    assert req["features"] == {"hooks": True}  # users cannot switch the hooks off
    assert req["mcp_servers"] == {
        "docs": {"identity": {"command": "/opt/docs/bin/docs-mcp"}},
        "events": {"identity": {"url": "https://mcp.example.com/sse"}},
        "remote": {"identity": {"url": "https://mcp.example.com/mcp"}},
    }
    empty = render(spec_from("agents: {codex: {}}"), LINUX)["/etc/codex/requirements.toml"]
    assert tomllib.loads(empty.content.decode())["mcp_servers"] == {}  # allow none


def test_project_artifacts_are_exactly_the_repository_files() -> None:
    spec = spec_from(SPEC)
    arts = A.project_artifacts(spec, LINUX, "/work/r")
    assert sorted(a.target for a in arts) == [
        "/work/r/.claude/settings.json", "/work/r/.cursor/hooks.json", "/work/r/.cursor/mcp.json",
        "/work/r/.gemini/settings.json", "/work/r/.mcp.json", "/work/r/.vscode/mcp.json",
    ]
    project = json.loads(next(a for a in arts if a.kind == "claude-settings").content)
    assert "allowManagedHooksOnly" not in project  # managed-only key
    assert project["enableAllProjectMcpServers"] is False
    assert project["hooks"]["PreToolUse"]
    only_claude = spec_from("agents: {claude: {hooks: false}}")
    arts = A.project_artifacts(only_claude, LINUX, "/work/r")
    assert sorted(a.target for a in arts) == ["/work/r/.claude/settings.json", "/work/r/.mcp.json"]
    assert "hooks" not in json.loads(arts[0].content)


def test_disabled_agents_render_nothing() -> None:
    spec = spec_from("agents: {claude: {enabled: false}}")
    arts = render(spec, LINUX)
    assert not any(a.kind.startswith(("claude", "codex", "gemini", "cursor", "mcp"))
                   for a in arts.values())


@pytest.mark.parametrize(("os_name", "home", "targets"), [
    ("macos", "/Users/a", [
        "/Library/Application Support/ClaudeCode/managed-settings.json",
        "/Library/Application Support/GeminiCli/settings.json",
        "/Users/a/Library/Application Support/Claude/claude_desktop_config.json",
    ]),
    ("windows", "C:/Users/a", [
        "C:/Program Files/ClaudeCode/managed-settings.json",
        "C:/ProgramData/gemini-cli/settings.json",
        "C:/Users/a/AppData/Roaming/Claude/claude_desktop_config.json",
        "C:/Users/a/.codex/config.toml",
    ]),
    ("linux", "/home/a", [
        "/etc/claude-code/managed-settings.json", "/etc/gemini-cli/settings.json",
        "/etc/codex/requirements.toml", "/home/a/.config/Claude/claude_desktop_config.json",
    ]),
])
def test_per_os_paths(os_name: str, home: str, targets: list[str]) -> None:
    facts = HostFacts("h", os_name, (User("a", home),), ())  # type: ignore[arg-type]
    arts = render(spec_from(SPEC), facts)
    for t in targets:
        assert t in arts, (t, sorted(arts))
    if os_name == "windows":
        hook = doc(arts, "C:/Program Files/ClaudeCode/managed-settings.json")["hooks"]
        assert hook["PreToolUse"][0]["hooks"][0]["command"].startswith(
            '"C:/Program Files/agent-sandbox/venv/Scripts/python.exe" -I -c "from agent_sandbox')


def test_cache_never_leaks_between_specs() -> None:
    a = render(spec_from("network: {allowed_domains: [a.example.com]}"), LINUX)
    b = render(spec_from("network: {allowed_domains: [b.example.com]}"), LINUX)
    target = "/etc/claude-code/managed-settings.json"
    assert b"a.example.com" in a[target].content and b"b.example.com" in b[target].content
    other = HostFacts("x", "linux", (), ("/r",), python="/other/python")
    c = render(spec_from("{}"), other)
    assert b'\\"/other/python\\" -I' in c["/r/.claude/settings.json"].content


def test_render_is_pure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No environment, clock or working directory leaks into the bytes."""
    spec = spec_from(SPEC)
    before = {t: a.content for t, a in render(spec, LINUX).items()}
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", "/nowhere")
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    after = {t: a.content for t, a in render(spec_from(SPEC), LINUX).items()}
    assert before == after
    assert not list(tmp_path.iterdir())


def test_make_demo_inventory_is_the_documented_one() -> None:
    assert (REPO / "inventories" / "example-fleet" / "hosts.yml").is_file()


def test_each_claude_rule_lands_in_its_strictest_list() -> None:
    spec = spec_from("""
commands:
  rules:
    - {pattern: "git push *", verdict: escalate}
    - {pattern: "git push *", verdict: deny}
    - {pattern: "make", verdict: allow}
    - {pattern: "make", verdict: escalate}
""")
    perms = A.claude_permissions(spec)
    assert "Bash(git push *)" in perms["deny"] and "Bash(git push *)" not in perms["ask"]
    assert perms["ask"] == ["Bash(make)"] and perms["allow"] == []


@pytest.mark.parametrize(("os_name", "target"), [
    ("linux", "/etc/agent-sandbox/policy.json"), ("macos", "/etc/agent-sandbox/policy.json"),
    ("windows", "C:/ProgramData/agent-sandbox/policy.json"),
])
def test_every_os_gets_the_policy_the_hooks_read(os_name: str, target: str) -> None:
    spec = spec_from(SPEC)
    arts = render(spec, HostFacts("h", os_name, (), ()))  # type: ignore[arg-type]
    policy = json.loads(arts[target].content)
    assert policy["network"]["allowed_domains"] == ["github.com", "*.npmjs.org"]
    assert Spec.model_validate(policy) == spec  # the document is the effective spec


def test_resolved_address_ranges_reach_the_proxy_settings_only() -> None:
    """The spec's ``denied_resolved_addresses`` is srt's ``deniedResolvedAddresses`` in
    the settings every proxy reads (Linux and macOS), and not in Claude Code's sandbox
    block, whose schema has no such key."""
    from agent_sandbox.render.srt import srt_settings
    from agent_sandbox.runtime.settings import parse

    spec = spec_from("network:\n  allowed_domains: [github.com]\n"
                     "  denied_resolved_addresses: [10.0.0.0/8, fc00::/7]\n")
    doc = srt_settings(spec)
    assert doc["network"]["deniedResolvedAddresses"] == ["10.0.0.0/8", "fc00::/7"]
    assert parse(doc).network.denied_addresses == ("10.0.0.0/8", "fc00::/7")
    claude = A.claude_settings(spec, HostFacts("h", "linux", (User("u", "/home/u"),), ()),
                               managed=True)
    assert "deniedResolvedAddresses" not in json.dumps(claude)
    assert not list(jsonschema.Draft7Validator(claude_schema()).iter_errors(claude))
    assert "deniedResolvedAddresses" not in srt_settings(spec_from("network: {}\n"))["network"]
