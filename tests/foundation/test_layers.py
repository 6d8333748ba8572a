"""Monotonic layering: lower layers tighten freely; every kind of loosening is
one precise problem naming the lower place and the managed place; ``delegate``
opens exactly the keys it lists."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_sandbox.errors import SpecError
from agent_sandbox.spec.loader import load_spec
from agent_sandbox.spec.rules import Verdict

from .conftest import write

FLEET = """
    delegate: [commands.allow]
    filesystem:
      deny_read: ["~/.ssh"]
      allow_read: ["~/.ssh/known_hosts"]
      allow_write: ["~/src", /tmp]
      deny_write: ["**/.env"]
    network:
      allowed_domains: [github.com, "*.github.com", pypi.org]
      denied_domains: [evil.example.com]
    commands:
      default: escalate
      rules:
        - {pattern: "rm -rf *", verdict: deny}
    approvals:
      ttl: 30m
      approvers: [alice, bob]
    audit:
      checkpoint_every: 100
    mcp_servers:
      docs: {command: docs-mcp}
"""


@pytest.fixture
def fleet(tmp_path: Path) -> Path:
    return write(tmp_path / "fleet.yml", FLEET)


def test_tightening_is_accepted_and_merged(fleet: Path, tmp_path: Path) -> None:
    repo = write(tmp_path / "repo.yml", """
        filesystem:
          deny_read: ["~/.aws"]
          allow_write: ["~/src/app"]
        network:
          allowed_domains: [api.github.com, pypi.org]
          denied_domains: [gist.github.com]
        commands:
          default: deny
          rules:
            - {pattern: "git push *", verdict: escalate}
            - {pattern: "make test", verdict: allow}
        approvals: {ttl: 5m, approvers: [alice]}
        audit: {checkpoint_every: 10}
    """)
    spec = load_spec(str(fleet), str(repo))
    assert spec.filesystem.deny_read == ["~/.ssh", "~/.aws"]
    assert spec.filesystem.allow_write == ["~/src/app"]
    assert spec.filesystem.deny_write == ["**/.env"]
    assert spec.network.allowed_domains == ["api.github.com", "pypi.org"]
    assert spec.network.denied_domains == ["evil.example.com", "gist.github.com"]
    assert spec.commands.default is Verdict.DENY
    assert [r.pattern for r in spec.commands.rules] == ["rm -rf *", "git push *", "make test"]
    assert spec.approvals.ttl == 300
    assert spec.approvals.approvers == ["alice"]
    assert spec.audit.checkpoint_every == 10
    assert list(spec.mcp_servers) == ["docs"]


def test_lower_layer_cannot_drop_a_managed_deny(fleet: Path, tmp_path: Path) -> None:
    repo = write(tmp_path / "repo.yml", """
        filesystem:
          deny_read: []
          deny_write: []
        network:
          denied_domains: []
    """)
    spec = load_spec(str(fleet), str(repo))
    assert spec.filesystem.deny_read == ["~/.ssh"]
    assert spec.filesystem.deny_write == ["**/.env"]
    assert spec.network.denied_domains == ["evil.example.com"]


LOOSENINGS = [
    # (repo layer, key, (repo line, col), fleet place, fragment)
    ("filesystem:\n  allow_read: ['~/.ssh']\n", "filesystem.allow_read[0]", (2, 16),
     "fleet.yml:4:3", "'~/.ssh' is not covered"),
    ("filesystem:\n  allow_write: ['~/work']\n", "filesystem.allow_write[0]", (2, 17),
     "fleet.yml:5:3", "'~/work' is not covered"),
    ("network:\n  allowed_domains: [github.com, example.org]\n", "network.allowed_domains[1]",
     (2, 33), "fleet.yml:8:3", "'example.org' is not covered"),
    ("network:\n  allow_local_binding: true\n", "network.allow_local_binding", (2, 3),
     "fleet.yml:1:1 (its default)", "setting True"),
    ("network:\n  allow_all_unix_sockets: true\n", "network.allow_all_unix_sockets", (2, 3),
     "fleet.yml:1:1 (its default)", "setting True"),
    ("network:\n  allow_unix_sockets: [/run/docker.sock]\n", "network.allow_unix_sockets[0]",
     (2, 24), "fleet.yml:1:1 (its default)", "is not covered"),
    ("commands:\n  default: allow\n", "commands.default", (2, 3), "fleet.yml:11:3",
     "'allow' is looser than 'escalate'"),
    ("approvals:\n  ttl: 2h\n", "approvals.ttl", (2, 3), "fleet.yml:15:3", "larger than"),
    ("approvals:\n  single_use: false\n", "approvals.single_use", (2, 3),
     "fleet.yml:1:1 (its default)", "setting False"),
    ("approvals:\n  approvers: [mallory]\n", "approvals.approvers[0]", (2, 15),
     "fleet.yml:16:3", "'mallory' is not covered"),
    ("audit:\n  enabled: false\n", "audit.enabled", (2, 3), "fleet.yml:1:1 (its default)",
     "setting False"),
    ("audit:\n  checkpoint_every: 5000\n", "audit.checkpoint_every", (2, 3), "fleet.yml:18:3",
     "larger than"),
    ("platforms:\n  linux:\n    seccomp: false\n", "platforms.linux.seccomp", (3, 5),
     "fleet.yml:1:1 (its default)", "setting False"),
    ("agents:\n  claude:\n    hooks: false\n", "agents.claude.hooks", (3, 5),
     "fleet.yml:1:1 (its default)", "turning hooks off for claude"),
    ("agents:\n  claude: {enabled: false}\n", "agents.claude.enabled", (2, 12),
     "fleet.yml:1:1 (its default)", "turning enabled off"),
    ("agents:\n  claude:\n    extra: {permissions: {defaultMode: bypassPermissions}}\n",
     "agents.claude.extra", (3, 5), "fleet.yml:1:1 (its default)", "extra settings"),
    ("cluster:\n  gvisor: false\n", "cluster.gvisor", (2, 3), "fleet.yml:1:1 (its default)",
     "setting False"),
    ("mcp_servers:\n  shell: {command: sh}\n", "mcp_servers.shell", (2, 3), "fleet.yml:19:1",
     "MCP server 'shell'"),
    ("mcp_servers:\n  docs: {command: other-docs}\n", "mcp_servers.docs", (2, 3),
     "fleet.yml:19:1", "MCP server 'docs'"),
]


@pytest.mark.parametrize(("text", "key", "pos", "place", "fragment"), LOOSENINGS,
                         ids=[x[1] for x in LOOSENINGS])
def test_each_loosening_is_one_precise_problem(
    fleet: Path, tmp_path: Path, text: str, key: str, pos: tuple[int, int], place: str,
    fragment: str,
) -> None:
    repo = tmp_path / "repo.yml"
    repo.write_text(text, encoding="utf-8")
    with pytest.raises(SpecError) as info:
        load_spec(str(fleet), str(repo))
    problems = info.value.problems
    assert len(problems) == 1, problems
    p = problems[0]
    assert (p.file, p.line, p.column, p.key) == (str(repo), *pos, key)
    assert fragment in p.message
    assert f"{tmp_path}/{place}" in p.message
    assert "may only tighten" in p.message


def test_allow_rule_needs_delegation(tmp_path: Path) -> None:
    fleet = write(tmp_path / "fleet.yml", "commands: {default: escalate}\n")
    repo = write(tmp_path / "repo.yml", """
        commands:
          rules:
            - {pattern: "npm test", verdict: allow}
            - {pattern: "npm publish", verdict: deny}
    """)
    with pytest.raises(SpecError) as info:
        load_spec(str(fleet), str(repo))
    [p] = info.value.problems
    assert (p.line, p.key) == (3, "commands.rules[0]")
    assert "an allow rule loosens commands.allow" in p.message
    assert "delegate" in p.message


def test_delegate_opens_exactly_the_listed_keys(tmp_path: Path) -> None:
    fleet = write(tmp_path / "fleet.yml", """
        delegate: [network.allowed_domains, commands.allow]
        network: {allowed_domains: [github.com]}
        commands: {default: escalate}
    """)
    repo = write(tmp_path / "repo.yml", """
        network: {allowed_domains: [registry.npmjs.org]}
        commands:
          rules:
            - {pattern: "npm ci", verdict: allow}
    """)
    spec = load_spec(str(fleet), str(repo))
    assert spec.network.allowed_domains == ["registry.npmjs.org"]  # replaces, never joins
    assert spec.commands.rules[0].verdict is Verdict.ALLOW
    # ... and nothing else
    write(repo, "commands: {default: allow}\n")
    with pytest.raises(SpecError, match=r"commands\.default"):
        load_spec(str(fleet), str(repo))


def test_delegation_must_hold_at_every_managed_layer(tmp_path: Path) -> None:
    fleet = write(tmp_path / "fleet.yml", """
        delegate: [network.allowed_domains]
        network: {allowed_domains: [github.com, pypi.org]}
    """)
    group = write(tmp_path / "group.yml", "network: {allowed_domains: [github.com]}\n")
    host = write(tmp_path / "host.yml", "network: {allowed_domains: [github.com, pypi.org]}\n")
    with pytest.raises(SpecError) as info:
        load_spec(str(fleet), str(group), str(host))
    [p] = info.value.problems
    assert p.file == str(host) and p.key == "network.allowed_domains[1]"
    assert f"{group}:1:11" in p.message  # the group's narrower list is the one loosened


def test_wildcard_covers_subdomains_but_not_the_apex(tmp_path: Path) -> None:
    fleet = write(tmp_path / "fleet.yml", "network: {allowed_domains: ['*.github.com']}\n")
    ok = write(tmp_path / "ok.yml",
               "network: {allowed_domains: [api.github.com, '*.x.github.com']}\n")
    assert load_spec(str(fleet), str(ok)).network.allowed_domains == [
        "api.github.com", "*.x.github.com"]
    bad = write(tmp_path / "bad.yml", "network: {allowed_domains: [github.com]}\n")
    with pytest.raises(SpecError, match=r"'github\.com' is not covered"):
        load_spec(str(fleet), str(bad))


def test_problems_in_several_layers_are_all_reported(tmp_path: Path) -> None:
    a = write(tmp_path / "a.yml", "network: {allowed_domains: ['*']}\n")
    b = write(tmp_path / "b.yml", "filesystem: {deny_read: 3}\n")
    with pytest.raises(SpecError) as info:
        load_spec(str(a), str(b))
    assert sorted(p.file for p in info.value.problems) == [str(a), str(b)]


def test_loosening_above_a_broken_layer_is_still_reported(tmp_path: Path) -> None:
    fleet = write(tmp_path / "fleet.yml", "network: {allowed_domains: [github.com]}\n")
    group = write(tmp_path / "group.yml", "network: {allow_local_binding: true}\n")
    host = write(tmp_path / "host.yml", "network: {allowed_domains: ['*']}\n")
    with pytest.raises(SpecError) as info:
        load_spec(str(fleet), str(group), str(host))
    assert sorted((Path(p.file).name, p.key) for p in info.value.problems) == [
        ("group.yml", "network.allow_local_binding"),
        ("host.yml", "network.allowed_domains[0]"),
    ]


def test_agents_can_be_added_and_tightened(tmp_path: Path) -> None:
    fleet = write(tmp_path / "fleet.yml", """
        agents:
          claude: {allow_managed_hooks_only: false, extra: {model: opus}}
    """)
    repo = write(tmp_path / "repo.yml", """
        agents:
          claude: {allow_managed_hooks_only: true}
          codex: {hooks: true}
    """)
    spec = load_spec(str(fleet), str(repo))
    assert spec.enabled_agents() == ["claude", "codex"]
    assert spec.agents["claude"].allow_managed_hooks_only is True
    assert spec.agents["claude"].extra == {"model": "opus"}  # kept from above
    delegating = write(tmp_path / "delegating.yml", "delegate: [agents]\nagents: {claude: {}}\n")
    off = write(tmp_path / "off.yml", "agents: {claude: {hooks: false, extra: {a: 1}}}\n")
    spec = load_spec(str(delegating), str(off))
    assert spec.agents["claude"].hooks is False and spec.agents["claude"].extra == {"a": 1}


def test_codex_rules_files_are_imported_at_load(tmp_path: Path) -> None:
    write(tmp_path / "fleet" / "default.rules", """
        prefix_rule(pattern=["git", ["push", "reset"]], decision="prompt",
                    match=["git push origin"], justification="history needs a human")
        prefix_rule(pattern=["shutdown"], decision="forbidden")
    """)
    fleet = write(tmp_path / "fleet" / "fleet.yml", """
        commands:
          codex_rules_files: [default.rules]
          rules:
            - {pattern: "ls *", verdict: allow}
    """)
    spec = load_spec(str(fleet))
    assert spec.commands.codex_rules_files == []  # imported: the rules carry them now
    assert [(r.prefix, r.verdict, r.reason) for r in spec.commands.rules[1:]] == [
        (["git", ["push", "reset"]], Verdict.ESCALATE, "history needs a human"),
        (["shutdown"], Verdict.DENY, "from default.rules"),
    ]
    # a repository layer's relative paths start at the repository
    repo = tmp_path / "repo"
    write(repo / "team.rules", 'prefix_rule(pattern=["make", "deploy"], decision="forbidden")\n')
    layer = write(repo / ".sandbox" / "policy.yml", "commands: {codex_rules_files: [team.rules]}\n")
    spec = load_spec(str(fleet), str(layer))
    assert spec.commands.rules[-1].prefix == ["make", "deploy"]
    # ... and an imported allow rule is a loosening like any other
    write(repo / "team.rules", 'prefix_rule(pattern=["make"], decision="allow")\n')
    with pytest.raises(SpecError) as info:
        load_spec(str(fleet), str(layer))
    [p] = info.value.problems
    assert (p.file, p.line, p.key) == (str(layer), 1, "commands.rules[0]")
    assert "an allow rule loosens commands.allow" in p.message


@pytest.mark.parametrize(("rules", "fragment"), [
    (None, "cannot read Codex rules"),
    ('prefix_rule(pattern=["a"], decision="sometimes")', "decision must be"),
    ('prefix_rule(pattern=["npm"], match=["yarn install"])', "listed under match"),
])
def test_broken_codex_rules_point_at_their_entry(tmp_path: Path, rules: str | None,
                                                 fragment: str) -> None:
    if rules is not None:
        write(tmp_path / "x.rules", rules + "\n")
    spec = write(tmp_path / "spec.yml", """
        commands:
          codex_rules_files:
            - x.rules
    """)
    with pytest.raises(SpecError) as info:
        load_spec(str(spec))
    [p] = info.value.problems
    assert p.line == 3 and fragment in p.message


def _repo_stack(tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    fleet = tmp_path / "fleet.yml"
    fleet.write_text('filesystem:\n  allow_write: ["~/src"]\n')
    layer = repo / ".sandbox" / "policy.yml"
    layer.parent.mkdir(parents=True)
    layer.write_text('filesystem:\n  allow_write: ["."]\n')
    return [str(fleet), str(layer)]


def test_repository_relative_paths_are_compared_where_they_point(tmp_path, monkeypatch):
    """A repository's "." inside ~/src is covered by the fleet's ~/src."""
    spec = load_spec(*_repo_stack(tmp_path, tmp_path / "home" / "src" / "app", monkeypatch))
    assert spec.filesystem.allow_write == ["."]


def test_repository_outside_the_allowed_roots_cannot_allow_itself(tmp_path, monkeypatch):
    files = _repo_stack(tmp_path, tmp_path / "home" / "other", monkeypatch)
    with pytest.raises(SpecError) as exc:
        load_spec(*files)
    [problem] = exc.value.problems
    assert problem.key == "filesystem.allow_write[0]" and problem.line == 2
    assert "'.' is not covered" in problem.message and "fleet.yml:2:3" in problem.message


def test_init_under_a_managed_policy(tmp_path, monkeypatch):
    """`sandbox init` under a managed host policy: an inheriting starter, and a
    repository layer judged with the repository as its base."""
    from agent_sandbox import repo_init, starter_policy

    home = tmp_path / "home"
    repo = home / "src" / "app"
    repo.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    managed = tmp_path / "policy.yml"
    managed.write_text('filesystem:\n  allow_write: ["~/src"]\n')
    monkeypatch.setattr(repo_init, "MANAGED_POLICY", str(managed))
    monkeypatch.setattr(starter_policy, "MANAGED_POLICY", str(managed))
    spec = repo_init._load_spec(str(repo), ["claude"], mcp=False)
    # the starter inherits the managed layer instead of trying to widen it
    assert spec.filesystem.allow_write == ["~/src"]
    assert starter_policy.starter_policy() == starter_policy.MANAGED_STARTER_POLICY
    # a repository's own layer is still held to the managed one
    other = home / "elsewhere"
    (other / ".sandbox").mkdir(parents=True)
    (other / ".sandbox" / "policy.yml").write_text('filesystem:\n  allow_write: ["."]\n')
    with pytest.raises(SpecError, match="not covered"):
        repo_init._load_spec(str(other), ["claude"], mcp=False)
    inside = repo / ".sandbox" / "policy.yml"
    inside.parent.mkdir()
    inside.write_text('filesystem:\n  allow_write: ["."]\n')
    assert repo_init._load_spec(str(repo), ["claude"], mcp=False).filesystem.allow_write == ["."]


def test_resolved_address_ranges_only_grow_down_the_stack(tmp_path: Path) -> None:
    """``network.denied_resolved_addresses`` is a deny list: lower layers add ranges,
    and an empty list below does not drop the managed ones."""
    managed = write(tmp_path / "managed.yml", """
        network:
          allowed_domains: [github.com]
          denied_resolved_addresses: ["10.0.0.0/8"]
    """)
    repo = write(tmp_path / "repo.yml", """
        network:
          denied_resolved_addresses: ["192.168.1.10", "10.1.2.3/8"]
    """)
    spec = load_spec(str(managed), str(repo))
    assert spec.network.denied_resolved_addresses == ["10.0.0.0/8", "192.168.1.10/32"]
    empty = write(tmp_path / "empty.yml", "network:\n  denied_resolved_addresses: []\n")
    assert load_spec(str(managed), str(empty)).network.denied_resolved_addresses == [
        "10.0.0.0/8"]
    bad = write(tmp_path / "bad.yml", "network:\n  denied_resolved_addresses: [10.0.0/33]\n")
    with pytest.raises(SpecError) as err:
        load_spec(str(managed), str(bad))
    assert "network.denied_resolved_addresses" in str(err.value)
    assert "not an IP address or CIDR range" in str(err.value)


def test_triggers_add_to_the_catalogue_and_a_lower_layer_cannot_drop_one(
        tmp_path: Path) -> None:
    """An in-house tool's files (``filesystem.triggers``) are never writable: each
    becomes ``deny_write`` rules every consumer reads; a lower layer adds its own
    and keeps the fleet's, whatever it writes."""
    top = write(tmp_path / "fleet.yml", """
        filesystem:
          triggers:
            - {tool: acme-cli, files: [.acme/hooks.yml, "~/.acmerc"], fires_on: acme status}
    """)
    low = write(tmp_path / "repo.yml", """
        filesystem:
          triggers:
            - {tool: build-tool, files: [.build/init.sh]}
          deny_write: []
    """)
    spec = load_spec(str(top), str(low))
    assert [t.tool for t in spec.filesystem.triggers] == ["acme-cli", "build-tool"]
    for rule in ("**/.acme/hooks.yml", "**/.acme/hooks.yml/**", "~/.acmerc",
                 "**/.build/init.sh"):
        assert rule in spec.filesystem.deny_write, spec.filesystem.deny_write
    dropped = write(tmp_path / "drop.yml", "filesystem:\n  triggers: []\n")
    assert [t.tool for t in load_spec(str(top), str(dropped)).filesystem.triggers] == \
        ["acme-cli"]


@pytest.mark.parametrize("bad", ["../x", "/etc/x", "a/*/b", "~/../x", ""])
def test_a_triggers_files_are_plain_relative_paths(tmp_path: Path, bad: str) -> None:
    spec = write(tmp_path / "s.yml", f"""
        filesystem:
          triggers:
            - {{tool: t, files: ["{bad}"]}}
    """)
    with pytest.raises(SpecError, match="plain relative path"):
        load_spec(str(spec))


def test_run_limits_only_tighten_down_the_layers(tmp_path: Path) -> None:
    top = write(tmp_path / "fleet.yml", """
        platforms:
          linux:
            limits: {processes: 2048, memory: 8589934592}
    """)
    low = write(tmp_path / "repo.yml", """
        platforms:
          linux:
            limits: {processes: 512, file_size: 1073741824}
    """)
    lim = load_spec(str(top), str(low)).platforms.linux.limits
    assert (lim.processes, lim.memory, lim.file_size) == (512, 8 << 30, 1 << 30)
    looser = write(tmp_path / "looser.yml", """
        platforms:
          linux:
            limits: {processes: 100000}
    """)
    with pytest.raises(SpecError, match="processes"):
        load_spec(str(top), str(looser))
