"""What each agent client needs to run inside ``sandbox exec`` (``sandbox agent``).

For Claude Code, Codex CLI and Gemini CLI: the program's name, the model API
hosts it must reach, and the parts of its own state folder it writes while it
works (sessions, logs, caches, history). ``agent_settings`` adds exactly these
to a run's srt settings and nothing else:

- the API hosts go into ``allowedDomains`` for this run (a host the settings
  deny stays denied: ``deniedDomains`` wins in the proxy, so a fleet that
  forbids a client's API forbids the client);
- the state entries go into ``allowWrite``; the client's settings, hooks,
  policies, trust lists and MCP configuration stay read-only: they are not in
  the lists below, the protected set (``agent_sandbox.protected``) keeps them
  read-only in every sandbox, and ``denyWrite`` names them again so that a
  writable state folder never makes them writable.

Pure but for ``is_wrapper``: no policy of its own beyond these lists. It never loosens a
deny of the settings it is given.
"""

from __future__ import annotations

from agent_sandbox.errors import SandboxError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .settings import Settings


# The line that marks the wrapper scripts the roles install (``render.agents``):
# a program carrying it is never taken for the client itself.
WRAPPER_MARK = b"# agent-sandbox wrapper: runs the client through `sandbox agent`"


def is_wrapper(path: str) -> bool:
    """Whether ``path`` is one of our wrapper scripts (reads its first bytes)."""
    try:
        with open(path, "rb") as fh:
            return WRAPPER_MARK in fh.read(512)
    except OSError:
        return False


class AgentProfileError(SandboxError, ValueError):
    """An unknown client, or an endpoint that cannot be used."""


class Profile:
    """One client (a plain class: no dataclass import on the CLI's start)."""

    __slots__ = ("api_hosts", "base_url_env", "config_files", "name", "program", "state_dir",
                 "state_writes")

    @property
    def state_dirs(self) -> tuple[str, ...]:
        """The folders among ``state_writes`` (created before the sandbox starts)."""
        return tuple(w.rstrip("/") for w in self.state_writes if w.endswith("/"))

    def __init__(self, name: str, program: str, state_dir: str, api_hosts: tuple[str, ...],
                 state_writes: tuple[str, ...], config_files: tuple[str, ...],
                 base_url_env: str = "") -> None:
        self.name, self.program, self.state_dir = name, program, state_dir
        # the client's own variable for its model API's address: when the user who
        # starts ``sandbox agent`` has set it, that endpoint is the run's endpoint
        self.base_url_env = base_url_env
        self.api_hosts, self.state_writes, self.config_files = (api_hosts, state_writes,
                                                                config_files)


# state_writes and config_files are relative to the home folder (a folder ends
# in /). The clients write their state by atomic rename (a temporary file beside
# the target), so the state folder itself must be writable; everything in it
# that decides what the client does next time (settings, hooks, policies, trust,
# MCP servers, extensions, commands, agents, instructions, environment files,
# credentials) is in config_files and stays read-only. An absent one is created
# first as what its absence means (an empty folder, ``{}``, an empty file) so a
# read-only mount can hold its name, and removed after the run if still so
# (``held_config``).
PROFILES: dict[str, Profile] = {
    "claude": Profile(
        "claude", "claude", ".claude",
        api_hosts=("api.anthropic.com", "statsig.anthropic.com"),
        state_writes=(".claude/", ".cache/claude-cli-nodejs/"),
        config_files=(".claude/settings.json", ".claude/settings.local.json",
                      ".claude.json", ".claude/CLAUDE.md", ".claude/agents/",
                      ".claude/commands/", ".claude/hooks/", ".claude/plugins/",
                      ".claude/skills/", ".claude/output-styles/", ".claude/.credentials.json",
                      ".claude/managed-settings.json", ".claude/.mcp.json"),
        base_url_env="ANTHROPIC_BASE_URL"),
    "codex": Profile(
        "codex", "codex", ".codex",
        api_hosts=("api.openai.com", "chatgpt.com"),
        state_writes=(".codex/",),
        config_files=(".codex/config.toml", ".codex/hooks.json", ".codex/requirements.toml",
                      ".codex/managed_config.toml", ".codex/auth.json", ".codex/rules/",
                      ".codex/AGENTS.md", ".codex/AGENTS.override.md", ".codex/prompts/",
                      ".codex/skills/", ".codex/.env", ".codex/plugins/")),
    "gemini": Profile(
        "gemini", "gemini", ".gemini",
        api_hosts=("generativelanguage.googleapis.com", "cloudcode-pa.googleapis.com",
                   "oauth2.googleapis.com"),
        state_writes=(".gemini/",),
        config_files=(".gemini/settings.json", ".gemini/trustedFolders.json",
                      ".gemini/policies/", ".gemini/extensions/", ".gemini/commands/",
                      ".gemini/agents/", ".gemini/skills/", ".gemini/hooks/",
                      ".gemini/GEMINI.md", ".gemini/AGENTS.md", ".gemini/system.md",
                      ".gemini/.env", ".gemini/oauth_creds.json",
                      ".gemini/mcp-oauth-tokens.json", ".gemini/extension_integrity.json"),
        base_url_env="GOOGLE_GEMINI_BASE_URL"),
}


def profile(client: str) -> Profile:
    try:
        return PROFILES[client]
    except KeyError:
        raise AgentProfileError(f"unknown client {client!r}: use one of "
                                f"{', '.join(sorted(PROFILES))}") from None


class Endpoint:
    """A model endpoint named on the command line (``--model-endpoint URL``)."""

    __slots__ = ("host", "loopback", "port", "url")

    def __init__(self, url: str, host: str, port: int, loopback: bool) -> None:
        self.url, self.host, self.port, self.loopback = url, host, port, loopback


def parse_endpoint(url: str) -> Endpoint:
    """``http(s)://HOST[:PORT][/...]`` with an explicit scheme; a loopback host
    (127.0.0.0/8, ::1, ``localhost``) needs an explicit port."""
    import ipaddress
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise AgentProfileError(f"--model-endpoint {url!r}: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise AgentProfileError(f"--model-endpoint {url!r}: expected http(s)://HOST[:PORT]")
    if parts.username is not None or parts.password is not None:
        raise AgentProfileError(f"--model-endpoint {url!r}: no user name or password")
    host = parts.hostname.lower().rstrip(".")
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if loopback:
        if port is None:
            raise AgentProfileError(f"--model-endpoint {url!r}: a loopback endpoint needs "
                                    "an explicit port")
        if host not in ("127.0.0.1", "localhost"):
            raise AgentProfileError(f"--model-endpoint {url!r}: on loopback only "
                                    "127.0.0.1 and localhost are forwarded")
    return Endpoint(url, host, port or (443 if parts.scheme == "https" else 80), loopback)


def agent_settings(settings: Settings, client: str, home: str,
                   endpoint: Endpoint | None = None) -> Settings:
    """``settings`` with what ``client`` needs for this run added (see the module
    doc). A loopback endpoint is not added here: ``sandbox agent`` forwards that
    one port into the sandbox itself, and the proxy keeps refusing loopback."""
    import os

    from .settings import parse

    p = profile(client)
    doc = settings.to_srt()
    net, fs = doc["network"], doc["filesystem"]
    hosts = list(p.api_hosts)
    if endpoint is not None and not endpoint.loopback:
        hosts.append(f"{endpoint.host}:{endpoint.port}")
    net["allowedDomains"] = list(dict.fromkeys([*net["allowedDomains"], *hosts]))
    fs["allowWrite"] = list(dict.fromkeys(
        [*fs["allowWrite"], *(os.path.join(home, w.rstrip("/")) for w in p.state_writes)]))
    fs["denyWrite"] = list(dict.fromkeys(
        [*fs["denyWrite"], *(os.path.join(home, c.rstrip("/")) for c in p.config_files)]))
    return parse(doc, source=f"{settings.source} (+ {client} for sandbox agent)")


def absent_default(entry: str) -> bytes | None:
    """What an absent config entry is created as: None for a folder (``entry``
    ends in /), ``{}`` for JSON, else empty."""
    if entry.endswith("/"):
        return None
    return b"{}" if entry.endswith(".json") else b""
