"""What each agent client needs to run inside ``sandbox exec`` (``sandbox agent``).

For Claude Code, Codex CLI and Gemini CLI: the program's name, the model API
hosts it must reach, the folders it writes its state in and the host's inputs
it reads there. ``agent_settings`` adds the API hosts to a run's srt settings
(a host the settings deny stays denied: ``deniedDomains`` wins in the proxy,
so a fleet that forbids a client's API forbids the client) and names the
inputs in ``denyWrite`` again; it opens nothing for writing. The state folders
are replaced inside the sandbox by private ones (``agent.state``): the
host's folder, which the same client reads when it later runs outside our
sandbox, is never written from inside; the inputs (``config_files``) are bound
read-only from the host's own files.

Pure but for ``is_wrapper``: no policy of its own beyond these lists. It never loosens a
deny of the settings it is given.
"""

from __future__ import annotations

from agent_sandbox.contract import WRAPPER_MARK
from agent_sandbox.errors import SandboxError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from agent_sandbox.runtime.settings import Settings


def is_wrapper(path: str) -> bool:
    """Whether ``path`` is one of our wrapper scripts (``contract.WRAPPER_MARK``,
    read in its first bytes): a program carrying it is never taken for the client."""
    try:
        with open(path, "rb") as fh:
            return WRAPPER_MARK in fh.read(512)
    except OSError:
        return False


class AgentProfileError(SandboxError, ValueError):
    """An unknown client, or an endpoint that cannot be used."""


class Profile:
    """One client (a plain class: no dataclass import on the CLI's start)."""

    __slots__ = ("api_hosts", "base_url_env", "config_files", "home_env", "name",
                 "private_dirs", "program", "state_dir")

    def __init__(self, name: str, program: str, state_dir: str, api_hosts: tuple[str, ...],
                 private_dirs: tuple[str, ...], config_files: tuple[str, ...],
                 base_url_env: str = "", home_env: str = "") -> None:
        self.name, self.program, self.state_dir = name, program, state_dir
        # the client's own variable that moves its state folder elsewhere: removed
        # from its environment inside, so it uses the private folder
        self.home_env = home_env
        # the client's own variable for its model API's address: when the user who
        # starts ``sandbox agent`` has set it, that endpoint is the run's endpoint
        self.base_url_env = base_url_env
        self.api_hosts, self.private_dirs, self.config_files = (api_hosts, private_dirs,
                                                                config_files)


# private_dirs and config_files are relative to the home folder (a folder ends
# in /). private_dirs: every folder the client writes (sessions, logs, caches,
# history, and whatever a later version adds); under ``sandbox agent`` each is a
# private folder (``state``), the first one also holding the client's
# TMPDIR. config_files: the host's inputs the client needs (settings, hooks,
# policies, trust, MCP servers, extensions, commands, agents, instructions,
# environment files, credentials), bound read-only from the host's files, or as
# what their absence means (an empty folder, ``{}``, an empty file) when the host
# has none: a new input of a later client version is simply not seen inside,
# never a channel out. One beside the folders (``~/.claude.json``) is the host's
# file, held read-only (``run.hold_config``). Credentials are read-only
# too: a token the client refreshes inside cannot be written back (the client
# refreshes again on its next run, or the user logs in on the host).
PROFILES: dict[str, Profile] = {
    "claude": Profile(
        "claude", "claude", ".claude",
        api_hosts=("api.anthropic.com", "statsig.anthropic.com"),
        private_dirs=(".claude/", ".cache/claude-cli-nodejs/"),
        config_files=(".claude/settings.json", ".claude/settings.local.json",
                      ".claude.json", ".claude/CLAUDE.md", ".claude/agents/",
                      ".claude/commands/", ".claude/hooks/", ".claude/plugins/",
                      ".claude/skills/", ".claude/output-styles/", ".claude/.credentials.json",
                      ".claude/managed-settings.json", ".claude/.mcp.json"),
        base_url_env="ANTHROPIC_BASE_URL", home_env="CLAUDE_CONFIG_DIR"),
    "codex": Profile(
        "codex", "codex", ".codex",
        api_hosts=("api.openai.com", "chatgpt.com"),
        private_dirs=(".codex/",),
        config_files=(".codex/config.toml", ".codex/hooks.json", ".codex/requirements.toml",
                      ".codex/managed_config.toml", ".codex/auth.json", ".codex/rules/",
                      ".codex/AGENTS.md", ".codex/AGENTS.override.md", ".codex/prompts/",
                      ".codex/skills/", ".codex/.env", ".codex/plugins/"),
        home_env="CODEX_HOME"),
    "gemini": Profile(
        "gemini", "gemini", ".gemini",
        api_hosts=("generativelanguage.googleapis.com", "cloudcode-pa.googleapis.com",
                   "oauth2.googleapis.com"),
        private_dirs=(".gemini/",),
        config_files=(".gemini/settings.json", ".gemini/trustedFolders.json",
                      ".gemini/policies/", ".gemini/extensions/", ".gemini/commands/",
                      ".gemini/agents/", ".gemini/skills/", ".gemini/hooks/",
                      ".gemini/GEMINI.md", ".gemini/AGENTS.md", ".gemini/system.md",
                      ".gemini/.env", ".gemini/oauth_creds.json",
                      ".gemini/mcp-oauth-tokens.json", ".gemini/extension_integrity.json",
                      ".gemini/google_accounts.json"),
        base_url_env="GOOGLE_GEMINI_BASE_URL", home_env="GEMINI_CLI_HOME"),
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
    (127.0.0.1, ``localhost``) needs an explicit port; an IPv6 literal (``[::1]``,
    ``[::ffff:127.0.0.1]``, any other) is refused with a clear message."""
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
    if ":" in host or "%" in host:
        # an IPv6 literal: neither srt's allowed domains nor the run's forwarded
        # loopback port (the sandbox's own 127.0.0.1) can name one
        raise AgentProfileError(f"--model-endpoint {url!r}: an IPv6 address is not supported; "
                                "name the host, or for a loopback endpoint use "
                                "http://127.0.0.1:PORT")
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

    from agent_sandbox.runtime.settings import parse

    p = profile(client)
    doc = settings.to_srt()
    net, fs = doc["network"], doc["filesystem"]
    hosts = list(p.api_hosts)
    if endpoint is not None and not endpoint.loopback:
        hosts.append(f"{endpoint.host}:{endpoint.port}")
    net["allowedDomains"] = list(dict.fromkeys([*net["allowedDomains"], *hosts]))
    fs["denyWrite"] = list(dict.fromkeys(
        [*fs["denyWrite"], *(os.path.join(home, c.rstrip("/")) for c in p.config_files)]))
    return parse(doc, source=f"{settings.source} (+ {client} for sandbox agent)")


def absent_default(entry: str) -> bytes | None:
    """What an absent config entry is created as: None for a folder (``entry``
    ends in /), ``{}`` for JSON, else empty."""
    if entry.endswith("/"):
        return None
    return b"{}" if entry.endswith(".json") else b""
