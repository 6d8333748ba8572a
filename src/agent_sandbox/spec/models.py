"""The spec: what agents may read, write, reach and run, and who approves the rest.

Pydantic v2 models, every object closed (unknown keys are errors). One spec file
is one *layer*; ``agent_sandbox.spec.loader`` stacks layers (fleet -> group ->
host -> repository) and checks that lower layers only tighten.

Validation here is per layer and self-contained: syntax of domains, paths and
rules, and each rule's own ``match`` / ``not_match`` examples.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    Field,
    field_validator,
    model_validator,
)

from .. import contract
from ..repo_layout import AUDIT
from . import domains, paths
from .actions import ActionEntry, ActionName
from .base import Strict, duration_field, parse_duration
from .rules import (
    RuleSyntaxError,
    ToolKind,
    Verdict,
    command_matches,
    compound_pattern,
    mcp_name_matches,
    parse_claude_rule,
    prefix_matches,
    split_argv,
)
from .schedules import Scheduled
from .triggers import Trigger
from .verify import Verify


def _allowed_domain(v: str) -> str:
    try:
        return domains.validate_pattern(v, allow_list=True)
    except domains.DomainError as exc:
        raise ValueError(str(exc)) from None


def _denied_domain(v: str) -> str:
    try:
        return domains.validate_pattern(v, allow_list=False)
    except domains.DomainError as exc:
        raise ValueError(str(exc)) from None


def _address_range(v: str) -> str:
    import ipaddress

    try:
        return str(ipaddress.ip_network(v.strip(), strict=False))
    except ValueError:
        raise ValueError(f"{v!r} is not an IP address or CIDR range (such as 10.0.0.0/8, "
                         "192.168.1.10 or fc00::/7)") from None


def _path_rule(v: str) -> str:
    try:
        return paths.validate_path_rule(v)
    except paths.PathRuleError as exc:
        raise ValueError(str(exc)) from None


def _abs_path(v: str) -> str:
    _path_rule(v)
    if not v.startswith("/"):
        raise ValueError(f"{v!r} must be an absolute path")
    return v


AllowedDomain = Annotated[str, AfterValidator(_allowed_domain)]
DeniedDomain = Annotated[str, AfterValidator(_denied_domain)]
AddressRange = Annotated[str, AfterValidator(_address_range)]
PathRule = Annotated[str, AfterValidator(_path_rule)]
AbsPath = Annotated[str, AfterValidator(_abs_path)]

class Filesystem(Strict):
    """Filesystem policy, srt's semantics."""

    deny_read: list[PathRule] = Field(
        default_factory=list, description="Paths and globs agents may not read."
    )
    allow_read: list[PathRule] = Field(
        default_factory=list,
        description="Re-allow reading inside a denied region (unless the deny is more specific).",
    )
    allow_write: list[PathRule] = Field(
        default_factory=list, description="The only places agents may write."
    )
    deny_write: list[PathRule] = Field(
        default_factory=list, description="Never writable, even under allow_write."
    )
    triggers: list[Trigger] = Field(
        default_factory=list,
        description="In-house tools that run files on their own, added to the catalogue of "
        "implicit triggers: their files are never writable (added to deny_write).")

    @model_validator(mode="after")
    def _triggers_deny_writing(self) -> Filesystem:
        for trigger in self.triggers:
            self.deny_write += [r for r in trigger.rules() if r not in self.deny_write]
        return self


class Network(Strict):
    """Network policy: a domain allowlist enforced by the proxy."""

    allowed_domains: list[AllowedDomain] = Field(
        default_factory=list,
        description="Domains agents may reach; *.example.com matches strict subdomains.",
    )
    denied_domains: list[DeniedDomain] = Field(
        default_factory=list, description="Domains refused even when allowed; '*' denies all."
    )
    denied_resolved_addresses: list[AddressRange] = Field(
        default_factory=list,
        description="Addresses and CIDR ranges an allowed name may not resolve to (the proxy "
        "refuses it), besides loopback, link-local, metadata and the host's own, which are "
        "always refused.",
    )
    allow_local_binding: bool = Field(
        default=False, description="Let sandboxed programs listen on loopback ports."
    )
    allow_unix_sockets: list[AbsPath] = Field(
        default_factory=list, description="Unix socket paths a sandboxed program may connect to."
    )
    allow_all_unix_sockets: bool = Field(
        default=False, description="Allow every unix socket (disables the seccomp socket filter)."
    )
    http_proxy_port: int | None = Field(default=None, ge=1, le=65535)
    socks_proxy_port: int | None = Field(default=None, ge=1, le=65535)


class Rule(Strict):
    """One command or tool rule.

    Give exactly one of ``pattern`` (with ``tool``), ``prefix`` (Codex argv
    prefix) or ``claude`` (a Claude Code permission string).
    """

    verdict: Verdict
    tool: ToolKind = ToolKind.BASH
    pattern: str | None = Field(default=None, description="Glob over the command, path or domain.")
    prefix: list[str | list[str]] | None = Field(
        default=None, description="Codex prefix_rule: argv prefix, a list for alternatives."
    )
    claude: str | None = Field(default=None, description="Claude Code rule, e.g. Bash(npm run *).")
    reason: str | None = None
    match: list[str] = Field(default_factory=list, description="Examples that must match.")
    not_match: list[str] = Field(default_factory=list, description="Examples that must not.")

    @model_validator(mode="after")
    def _one_form(self) -> Rule:
        given = [k for k in ("pattern", "prefix", "claude") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("a rule needs exactly one of pattern, prefix or claude")
        if self.claude is not None:
            try:
                kind, arg = parse_claude_rule(self.claude)
            except RuleSyntaxError as exc:
                raise ValueError(str(exc)) from None
            self.tool, self.pattern, self.claude = kind, arg or "*", None
        if self.prefix is not None:
            if not self.prefix or any(
                (isinstance(t, list) and not t) or t == "" for t in self.prefix
            ):
                raise ValueError("prefix must be a non-empty list of non-empty tokens")
            if self.tool is not ToolKind.BASH:
                raise ValueError("prefix rules apply to shell commands (tool: bash)")
        if (self.tool in (ToolKind.BASH, ToolKind.ANY) and self.pattern is not None
                and compound_pattern(self.pattern)
                and self.verdict in (Verdict.ALLOW, Verdict.OBSERVE)):
            raise ValueError(
                f"pattern {self.pattern!r} spans several commands (|, ;, &, newline): a "
                "deny or escalate rule may (it is matched against the whole command line), "
                "an allow or observe rule must name one simple command")
        if self.tool is ToolKind.FETCH and self.pattern not in (None, "*"):
            try:
                self.pattern = domains.validate_pattern(self.pattern or "", allow_list=False)
            except domains.DomainError as exc:
                raise ValueError(str(exc)) from None
        for ex in self.match:
            if not self.matches_example(ex):
                raise ValueError(
                    f"example {ex!r} is listed under match but the rule does not match it"
                )
        for ex in self.not_match:
            if self.matches_example(ex):
                raise ValueError(
                    f"example {ex!r} is listed under not_match but the rule matches it"
                )
        return self

    def matches_example(self, subject: str) -> bool:
        if self.prefix is not None:
            argv = split_argv(subject)
            return argv is not None and prefix_matches(self.prefix, argv)
        pat = self.pattern or "*"
        if self.tool is ToolKind.BASH:
            return command_matches(pat, subject)
        if self.tool is ToolKind.FETCH:
            if pat == "*":
                return True
            try:
                return domains.pattern_matches(pat, domains.canonical_host(subject))
            except domains.DomainError:
                return False
        if self.tool in (ToolKind.READ, ToolKind.WRITE):
            return pat == "*" or paths.covers(pat, subject)
        if self.tool is ToolKind.MCP:
            return pat == "*" or mcp_name_matches(pat, subject)
        return True


class Commands(Strict):
    """How tool calls are classified."""

    default: Verdict = Field(
        default=Verdict.ESCALATE, description="Verdict for a shell command no rule matches."
    )
    rules: list[Rule] = Field(default_factory=list)
    codex_rules_files: list[str] = Field(
        default_factory=list,
        description="Codex .rules files whose prefix_rule(...) calls are imported.",
    )


class Approvals(Strict):
    ttl: float = duration_field(1800, "How long an approval stays valid")
    wait: float = duration_field(120, "How long a hook waits for a decision before denying")
    single_use: bool = True
    approvers: list[str] = Field(
        default_factory=list, description="Users (or group:NAME) who may approve; empty: the owner."
    )
    remember_ttl: float = duration_field(
        7 * 86400, "How long an 'always allow this command' decision lasts"
    )

    @field_validator("ttl", "wait", "remember_ttl", mode="before")
    @classmethod
    def _dur(cls, v: Any) -> float:
        return parse_duration(v)


class AuditExport(Strict):
    format: Literal["ocsf", "jsonl"] = "ocsf"
    path: str | None = None


class Audit(Strict):
    enabled: bool = True
    path: str = Field(default=AUDIT, description="Log folder (per repository).")
    host_path: AbsPath = Field(
        default=contract.HOST_AUDIT_DIR,
        description="Host audit folder (root only). The proxy service keeps its own chain "
                    "in /var/log/<name>-proxy: <name> is this folder's path below /var/log, "
                    "or agent-sandbox.",
    )
    checkpoint_every: int = Field(
        default=1000, ge=1, le=10**9, description="Sign a checkpoint every N records."
    )
    checkpoint_interval: float = duration_field(60, "... or every T seconds")
    max_file_size: int = Field(default=contract.AUDIT_SEGMENT_BYTES, ge=1 << 20, le=1 << 40,
                               description="Rotate the log into a sealed segment at this size.")
    export: AuditExport = Field(default_factory=AuditExport)

    @field_validator("checkpoint_interval", mode="before")
    @classmethod
    def _dur(cls, v: Any) -> float:
        return parse_duration(v)


AgentName = Literal["claude", "codex", "cursor", "gemini", "windsurf", "vscode", "claude_desktop"]
AGENT_NAMES: tuple[str, ...] = AgentName.__args__  # type: ignore[attr-defined]


def _check_json(value: Any, where: str) -> None:
    """Values that every client's JSON and TOML can carry exactly."""
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise ValueError(f"{where}: keys must be strings")
            _check_json(v, f"{where}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _check_json(v, f"{where}[{i}]")
    elif isinstance(value, bool) or value is None or isinstance(value, str):
        return
    elif isinstance(value, int):
        if not -(2**63) <= value < 2**63:
            raise ValueError(f"{where}: integer out of the 64-bit range")
    elif isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"{where}: not a finite number")
    else:
        raise ValueError(f"{where}: unsupported value {value!r}")


class AgentOptions(Strict):
    enabled: bool = True
    hooks: bool = Field(default=True, description="Install the sandbox hooks for this client.")
    managed_settings: bool = Field(
        default=True, description="Install system-wide managed settings."
    )
    allow_managed_hooks_only: bool = Field(
        default=True, description="Claude Code: ignore hooks that are not managed."
    )
    extra: dict[str, Any] = Field(
        default_factory=dict, description="Client-specific keys merged into its settings."
    )
    version: str | None = Field(
        default=None, pattern=r"^\d+(\.\d+){0,3}$",
        description="The oldest version of this client on the hosts: keys only later "
        "versions read are written only when it does (Claude Code's onFailure: block, "
        "2.1.295 and later); sandbox init finds the installed one itself.")

    @field_validator("extra")
    @classmethod
    def _plain_json(cls, v: dict[str, Any]) -> dict[str, Any]:
        _check_json(v, "extra")
        return v


def _default_agents() -> dict[AgentName, AgentOptions]:
    return {"claude": AgentOptions()}


class McpServer(Strict):
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    url: str | None = None
    transport: Literal["stdio", "http", "sse"] | None = None
    clients: list[AgentName] | None = Field(
        default=None, description="Register only with these clients (default: all enabled)."
    )

    @model_validator(mode="after")
    def _one_kind(self) -> McpServer:
        if (self.command is None) == (self.url is None):
            raise ValueError("an MCP server needs exactly one of command (stdio) or url (remote)")
        if self.url is not None and not re.match(r"^https?://[^\s/]+", self.url):
            raise ValueError(f"url {self.url!r} must be an http(s) URL")
        if self.transport is None:
            self.transport = "stdio" if self.command else "http"
        return self


_UNIT_UNSAFE = frozenset('"\\%$\'')  # quoting, specifiers and variables in a unit's ExecStart


def _unit_path(v: str) -> str:
    _abs_path(v)
    if any(c in _UNIT_UNSAFE or not c.isprintable() for c in v):
        raise ValueError(f"{v!r}: a path a systemd unit carries may not hold quotes, "
                         "backslashes, % or $")
    return v


UnitPath = Annotated[str, AfterValidator(_unit_path)]


class LinuxWeb(Strict):
    """``sandbox serve`` as a systemd unit (``agent-sandbox-web.service``), off by default."""

    enabled: bool = Field(default=False, description="Render and run the web approvals unit.")
    user: str = Field(default="", pattern=r"^([a-z_][a-z0-9_-]{0,31})?$",
                      description="The approver account it runs as (its token file is that "
                                  "account's); required when enabled.")
    port: int = Field(default=contract.WEB_PORT, ge=1, le=65535,
                      description="The loopback port it listens on.")
    repos: list[UnitPath] = Field(default_factory=list,
                                  description="Connected repositories it serves; required "
                                              "when enabled.")

    @model_validator(mode="after")
    def _complete(self) -> LinuxWeb:
        if self.enabled and not (self.user and self.repos):
            raise ValueError("platforms.linux.web needs user and repos when enabled")
        return self


class Limits(Strict):
    """What one sandboxed run may take of the host (``runtime.limits``); unset: the
    default (4096 processes, half the host's memory, 16 GiB per file)."""

    processes: int | None = Field(default=None, ge=1, description="Processes and threads.")
    memory: int | None = Field(default=None, ge=1 << 20, description="Memory, in bytes.")
    file_size: int | None = Field(default=None, ge=1, description="Largest file, in bytes.")


class Linux(Scheduled):
    backend: Literal["bwrap", "srt", "gvisor"] = "bwrap"
    limits: Limits = Field(default_factory=Limits,
                           description="What one sandboxed run may take of the host.")
    apparmor_userns_profile: bool = Field(
        default=True, description="On Ubuntu 24.04+, install the AppArmor profile bwrap needs."
    )
    proxy_socket: AbsPath = "/run/agent-sandbox/proxy.sock"
    seccomp: bool = True
    web: LinuxWeb = Field(default_factory=LinuxWeb,
                          description="The web approvals server as a service (loopback only).")


class MacOS(Scheduled):
    allow_mach_lookup: list[str] = Field(
        default_factory=lambda: ["com.apple.trustd.agent"],
        description="Extra mach services sandboxed tools may look up.",
    )
    proxy_port: int = Field(default=3128, ge=1, le=65535)
    mdm_profile: bool = True
    allow_pty: bool = Field(
        default=False,
        description="Let sandboxed programs open pseudo-terminals (srt's allowPty).",
    )

    @field_validator("allow_mach_lookup")
    @classmethod
    def _services(cls, v: list[str]) -> list[str]:
        for name in v:
            if not re.fullmatch(r"[A-Za-z0-9._-]+", name):
                raise ValueError(f"{name!r} is not a mach service name (letters, digits, . _ -)")
        return v


class Windows(Scheduled):
    account: str = Field(default="agent-sandbox", max_length=20)
    group: str = Field(default="AgentSandboxUsers", max_length=64)
    proxy_port_range: tuple[int, int] = (60080, 60089)

    @field_validator("account", "group")
    @classmethod
    def _local_name(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9 ._-]*", v) or v.endswith("."):
            raise ValueError(f"{v!r} is not a valid local account or group name "
                             "(letters, digits, space, . _ -)")
        return v

    @field_validator("proxy_port_range")
    @classmethod
    def _range(cls, v: tuple[int, int]) -> tuple[int, int]:
        lo, hi = v
        if not (1 <= lo <= hi <= 65535):
            raise ValueError(
                "proxy_port_range must be [low, high] within 1..65535 with low <= high"
            )
        return v


class Platforms(Strict):
    linux: Linux = Field(default_factory=Linux)
    macos: MacOS = Field(default_factory=MacOS)
    windows: Windows = Field(default_factory=Windows)


class VaultRole(Strict):
    name: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]{0,62}$")]
    namespaces: list[str] = Field(min_length=1)
    rules: list[dict[str, Any]] = Field(
        default_factory=list, description="Kubernetes RBAC rules the minted credential carries."
    )
    ttl: float = 600

    @field_validator("ttl", mode="before")
    @classmethod
    def _dur(cls, v: Any) -> float:
        ttl = parse_duration(v)
        if ttl < 1:
            raise ValueError("a credential TTL must be at least 1s")
        return ttl

    @field_validator("rules")
    @classmethod
    def _some_rules(cls, v: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if not v:
            raise ValueError("a role needs at least one Kubernetes RBAC rule")
        return v


class Vault(Strict):
    address: str = "http://127.0.0.1:8200"
    kubernetes_mount: str = Field(default="kubernetes",
                                  pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9_.-]+)*$")
    roles: list[VaultRole] = Field(default_factory=list)

    @field_validator("roles")
    @classmethod
    def _unique(cls, v: list[VaultRole]) -> list[VaultRole]:
        names = [r.name for r in v]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"role {dupes[0]!r} is listed twice")
        return v


class Cluster(Strict):
    enabled: bool = False
    namespace: str = Field(default="agent-sandbox", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    gvisor: bool = True
    calico: bool = True
    api_server: list[str] = Field(default_factory=list, description="API server endpoint CIDRs.")
    allowed_cidrs: list[str] = Field(default_factory=list)
    egress_proxy: str | None = Field(default=None, description="host:port of the egress proxy.")
    runner_image: str = Field(default="localhost/agent-sandbox-runner:latest",
                              description="Image of the one-shot runner Job.")
    vault: Vault = Field(default_factory=Vault)

    @field_validator("api_server", "allowed_cidrs")
    @classmethod
    def _cidrs(cls, v: list[str]) -> list[str]:
        import ipaddress

        for item in v:
            try:
                ipaddress.ip_network(item, strict=False)
            except ValueError:
                raise ValueError(f"{item!r} is not an IP address or CIDR") from None
        return v

    @field_validator("egress_proxy")
    @classmethod
    def _proxy(cls, v: str | None) -> str | None:
        if v is None:
            return v
        m = re.fullmatch(r"(\[[0-9A-Fa-f:.]+\]|[0-9.]+|[a-z0-9]([-a-z0-9]*[a-z0-9])?"
                         r"(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+):(\d{1,5})", v)
        if not m or not 1 <= int(m.group(5)) <= 65535:
            raise ValueError(f"{v!r} must be IP:port or service.namespace[.svc...]:port")
        return v


DELEGABLE = (
    "filesystem.allow_read",
    "filesystem.allow_write",
    "network.allowed_domains",
    "network.allow_local_binding",
    "network.allow_unix_sockets",
    "network.allow_all_unix_sockets",
    "commands.allow",
    "commands.default",
    "approvals.ttl",
    "approvals.approvers",
    "audit.enabled",
    "mcp_servers",
    "agents",
    "cluster",
    "actions",
)


class Spec(Strict):
    """One layer of policy, or the merged result of a stack of layers."""

    version: Literal[1] = 1
    delegate: list[str] = Field(
        default_factory=list,
        description=(
            "Key paths lower layers may loosen (e.g. network.allowed_domains, commands.allow). "
            "Without it a lower layer can only tighten what this layer set."
        ),
    )
    filesystem: Filesystem = Field(default_factory=Filesystem)
    network: Network = Field(default_factory=Network)
    commands: Commands = Field(default_factory=Commands)
    approvals: Approvals = Field(default_factory=Approvals)
    audit: Audit = Field(default_factory=Audit)
    agents: dict[AgentName, AgentOptions] = Field(default_factory=_default_agents)
    mcp_servers: dict[
        Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")], McpServer
    ] = Field(default_factory=dict)
    platforms: Platforms = Field(default_factory=Platforms)
    cluster: Cluster = Field(default_factory=Cluster)
    actions: dict[ActionName, ActionEntry] = Field(
        default_factory=dict,
        description="Privileged infrastructure actions agents may ask to run (sandbox action).")
    verify: Verify = Field(default_factory=Verify)  # sandbox verify's waivers (spec/verify.py)

    @field_validator("delegate")
    @classmethod
    def _delegable(cls, v: list[str]) -> list[str]:
        for item in v:
            if item not in DELEGABLE:
                raise ValueError(
                    f"{item!r} cannot be delegated (choose from: {', '.join(DELEGABLE)})"
                )
        return v

    def enabled_agents(self) -> list[str]:
        return [n for n in AGENT_NAMES if n in self.agents and self.agents[n].enabled]
