"""The host contract: where agent-sandbox installs its files and keeps its state.

Every module that reads or writes an installed path takes it from here (the
renderer, the runtime, ``sandbox verify``, the roles through the filter plugin),
and so does whatever the renderer writes that another part must match: the
hook's command line and time budget, the wrapper scripts' mark.
State that decides policy or records what happened (settings, the audit log,
queues, locks, keys) lives only in the folders listed by ``state_paths``, which
every sandbox gets read-only whatever its settings say.

Stdlib only, no I/O at import: the hook and ``sandbox exec`` import it.
"""

from __future__ import annotations

import os

ETC_DIR = "/etc/agent-sandbox"
EXEC_PROFILE = f"{ETC_DIR}/exec.json"
SYSTEM_SRT_SETTINGS = f"{ETC_DIR}/srt-settings.json"
POLICY_FILE = f"{ETC_DIR}/policy.json"
WINDOWS_STATE_DIR = "C:/ProgramData/agent-sandbox"
WINDOWS_POLICY_FILE = f"{WINDOWS_STATE_DIR}/policy.json"
# The managed policy the hooks read, by host OS.
POLICY_FILES = {"linux": POLICY_FILE, "macos": POLICY_FILE, "windows": WINDOWS_POLICY_FILE}
MANIFEST_FILE = f"{ETC_DIR}/manifest.json"
# The waivers ``sandbox verify`` applies on the host (the spec's ``verify.waivers``,
# rendered for Linux and macOS hosts): it reads them from here, never from a spec.
VERIFY_WAIVERS_FILE = f"{ETC_DIR}/verify.json"
# The checks ``sandbox verify`` runs, by name (``hostcheck.checks.CHECKS`` and the web
# unit's, where it is installed): what ``verify.waivers`` and ``verify.unwaivable`` name.
VERIFY_CHECKS = ("denied_read", "protected_write", "denied_domain", "allowed_domain",
                 "escalation", "audit", "web_service")
HOST_STATE_DIR = "/var/lib/agent-sandbox"
HOST_AUDIT_DIR = "/var/log/agent-sandbox"
AUDIT_KEYS = "audit-keys"  # beside a log, in the user's and the host's state
HOST_AUDIT_KEY = f"{HOST_STATE_DIR}/{AUDIT_KEYS}/host.ed25519"
# An audit log's file rotates into a sealed segment of the same chain at this size
# (``audit.segments``): the host's and the proxy's logs, and the spec's default.
AUDIT_SEGMENT_BYTES = 64 * 1024 * 1024
MACOS_PROXY_LOG = f"{HOST_AUDIT_DIR}/proxy.log"
APPARMOR_PROFILE = "/etc/apparmor.d/agent-sandbox-bwrap"
GEMINI_SYSTEM_SETTINGS = "/etc/gemini-cli/settings.json"  # Gemini CLI's, on Linux
PROXY_UNIT = "/etc/systemd/system/agent-sandbox-proxy.service"
WEB_UNIT = "/etc/systemd/system/agent-sandbox-web.service"  # `sandbox serve`, off by default
WEB_PORT = 8765  # `sandbox serve`'s default port, on loopback
# The scheduled jobs (``render.schedules``): the drift check and ansible-pull, as
# systemd units (service + timer), LaunchDaemons and Scheduled Tasks.
DRIFT_UNIT = "/etc/systemd/system/agent-sandbox-drift"  # + .service / .timer
PULL_UNIT = "/etc/systemd/system/agent-sandbox-pull"  # + .service / .timer
DRIFT_LABEL = "com.agent-sandbox.drift"  # the LaunchDaemons' labels
PULL_LABEL = "com.agent-sandbox.pull"
# What the last drift check found (``last_verify``): root's, in the host's state.
HOST_STATE_DIR_ENV = "AGENT_SANDBOX_HOST_STATE_DIR"
USER_SRT_SETTINGS = ".srt-settings.json"  # relative to the home folder
USER_CONFIG_DIR = ".config/agent-sandbox"  # relative to the home folder
USER_STATE_DIR = ".local/state/agent-sandbox"  # relative to the home folder
USER_BROKER_DIR = ".config/agent-sandbox/broker"  # relative to the home folder

LOCK_DIR_ENV = "AGENT_SANDBOX_LOCK_DIR"
AUDIT_DIR_ENV = "AGENT_SANDBOX_AUDIT_DIR"
STATE_DIR_ENV = "AGENT_SANDBOX_STATE_DIR"
BROKER_DIR_ENV = "AGENT_SANDBOX_BROKER_DIR"
# ``off``: ``sandbox mcp`` never asks the resident server and serves cold
MCP_RESIDENT_ENV = "AGENT_SANDBOX_MCP_RESIDENT"

# The kinds of artifact the renderer produces (``Artifact.kind``), with what each
# is. The renderer refuses any other kind; the roles select artifacts by these
# names through the ``agent_sandbox_select`` filter, which refuses any other.
ARTIFACT_KINDS: dict[str, str] = {
    # every OS
    "policy": "the effective policy the hooks read (policy.json)",
    "srt-settings": "srt-format settings: system, per user, or the macOS proxy's",
    "verify-waivers": "the checks `sandbox verify` reports as waived, with why and until when",
    # Linux
    "bwrap-profile": "the bubblewrap profile `sandbox exec` reads",
    "systemd-unit": "the egress proxy's systemd unit",
    "web-unit": "the web approvals server's systemd unit (`sandbox serve`, off by default)",
    "apparmor-profile": "the AppArmor profile allowing bubblewrap user namespaces",
    # every OS: scheduled jobs (systemd service + timer, LaunchDaemon, Scheduled Task)
    "drift-schedule": "`sandbox verify --drift` on a schedule, recorded in the host's audit",
    "pull-schedule": "ansible-pull on a schedule, for hosts that pull their configuration",
    # agents
    "claude-managed-settings": "Claude Code managed settings",
    "claude-settings": "a project's .claude/settings.json",
    "codex-config": "Codex config.toml (MCP entries)",
    "codex-hooks": "Codex hooks.json",
    "codex-requirements": "Codex requirements.toml",
    "cursor-hooks": "Cursor hooks.json",
    "gemini-policy": "Gemini CLI policy file",
    "gemini-settings": "Gemini CLI system settings",
    "mcp-config": "an MCP client configuration (VS Code, Windsurf, Cursor, Claude Desktop)",
    "agent-wrapper": "a client's wrapper under `sandbox agent`, and its profile",
    # macOS
    "seatbelt": "a Seatbelt (SBPL) profile for sandbox-exec",
    "seatbelt-denies": "the denied paths of a Seatbelt profile, resolved on the host",
    "launchd": "the proxy's LaunchDaemon plist",
    "mobileconfig": "the MDM profile carrying the agents' managed settings",
    # Windows
    "windows-plan": "the Windows provisioning plan (JSON)",
    "powershell": "the Windows provisioning script",
    # cluster
    "k8s": "Kubernetes objects (RuntimeClass, Namespace, NetworkPolicy)",
    "calico": "Calico (projectcalico.org/v3) policies",
    "k8s-job-template": "the runner's Job template",
    "vault-policy": "a Vault/OpenBao policy (HCL)",
    "vault-roles": "the Vault/OpenBao plan of roles",
}

# The agents' kinds: installed after `sandbox init` ran in each repository (it
# writes entries these files replace), by the roles and the pyinfra deploy alike.
AGENT_ARTIFACT_KINDS = frozenset({
    "agent-wrapper", "claude-managed-settings", "claude-settings", "codex-config",
    "codex-hooks", "codex-requirements", "cursor-hooks", "gemini-policy", "gemini-settings",
    "mcp-config"})

# How the host runs this package's own programs (hooks, the approvals' executor, the
# proxy service, ``sandbox verify``'s probes): an absolute interpreter, isolated
# (``-I``: neither the current folder, nor PYTHON* variables, nor the user's site
# folder on ``sys.path``). They run in folders a sandbox can write: without
# ``-I``, ``python -m agent_sandbox`` imports a package planted there, on the host.
# The hook, which runs on every tool call, starts through ``-c`` (no ``runpy``).
HOOK_CODE = "from agent_sandbox.cli.entry import hook; hook()"


def self_argv(python: str, *args: str) -> list[str]:
    """``python -I -m agent_sandbox ARGS``."""
    return [python, "-I", "-m", "agent_sandbox", *args]


def hook_argv(python: str, agent: str, event: str) -> list[str]:
    """The hook of ``agent`` for ``event``, as every client runs it."""
    return [python, "-I", "-c", HOOK_CODE, agent, event]


# The events whose hook judges a call before it runs. A hook there that cannot
# answer (its interpreter gone after an upgrade, killed, crashed) must block the
# call, and not every client does so on its own: Codex CLI 0.171.0 runs the call
# when a PreToolUse hook fails to start. Exit status 2 is every client's "block"
# (Claude Code, Codex, Gemini CLI, Cursor), so the shell the client runs the
# command with turns any other failure into it (``hook_command``).
BEFORE_CALL_EVENTS = frozenset({"pre-tool-use", "before-tool", "before-shell-execution",
                                "before-mcp-execution", "before-read-file"})
_BLOCK_ON_FAILURE = (' || { s=$?; [ "$s" = 2 ] || echo "agent-sandbox: the hook failed'
                     ' (status $s): the call is blocked" >&2; exit 2; }')


def hook_command(python: str, agent: str, event: str, *, posix: bool = True) -> str:
    """``hook_argv`` as the shell command line the clients' settings carry; for a
    call's judgement, run by a POSIX shell (``posix``), any failure of the hook is
    exit status 2, a block (``BEFORE_CALL_EVENTS``)."""
    line = f'"{python}" -I -c "{HOOK_CODE}" {agent} {event}'
    return line + _BLOCK_ON_FAILURE if posix and event in BEFORE_CALL_EVENTS else line


def is_hook_command(command: object, agent: str) -> bool:
    """Whether a client's hook command runs our hook for ``agent`` (also in the
    ``-m agent_sandbox hook`` form earlier versions rendered)."""
    text = str(command)
    return f'{HOOK_CODE}" {agent} ' in text or f"agent_sandbox hook {agent} " in text


# The hook's wall-clock budget: the one place that says how long ``sandbox hook``
# may take, and so what timeout the renderer must give it in each agent's
# settings. A client that times a hook out lets the tool run, so the hook must
# always answer before the client gives up on it: ``agent_timeout(wait)`` (what
# the renderer writes) is strictly greater than ``hook_deadline(wait)`` (the most
# the hook ever spends, which ``hooks.tool_call`` enforces with an alarm). ``wait`` is
# the policy's ``approvals.wait``: how long an escalation waits for a human.
#
# Reading the hook input and the policy: a FIFO, a stalled pipe or a slow
# network mount blocks here, never longer.
START_BUDGET = 10.0
# How long the hook waits for an approved command's result before answering
# "approved and still running" (the command itself goes on, detached; its result
# reaches `sandbox status` and the MCP server's check_request).
RUN_WAIT = 300.0
# Writing the answer, the audit record and cancelling a request.
EXIT_SLACK = 5.0
# What the agent's timeout adds on top of the hook's own deadline: interpreter
# start-up and a loaded machine.
HOOK_MARGIN = 15


def hook_deadline(wait: float) -> float:
    """The most seconds the hook spends, from its start to its answer, under a
    policy whose escalations wait ``wait`` seconds for a decision."""
    return START_BUDGET + max(0.0, float(wait)) + RUN_WAIT + EXIT_SLACK


def agent_timeout(wait: float) -> int:
    """Whole seconds to render as the hook's timeout in an agent's settings;
    always greater than ``hook_deadline(wait)``: it never returns a budget the
    hook cannot keep."""
    deadline = hook_deadline(wait)
    whole = int(deadline)
    return (whole if whole == deadline else whole + 1) + HOOK_MARGIN


# The line that marks the wrapper scripts the roles install (``render.agents``): a
# program carrying it is never taken for the client itself (``sandbox agent``,
# ``sandbox verify``).
WRAPPER_MARK = b"# agent-sandbox wrapper: runs the client through `sandbox agent`"

# Ports the egress proxy listens on inside a sandbox's network namespace.
PROXY_HTTP_PORT = 3128
PROXY_SOCKS_PORT = 1080


def user_state_dir(home: str) -> str:
    """The per-user state folder (audit, locks, pinned keys): never under XDG
    variables a caller may vary, so every run of a user finds the same one."""
    return os.environ.get(STATE_DIR_ENV) or os.path.join(home, USER_STATE_DIR)


def host_state_dir() -> str:
    """The host's state folder (root's): ``HOST_STATE_DIR`` unless the caller names
    another (``$AGENT_SANDBOX_HOST_STATE_DIR``, for tests)."""
    return os.environ.get(HOST_STATE_DIR_ENV) or HOST_STATE_DIR


def lock_dir(home: str) -> str:
    """The per-user folder of run records and owed sweeps (not created here)."""
    return os.environ.get(LOCK_DIR_ENV) or os.path.join(user_state_dir(home), "run")


def default_audit_dir(home: str) -> str:
    """Where the runtime's decisions go when nothing else is configured."""
    env = os.environ.get(AUDIT_DIR_ENV)
    if env:
        return env
    if os.access(HOST_AUDIT_DIR, os.W_OK) or (
            not os.path.exists(HOST_AUDIT_DIR) and os.geteuid() == 0):
        return HOST_AUDIT_DIR
    return os.path.join(user_state_dir(home), "audit")


def mcp_resident_dir(home: str) -> str:
    """The resident MCP server's private folder (its socket, lock and log)."""
    return os.path.join(user_state_dir(home), "mcp")


PODMAN_RUN_DIR = "/run/agent-sandbox/podman"  # root's
PODMAN_STATE_MAX = 56  # bytes of a state folder that leave room for a service's socket


def podman_service_dir(home: str) -> str:
    """This user's warm podman services (``runtime/containers/service.py``): each one's
    Docker API socket, which is root-equivalent, with the runsc wrapper and
    containers.conf it was started with. A unix socket's name holds 107 bytes, so
    the folder is short: in a state folder the caller named (``$AGENT_SANDBOX_STATE_DIR``) when that
    is short, else in the user's runtime folder (root's:
    ``/run/agent-sandbox/podman``; another user's: ``$XDG_RUNTIME_DIR``), else the
    state folder."""
    chosen = os.environ.get(STATE_DIR_ENV)
    if chosen and os.path.isabs(chosen) and len(os.fsencode(chosen)) <= PODMAN_STATE_MAX:
        return os.path.join(chosen, "podman")
    if os.geteuid() == 0:
        return PODMAN_RUN_DIR
    runtime = os.environ.get("XDG_RUNTIME_DIR") or f"/run/user/{os.geteuid()}"
    if os.path.isabs(runtime) and os.path.isdir(runtime):
        return os.path.join(runtime, "agent-sandbox", "podman")
    return os.path.join(user_state_dir(home), "podman")


def broker_dir(home: str) -> str:
    """The action broker's private folder: the OpenBao address and the token it
    mints action credentials with (``address``, ``token``, each 0600)."""
    return os.environ.get(BROKER_DIR_ENV) or os.path.join(home, USER_BROKER_DIR)


def actions_journal_dir(home: str) -> str:
    """Credential leases not yet revoked (the broker's journal)."""
    return os.path.join(user_state_dir(home), "leases")


def layers_dir(home: str) -> str:
    """The gVisor backend's private layers (``runtime/containers/layer.py``): what a
    run wrote, before it is published into the tree."""
    return os.path.join(user_state_dir(home), "layers")


def web_dir(home: str) -> str:
    """``sandbox serve``'s private folder: the approvers' bearer token (``token``, 0600)."""
    return os.path.join(user_state_dir(home), "web")


def private_paths(home: str) -> list[str]:
    """State no sandbox may even see: hidden (an empty read-only folder) in every
    sandbox, whatever its settings allow. The resident MCP server's socket: a
    session it serves runs outside any sandbox. The action broker's token. The web
    approvers' bearer token: whoever holds it approves. The warm podman service's
    Docker API socket: whoever reaches it runs containers as this user (root, for a
    rootful podman). The keys that sign audit checkpoints: the repositories' (in the
    user's state), the host's, and those of the log runs write to (beside it). The
    gVisor backend's layers: what a run wrote before it is judged."""
    keys = {os.path.join(user_state_dir(home), AUDIT_KEYS), os.path.join(HOST_STATE_DIR,
                                                                         AUDIT_KEYS),
            os.path.join(os.path.dirname(os.path.abspath(default_audit_dir(home))), AUDIT_KEYS)}
    return [os.path.abspath(mcp_resident_dir(home)), os.path.abspath(broker_dir(home)),
            os.path.abspath(web_dir(home)), os.path.abspath(podman_service_dir(home)),
            os.path.abspath(layers_dir(home)),
            *sorted(os.path.abspath(k) for k in keys)]


def state_paths(home: str) -> list[str]:
    """Every folder of agent-sandbox state and policy: read-only in every sandbox."""
    paths = [ETC_DIR, HOST_STATE_DIR, HOST_AUDIT_DIR, user_state_dir(home), lock_dir(home),
             os.path.join(home, USER_CONFIG_DIR), os.path.join(home, USER_SRT_SETTINGS)]
    audit = os.environ.get(AUDIT_DIR_ENV)
    if audit:
        paths.append(audit)
    return list(dict.fromkeys(os.path.abspath(p) for p in paths))
