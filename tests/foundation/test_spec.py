"""Spec validation: every key family, domain and path rules, rule examples,
Claude Code and Codex rule import. Each bad spec must give a SpecError whose
problem names the right key and line."""

from __future__ import annotations

import json
import textwrap

import pytest

from agent_sandbox.errors import SpecError
from agent_sandbox.spec.loader import load_stack, parse_yaml
from agent_sandbox.spec.models import Spec
from agent_sandbox.spec.rules import (
    RuleSyntaxError,
    ToolKind,
    Verdict,
    parse_claude_rule,
    parse_codex_rules,
)


def load(text: str, source: str = "spec.yml") -> Spec:
    return load_stack([parse_yaml(textwrap.dedent(text).lstrip("\n"), source)])


def problems(text: str) -> list[tuple[int, str, str]]:
    with pytest.raises(SpecError) as info:
        load(text)
    return [(p.line, p.key, p.message) for p in info.value.problems]


def test_empty_spec_gets_safe_defaults() -> None:
    spec = load("")
    assert spec.commands.default is Verdict.ESCALATE
    assert spec.network.allowed_domains == []
    assert spec.network.allow_local_binding is False
    assert spec.approvals.single_use is True
    assert spec.enabled_agents() == ["claude"]


def test_every_key_family_loads() -> None:
    spec = load("""
        version: 1
        delegate: [commands.allow, network.allowed_domains]
        filesystem:
          deny_read: ["~/.ssh", "**/.env"]
          allow_read: ["~/.ssh/known_hosts"]
          allow_write: [".", "/tmp"]
          deny_write: ["**/secrets/**"]
        network:
          allowed_domains: [github.com, "*.npmjs.org", "10.0.0.1"]
          denied_domains: ["*"]
          allow_local_binding: true
          allow_unix_sockets: [/run/docker.sock]
          http_proxy_port: 3128
        commands:
          default: deny
          codex_rules_files: [default.rules]
          rules:
            - {pattern: "npm test", verdict: allow}
        approvals: {ttl: 15m, wait: 90s, single_use: true, approvers: [alice, "group:sec"]}
        audit:
          checkpoint_every: 10
          checkpoint_interval: 2m
          export: {format: ocsf, path: /var/log/sandbox.ocsf}
        agents:
          claude: {allow_managed_hooks_only: false, extra: {model: opus}}
          codex: {hooks: false}
          cursor: {enabled: false}
        mcp_servers:
          local: {command: /usr/bin/mcp-local, args: [--stdio], env: {A: "1"}}
          remote: {url: "https://mcp.example.com/mcp", clients: [claude, vscode]}
        platforms:
          linux: {backend: srt, seccomp: true}
          macos: {proxy_port: 8080}
          windows: {account: agents, proxy_port_range: [60000, 60010]}
        cluster:
          enabled: true
          namespace: agents
          vault:
            roles:
              - {name: deploy, namespaces: [prod], ttl: 5m}
    """)
    assert spec.filesystem.allow_read == ["~/.ssh/known_hosts"]
    assert spec.network.allowed_domains == ["github.com", "*.npmjs.org", "10.0.0.1"]
    assert spec.commands.default is Verdict.DENY
    assert spec.approvals.ttl == 900 and spec.approvals.wait == 90
    assert spec.audit.checkpoint_interval == 120
    assert spec.enabled_agents() == ["claude", "codex"]
    assert spec.mcp_servers["remote"].transport == "http"
    assert spec.mcp_servers["local"].transport == "stdio"
    assert spec.platforms.windows.proxy_port_range == (60000, 60010)
    assert spec.cluster.vault.roles[0].ttl == 300


@pytest.mark.parametrize(
    ("domain", "fragment"),
    [
        ("https://github.com", "no scheme"),
        ("github.com/org", "no path"),
        ("*", "every domain"),
        ("*.com", "too broad"),
        ("git*hub.com", "leading '*.'"),
        ("github.com:443", "no port"),
        ("exa mple.com", "control character or space"),
        ("-bad-.com", "invalid label"),
        ("localdomain", "at least one dot"),
    ],
)
def test_bad_allowed_domain_is_refused_with_its_line(domain: str, fragment: str) -> None:
    found = problems(f"""
        network:
          allowed_domains:
            - github.com
            - {domain!r}
    """)
    assert len(found) == 1
    line, key, message = found[0]
    assert (line, key) == (4, "network.allowed_domains[1]")
    assert fragment in message


def test_domains_are_canonicalised() -> None:
    spec = load("""
        network:
          allowed_domains: ["GitHub.COM.", "0x7f000001", "[::ffff:10.0.0.1]", "*.Example.org"]
          denied_domains: ["*"]
    """)
    assert spec.network.allowed_domains == ["github.com", "127.0.0.1", "10.0.0.1", "*.example.org"]
    assert spec.network.denied_domains == ["*"]


@pytest.mark.parametrize(
    ("entry", "fragment"),
    [("~bob/.ssh", "only '~'"), (" /tmp", "white space"), ("", "empty path")],
)
def test_bad_path_rules(entry: str, fragment: str) -> None:
    found = problems(f"""
        filesystem:
          deny_read: [{entry!r}]
    """)
    assert found[0][1] == "filesystem.deny_read[0]"
    assert fragment in found[0][2]


def test_unix_socket_paths_must_be_absolute() -> None:
    found = problems("""
        network:
          allow_unix_sockets: [run/docker.sock]
    """)
    assert found == [(2, "network.allow_unix_sockets[0]",
                      "'run/docker.sock' must be an absolute path")]


def test_rule_examples_are_checked_at_load() -> None:
    found = problems("""
        commands:
          rules:
            - pattern: "npm run *"
              verdict: allow
              match: ["npm run build", "npm install"]
            - prefix: [git, [log, diff]]
              verdict: allow
              not_match: ["git log -1"]
    """)
    assert [(line, key) for line, key, _ in found] == [
        (3, "commands.rules[0]"), (6, "commands.rules[1]"),
    ]
    assert "'npm install' is listed under match" in found[0][2]
    assert "'git log -1' is listed under not_match" in found[1][2]


def test_rule_needs_exactly_one_form() -> None:
    found = problems("""
        commands:
          rules:
            - {verdict: deny}
            - {pattern: x, prefix: [x], verdict: deny}
    """)
    assert len(found) == 2
    assert all("exactly one of pattern, prefix or claude" in m for _, _, m in found)


def test_bad_verdict_and_tool_are_named() -> None:
    found = problems("""
        commands:
          rules:
            - {pattern: "ls", verdict: maybe}
            - {pattern: "ls", verdict: allow, tool: teleport}
    """)
    keys = sorted(k for _, k, _ in found)
    assert keys == ["commands.rules[0].verdict", "commands.rules[1].tool"]


def test_claude_rules_are_imported() -> None:
    spec = load("""
        commands:
          rules:
            - claude: "Bash(npm run *)"
              verdict: allow
              match: ["npm run test"]
              not_match: ["npm ci"]
            - {claude: "Read(./.env)", verdict: deny}
            - {claude: "WebFetch(domain:Docs.Example.com)", verdict: allow,
               match: [docs.example.com]}
            - {claude: "Bash(git commit:*)", verdict: escalate, match: ["git commit -m x"]}
            - {claude: "mcp__github__create_issue", verdict: escalate}
            - {claude: "Edit", verdict: escalate}
    """)
    got = [(r.tool, r.pattern, r.verdict) for r in spec.commands.rules]
    assert got == [
        (ToolKind.BASH, "npm run *", Verdict.ALLOW),
        (ToolKind.READ, "./.env", Verdict.DENY),
        (ToolKind.FETCH, "docs.example.com", Verdict.ALLOW),
        (ToolKind.BASH, "git commit *", Verdict.ESCALATE),
        (ToolKind.MCP, "mcp__github__create_issue", Verdict.ESCALATE),
        (ToolKind.WRITE, "*", Verdict.ESCALATE),
    ]


@pytest.mark.parametrize(
    ("rule", "fragment"),
    [
        ("Teleport(x)", "unknown tool"),
        ("WebFetch(https://x.com)", "domain:NAME"),
        ("Bash(ls", "expected Tool or Tool(specifier)"),
        ("mcp__bad server", "mcp__server"),
        ("", "empty"),
    ],
)
def test_bad_claude_rules(rule: str, fragment: str) -> None:
    with pytest.raises(RuleSyntaxError) as info:
        parse_claude_rule(rule)
    assert fragment in str(info.value)
    found = problems(f"""
        commands:
          rules:
            - {{claude: {rule!r}, verdict: deny}}
    """)
    assert found[0][0] == 3 and found[0][1] == "commands.rules[0]"
    assert fragment in found[0][2]


def test_codex_prefix_rules_are_imported_and_checked() -> None:
    source = textwrap.dedent('''
        prefix_rule(
            pattern = ["git", ["push", "fetch"]],
            decision = "prompt",
            justification = "talks to the remote",
            match = [["git", "push", "origin"], "git fetch"],
            not_match = ["git status"],
        )
        prefix_rule(pattern = ["rm", "-rf"], decision = "forbidden")
        prefix_rule(pattern = ["cargo", "test"])
    ''')
    raw = parse_codex_rules(source, "default.rules")
    assert raw[0] == {
        "prefix": ["git", ["push", "fetch"]], "verdict": "escalate",
        "reason": "talks to the remote", "match": ["git push origin", "git fetch"],
        "not_match": ["git status"],
    }
    assert [r["verdict"] for r in raw] == ["escalate", "deny", "allow"]
    spec = Spec.model_validate({"commands": {"rules": raw}})
    assert spec.commands.rules[1].matches_example("rm -rf /")
    assert not spec.commands.rules[2].matches_example("cargo build")


@pytest.mark.parametrize(
    ("source", "fragment"),
    [
        ('prefix_rule(pattern = ["a"], decision = "maybe")', "decision must be"),
        ("prefix_rule(decision = 'allow')", "needs pattern"),
        ("prefix_rule(pattern = [open('/etc/passwd')])", "must be literals"),
        ("prefix_rule(pattern = [", "default.rules:1"),
    ],
)
def test_bad_codex_rules(source: str, fragment: str) -> None:
    with pytest.raises(RuleSyntaxError) as info:
        parse_codex_rules(source, "default.rules")
    assert fragment in str(info.value)


def test_codex_rule_with_wrong_example_fails_at_load() -> None:
    raw = parse_codex_rules('prefix_rule(pattern=["npm"], match=["yarn install"])')
    with pytest.raises(ValueError, match="listed under match"):
        Spec.model_validate({"commands": {"rules": raw}})


@pytest.mark.parametrize(
    ("text", "key", "fragment"),
    [
        ("approvals: {ttl: -5}", "approvals.ttl", "negative"),
        ("approvals: {wait: soon}", "approvals.wait", "duration"),
        ("audit: {checkpoint_every: 0}", "audit.checkpoint_every", "greater than or equal to 1"),
        ("audit: {export: {format: csv}}", "audit.export.format", "'ocsf'"),
        ("audit: {host_path: var/log}", "audit.host_path", "absolute"),
        ("agents: {emacs: {}}", "agents.emacs", ""),
        ("agents: {claude: {hooks: sometimes}}", "agents.claude.hooks", "boolean"),
        ("mcp_servers: {x: {}}", "mcp_servers.x", "exactly one of command"),
        ("mcp_servers: {x: {url: 'ftp://a'}}", "mcp_servers.x", "http(s) URL"),
        ("mcp_servers: {'bad name': {command: a}}", "mcp_servers.bad name", "pattern"),
        ("platforms: {linux: {backend: docker}}", "platforms.linux.backend", "'bwrap'"),
        ("platforms: {windows: {proxy_port_range: [9, 1]}}",
         "platforms.windows.proxy_port_range", "low <= high"),
        ("cluster: {namespace: Bad_NS}", "cluster.namespace", "pattern"),
        ("cluster: {vault: {roles: [{name: r, namespaces: []}]}}",
         "cluster.vault.roles[0].namespaces", "at least 1"),
        ("delegate: [filesystem.deny_read]", "delegate", "cannot be delegated"),
        ("version: 2", "version", "1"),
        ("network: {http_proxy_port: 70000}", "network.http_proxy_port", "65535"),
        ("commands: {default: sometimes}", "commands.default", "'allow'"),
    ],
)
def test_each_family_rejects_bad_values(text: str, key: str, fragment: str) -> None:
    found = problems(text)
    assert any(k == key and fragment in m for _, k, m in found), found
    assert all(line == 1 for line, _, _ in found)


def test_unknown_keys_are_named_at_every_level() -> None:
    found = problems("""
        filesystm: {}
        network:
          allowed_domain: [a.com]
        agents:
          claude: {hookz: true}
    """)
    assert sorted((line, key, m) for line, key, m in found) == [
        (1, "filesystm", "unknown key"),
        (3, "network.allowed_domain", "unknown key"),
        (5, "agents.claude.hookz", "unknown key"),
    ]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("a: [1, 2", "invalid YAML"),
        ("- just\n- a list\n", "must be a mapping"),
        ("a: 1\n---\nb: 2\n", "one YAML document"),
        ("a: 1\na: 2\n", "duplicate key"),
        ("base: &b {x: 1}\nnetwork:\n  <<: *b\n", "merge keys"),
        ("? [a, b]\n: c\n", "plain scalars"),
        ("x: !!python/object:os.system echo\n", "invalid YAML"),
    ],
)
def test_malformed_yaml_is_a_spec_error(text: str, fragment: str) -> None:
    with pytest.raises(SpecError) as info:
        load(text)
    assert any(fragment in p.message for p in info.value.problems), info.value.problems


def test_alias_bomb_is_refused() -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 8):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    with pytest.raises(SpecError) as info:
        load("\n".join(lines))
    assert "more than" in str(info.value)


def test_every_problem_is_reported_at_once() -> None:
    found = problems("""
        network:
          allowed_domains: ["*"]
        filesystem:
          deny_read: 5
        approvals:
          ttl: later
    """)
    assert [line for line, _, _ in found] == [2, 4, 6]


def test_keys_cannot_forge_report_lines() -> None:
    found = problems('agents:\n  "evil\\nspec.yml:9:9: ok: fine": {}\n  "\\x1e": {}\n')
    for _, key, _ in found:
        assert "\n" not in key and "\x1e" not in key
    assert {k for _, k, _ in found} >= {'agents."evil\\nspec.yml:9:9: ok: fine"',
                                        'agents."\\u001e"'}


@pytest.mark.parametrize("entry", ['/Users/u/wo"rk', "/tmp/a\nb", "/tmp/\x1b[31m"])
def test_paths_that_no_backend_can_express_are_refused(entry: str) -> None:
    found = problems(f"filesystem:\n  allow_write: [{json.dumps(entry)}]\n")
    assert found[0][:2] == (2, "filesystem.allow_write[0]")


def test_problem_is_an_immutable_value() -> None:
    """Problems are compared, hashed, sorted into errors and copied as values."""
    import copy
    import pickle

    from agent_sandbox.errors import Problem, SpecError

    p = Problem("spec.yaml", 3, 5, "network.allow", "not a domain")
    same = Problem("spec.yaml", 3, 5, "network.allow", "not a domain")
    assert p == same and hash(p) == hash(same) and len({p, same}) == 1
    assert p != Problem("spec.yaml", 4, 5, "network.allow", "not a domain")
    assert p != ("spec.yaml", 3, 5, "network.allow", "not a domain")
    assert copy.deepcopy(p) == p and pickle.loads(pickle.dumps(p)) == p
    with pytest.raises(AttributeError):
        p.line = 9  # type: ignore[misc]
    assert str(p) == "spec.yaml:3:5: network.allow: not a domain"
    assert str(Problem("s", 1, 1, "", "empty")) == "s:1:1: <document>: empty"
    err = SpecError([p, Problem("base.yaml", 1, 1, "k", "x")])  # sorted by place
    assert err.problems[1] is p and str(err).startswith("base.yaml:1:1: k: x\n")
