"""The Windows host behind one interface: the engine (srt-win) and the firewall.

On Windows an agent's command runs through srt's own Windows backend,
``srt-win.exe`` from the ``@anthropic-ai/sandbox-runtime`` npm package: its
``exec`` starts the command as the dedicated sandbox account (a second logon
with that account's own profile), and its WFP filters, keyed on that account's
SID, let it reach only the proxy's port range, loopback included. The
provisioning (``render/windows.py``) installs it with the spec's account and
port range; this module is what runs on the host afterwards:

- ``exec_argv(engine, command, ...)``: the argv that runs a command as the
  sandbox account (no shell on the host side; the inner shell runs inside);
- ``check(host, engine)``: the ``sandbox verify`` checks of a Windows host:
  every firewall profile enabled, Group Policy not discarding local rules, the
  engine's account provisioned with its credential and hidden from the logon
  screen, the WFP fence installed with the plan's port range, and a behavioural
  probe: a direct connection from the sandbox account to a loopback port
  outside the range must be blocked.

Every call to Windows goes through ``WindowsHost`` (``ProcessHost`` is the real
one), so the decisions are tested with a fake that records the calls. A check
never passes when it could not run: an error is a failure with the reason.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

# srt-win exit codes (its documented contract)
WFP_VERIFY_BLOCKED = 0
WFP_VERIFY_CONNECTED = 3

FIREWALL_PROFILES_PS = (
    "Get-NetFirewallProfile -PolicyStore ActiveStore | "
    "Select-Object -Property Name, Enabled, AllowLocalFirewallRules | ConvertTo-Json -Compress"
)


@dataclass(frozen=True)
class Ran:
    """What a command on the host returned."""

    code: int
    stdout: str
    stderr: str = ""


class WindowsHost(Protocol):
    """Every Windows call this project makes at run time."""

    def srt_win(self, exe: str, args: Sequence[str], stdin: str | None = None) -> Ran: ...

    def powershell(self, script: str) -> Ran: ...

    def loopback_listener(self, avoid: tuple[int, int]) -> int:
        """Listen on a loopback port outside ``avoid`` (inclusive); its number."""
        ...


class ProcessHost:
    """The real host: processes started without a shell."""

    def __init__(self) -> None:
        self._listeners: list[Any] = []

    def srt_win(self, exe: str, args: Sequence[str], stdin: str | None = None) -> Ran:
        p = subprocess.run([exe, *args], input=stdin, capture_output=True, text=True,
                           timeout=60, check=False)
        return Ran(p.returncode, p.stdout, p.stderr)

    def powershell(self, script: str) -> Ran:
        p = subprocess.run(["powershell.exe", "-NoProfile", "-NonInteractive", "-Command", script],
                           capture_output=True, text=True, timeout=60, check=False)
        return Ran(p.returncode, p.stdout, p.stderr)

    def loopback_listener(self, avoid: tuple[int, int]) -> int:
        import socket

        for _ in range(8):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            s.listen(1)
            port = int(s.getsockname()[1])
            if not avoid[0] <= port <= avoid[1]:
                self._listeners.append(s)
                return port
            s.close()
        raise OSError("no loopback port outside the proxy range could be bound")

    def close(self) -> None:
        for s in self._listeners:
            s.close()
        self._listeners.clear()


# ------------------------------------------------------------------ launching


def exec_argv(engine: dict[str, Any], command: str, *, env: dict[str, str],
              deny_read: Sequence[str] = (), deny_write: Sequence[str] = (),
              shell: Sequence[str] = ("C:\\Windows\\System32\\cmd.exe", "/d", "/s", "/c"),
              ) -> list[str]:
    """How one command runs as the sandbox account (``srt-win exec``).

    ``env`` is the whole environment the command gets on top of the sandbox
    account's own profile (the proxy variables among it); nothing of the caller's
    environment passes otherwise. The command is one argv element for the inner
    shell, which runs inside the sandbox.
    """
    if "\x00" in command:
        raise ValueError("a NUL byte cannot be passed to a Windows command line")
    argv = [engine["exe"], "exec", "--quiet"]
    for path in deny_read:
        argv += ["--deny-read", path]
    for path in deny_write:
        argv += ["--deny-write", path]
    for key in sorted(env):
        if "=" in key or not key:
            raise ValueError(f"bad environment variable name {key!r}")
        argv += ["--env", f"{key}={env[key]}"]
    return [*argv, "--", *shell, command]


def protected_denies(protected: dict[str, list[str]], folders: Sequence[str]) -> list[str]:
    """``--deny-write`` targets for one session: every protected name at the top of
    each folder (the writable roots and the working folder) and inside its git
    folder, whether or not it exists yet. Folder names keep their trailing
    backslash, srt-win's marker for a folder target that does not exist yet.
    ``protected`` is the plan's ``protected`` block (``render.windows``)."""
    out: list[str] = []
    for folder in folders:
        base = folder.rstrip("\\")
        out += [f"{base}\\{name}" for name in protected["names"]]
        for git_dir in protected["git_dir"]:
            out += [f"{base}\\{git_dir}\\{name}" for name in protected["git"]]
    return list(dict.fromkeys(out))


# --------------------------------------------------------------------- checks


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


def _json(ran: Ran, what: str) -> Any:
    if ran.code != 0:
        raise RuntimeError(f"{what} exited {ran.code}: {(ran.stderr or ran.stdout)[-300:]}")
    try:
        return json.loads(ran.stdout)
    except ValueError:
        raise RuntimeError(f"{what} printed no JSON: {ran.stdout[-300:]!r}") from None


def firewall_checks(host: WindowsHost) -> list[Check]:
    """Every profile enabled, and Group Policy not discarding local rules.

    A disabled profile, or ``AllowLocalFirewallRules = False`` from Group
    Policy, silently drops the per-account rules provisioning adds.
    """
    profiles = _json(host.powershell(FIREWALL_PROFILES_PS), "Get-NetFirewallProfile")
    if isinstance(profiles, dict):
        profiles = [profiles]
    if not profiles:
        raise RuntimeError("Get-NetFirewallProfile listed no profile")
    off = [p["Name"] for p in profiles if p.get("Enabled") not in (True, 1, "True")]
    # GpoBoolean: True (1), False (0), NotConfigured (2): only an explicit False drops rules
    ignored = [p["Name"] for p in profiles
               if p.get("AllowLocalFirewallRules") in (False, 0, "False")]
    return [
        Check("firewall_enabled", not off,
              f"disabled profiles: {', '.join(off)}" if off else "every profile enabled"),
        Check("firewall_local_rules", not ignored,
              f"Group Policy ignores local rules in: {', '.join(ignored)}" if ignored
              else "local rules are merged"),
    ]


def engine_checks(host: WindowsHost, engine: dict[str, Any]) -> list[Check]:
    """The engine's account and fence, as srt-win reports them, then a real probe."""
    exe = engine["exe"]
    status = _json(host.srt_win(exe, ["status", "--sublayer-guid", engine["sublayer_guid"]]),
                   "srt-win status")
    user, wfp = status.get("user", {}), status.get("wfp", {})
    account = user.get("user", {})
    problems = []
    if not account.get("exists"):
        problems.append("the sandbox account does not exist")
    if not user.get("cred_present"):
        problems.append("the engine holds no credential for it")
    if not account.get("hidden_from_logon"):
        problems.append("the account is shown on the logon screen")
    out = [Check("engine_account", not problems, "; ".join(problems) or "provisioned")]
    lo, hi = engine["proxy_port_range"]
    state = wfp.get("state")
    if state == "installed":
        rng = wfp.get("port_range")
        ok = list(rng or []) == [lo, hi]
        out.append(Check("wfp_filters", ok, f"port range {rng}, want [{lo}, {hi}]"))
    elif state == "cannot-read":
        out.append(Check("wfp_filters", True, "not readable without elevation; probed below"))
    else:
        out.append(Check("wfp_filters", False, f"WFP filters {state!r}"))
    port = host.loopback_listener((lo, hi))
    probe = host.srt_win(exe, ["wfp", "verify", "--target", f"127.0.0.1:{port}"])
    if probe.code == WFP_VERIFY_BLOCKED:
        out.append(Check("wfp_fence", True, f"127.0.0.1:{port} blocked for the sandbox account"))
    elif probe.code == WFP_VERIFY_CONNECTED:
        out.append(Check("wfp_fence", False,
                         f"the sandbox account reached 127.0.0.1:{port} directly"))
    else:
        out.append(Check("wfp_fence", False, f"inconclusive (exit {probe.code}): "
                         f"{(probe.stderr or probe.stdout)[-300:]}"))
    return out


def check(host: WindowsHost, engine: dict[str, Any]) -> list[Check]:
    """All Windows checks; an error in one group is that group's failure."""
    out: list[Check] = []
    try:
        out += firewall_checks(host)
    except Exception as exc:  # never pass a check that could not run
        out.append(Check("firewall", False, f"could not run: {exc}"))
    try:
        out += engine_checks(host, engine)
    except Exception as exc:
        out.append(Check("engine", False, f"could not run: {exc}"))
    return out


PLAN_PATH = "C:\\Program Files\\agent-sandbox\\provision\\plan.json"


def verify(plan_path: str = PLAN_PATH, host: WindowsHost | None = None) -> list[Check]:
    """``sandbox verify`` on a Windows host: the checks above, for the installed plan."""
    try:
        with open(plan_path, encoding="utf-8") as fh:
            engine = json.load(fh)["engine"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return [Check("plan", False, f"cannot read the provisioning plan {plan_path}: {exc}")]
    if host is not None:
        return check(host, engine)
    real = ProcessHost()
    try:
        return check(real, engine)
    finally:
        real.close()
