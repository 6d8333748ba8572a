"""``sandbox install apparmor-profile``: load the rendered AppArmor profile that lets
bubblewrap create user namespaces, where AppArmor restricts them, idempotently.

``when="auto"`` loads it only where the kernel restricts unprivileged user
namespaces through AppArmor (``kernel.apparmor_restrict_unprivileged_userns``
is 1: Ubuntu 24.04 and later); ``"always"`` loads it wherever AppArmor runs.
A load is recorded (the profile's SHA-256, in the host state folder) and done
again only when the profile changed or the kernel no longer has it.

It reads only a profile root owns and no one else may write, and never edits it.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Sequence

from agent_sandbox import contract
from agent_sandbox.errors import InstallError
from agent_sandbox.install.hostfiles import read_record, trusted_bytes, write_record

USERNS_RESTRICTED = "/proc/sys/kernel/apparmor_restrict_unprivileged_userns"
LOADED_PROFILES = "/sys/kernel/security/apparmor/profiles"


def _profile_name(text: str) -> str:
    """The name after ``profile`` in the profile's header line."""
    for line in text.splitlines():
        words = line.split()
        if len(words) >= 2 and words[0] == "profile":
            return words[1]
    raise InstallError("the AppArmor profile has no `profile NAME` line")


def _loaded(name: str, profiles: str) -> bool:
    try:
        with open(profiles, encoding="utf-8") as fh:
            return any(line.split(" (")[0] == name for line in fh)
    except OSError:
        return False


def install(profile: str, *, when: str = "auto", flag: str = USERNS_RESTRICTED,
            profiles: str = LOADED_PROFILES, state_dir: str = contract.HOST_STATE_DIR,
            parser: Sequence[str] = ("apparmor_parser",)) -> bool:
    """Load ``profile`` if it is needed and not loaded as it is. Returns whether it
    loaded it."""
    if when not in ("auto", "always"):
        raise InstallError(f"unknown condition {when!r} (auto or always)")
    content = trusted_bytes(profile)
    if when == "auto" and read_record(flag) != "1":
        return False
    name = _profile_name(content.decode("utf-8", "replace"))
    record = os.path.join(state_dir, os.path.basename(profile) + ".loaded")
    want = hashlib.sha256(content).hexdigest()
    if read_record(record) == want and _loaded(name, profiles):
        return False
    proc = subprocess.run([*parser, "-r", profile], capture_output=True, text=True,
                          check=False, timeout=120)
    if proc.returncode != 0:
        raise InstallError(f"apparmor_parser -r {profile} failed: {proc.stderr.strip()}")
    write_record(record, want)
    return True
