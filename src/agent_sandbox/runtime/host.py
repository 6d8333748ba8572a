"""What the runtime needs to know about this host: the user's home folder, the
bubblewrap program, and why user namespaces may be unavailable (with the remedy).

Read-only questions; nothing here changes the host.
"""

from __future__ import annotations

import os

from agent_sandbox.contract import APPARMOR_PROFILE

from .failures import SandboxStartError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable


def home_dir() -> str:
    home = os.environ.get("HOME")
    if home and os.path.isabs(home):
        return os.path.realpath(home)
    import pwd

    return os.path.realpath(pwd.getpwuid(os.getuid()).pw_dir)


def read_proc(path: str) -> str | None:
    try:
        with open(path) as fh:
            return fh.read().strip()
    except OSError:
        return None


def diagnose_userns(read: Callable[[str], str | None] = read_proc) -> str:
    """Why user namespaces may be unavailable here, and what to do (or '')."""

    if read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == "1":
        return (
            "AppArmor restricts unprivileged user namespaces on this host (Ubuntu 24.04+). "
            f"Install the profile rendered by `sandbox render` at {APPARMOR_PROFILE} "
            "(it grants `userns` to /usr/bin/bwrap) and run "
            f"`sudo apparmor_parser -r {APPARMOR_PROFILE}`"
        )
    if read("/proc/sys/kernel/unprivileged_userns_clone") == "0":
        return ("unprivileged user namespaces are disabled: "
                "`sudo sysctl -w kernel.unprivileged_userns_clone=1`")
    if read("/proc/sys/user/max_user_namespaces") == "0":
        return "user namespaces are disabled: `sudo sysctl -w user.max_user_namespaces=15000`"
    return ""


def find_bwrap() -> str:
    override = os.environ.get("AGENT_SANDBOX_BWRAP")
    if override:
        if not os.access(override, os.X_OK):
            raise SandboxStartError(f"AGENT_SANDBOX_BWRAP={override} is not executable")
        return override
    for d in ("/usr/bin", "/usr/local/bin", "/bin"):
        p = os.path.join(d, "bwrap")
        if os.access(p, os.X_OK):
            return p
    import shutil

    found = shutil.which("bwrap")
    if not found:
        raise SandboxStartError(
            "bubblewrap (bwrap) is not installed: install it (`apt-get install bubblewrap`, "
            "`dnf install bubblewrap`) or run `make setup`"
        )
    return found
