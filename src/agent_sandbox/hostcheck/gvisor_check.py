"""``sandbox verify --gvisor``: proof that an infrastructure action's container
runs on the gVisor kernel on this host.

One action container (the runner's own path: ``actions.runner``) prints the
kernel's boot log and ``/proc/version``. It passes only when podman's inspect
names runsc as the container's runtime, the boot log carries gVisor's banner,
and the kernel that answered is not this host's. It must never pass a check it
could not run: a missing image, podman or runsc is a failure with the reason.
"""

from __future__ import annotations

import os

from .checks import CheckResult

BANNER = "Starting gVisor"
PROBE = "dmesg > /work/kmsg && cat /work/kmsg && echo ---- && cat /proc/version"


def judge(runtime: str, exit_code: int | None, output: str, host_version: str
          ) -> tuple[bool, str]:
    """Whether a probe's outcome proves gVisor, and why (pure)."""
    if runtime != "runsc":
        return False, f"the container's OCI runtime is {runtime or 'unknown'!r}, not runsc"
    if exit_code != 0:
        return False, f"the probe exited with {exit_code}: {output.strip()[-200:]}"
    kmsg, _, version = output.partition("----\n")
    if BANNER not in kmsg:
        return False, f"the kernel log has no gVisor banner: {kmsg.strip()[:200]!r}"
    version = version.strip()
    if not version or version == host_version.strip():
        return False, f"/proc/version is this host's own kernel: {version[:120]!r}"
    return True, f"runtime runsc; kernel log {BANNER!r}; kernel {version[:60]!r}"


def check_gvisor(image: str | None = None) -> CheckResult:
    """Run the probe in an action container of ``image`` (default: the base image)."""
    from ..actions.runner import run_action_container
    from ..errors import SandboxError
    from ..runtime.backends.gvisor import GVISOR_IMAGE
    from ..spec.actions import ActionLimits

    image = image or os.environ.get("AGENT_SANDBOX_GVISOR_IMAGE", GVISOR_IMAGE)
    try:
        run = run_action_container(image, ["sh", "-c", PROBE],
                                   limits=ActionLimits(timeout=60), files=None, env=None,
                                   egress=[], connect=[],
                                   labels={"agent-sandbox.verify": "gvisor"})
    except SandboxError as exc:
        return CheckResult("gvisor", False, str(exc))
    with open("/proc/version", encoding="utf-8") as fh:
        host = fh.read()
    ok, detail = judge(run.runtime, run.exit_code,
                       run.stdout.decode("utf-8", "replace"), host)
    return CheckResult("gvisor", ok, f"{detail}; container {run.container_id[:12]} removed"
                       if ok else detail)
