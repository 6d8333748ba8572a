"""What an action's one-shot container is created with: the ``docker`` SDK's
``containers.create`` keyword arguments, worked out from the action's limits
and what the runner prepared (pure: nothing runs, nothing is read).

- the image's root read-only, a tmpfs work folder (``/work``) as the working
  directory and ``HOME``, owned by the container's user (uid 65534, never
  root), every capability dropped, no new privileges;
- memory (and swap: none beyond it), CPU, and process limits. The process
  limit is ``RLIMIT_NPROC``, which gVisor's kernel enforces for the
  container's one user: the host's pids cgroup counts gVisor's own threads,
  not the container's processes, and a limit of a few hundred there stops
  runsc from starting at all;
- no network (``network_mode`` none): what the container may reach is opened
  in its namespace from the host (``runtime/containers/net.py``);
- no log on the host's disk: the runner reads the output while it is
  produced and keeps what the limit allows.

Must never name a runtime other than the service's gVisor, mount anything
writable from the host, or put a secret in the environment.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import SandboxError
from ..spec.actions import ActionLimits

ACTION_USER = "65534:65534"
WORK_DIR = "/work"
OPEN_FILES = 1024
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,127}")
# what the SDK's low-level ``create_container`` takes itself; the rest of the
# options go into its host config, and ``detach`` is the high-level call's own
CONTAINER_KEYS = ("image", "entrypoint", "command", "user", "working_dir", "environment",
                  "labels", "stdin_open", "tty")
HOST_CONFIG_KEYS = ("read_only", "tmpfs", "mounts", "network_mode", "cap_drop",
                    "security_opt", "mem_limit", "memswap_limit", "nano_cpus", "ulimits",
                    "log_config")


class ContainerOptionsError(SandboxError):
    """What the runner was asked to create is malformed."""


def container_options(image: str, argv: Sequence[str], limits: ActionLimits, *,
                      env: Mapping[str, str], labels: Mapping[str, str],
                      mounts: Sequence[Mapping[str, Any]] = (),
                      proxy_env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The ``containers.create`` keyword arguments for one action run.

    ``proxy_env``: the egress proxy's variables (the action may reach it); they
    win over ``env``. Raises ``ContainerOptionsError``."""
    if not argv or not all(isinstance(a, str) and "\0" not in a for a in argv):
        raise ContainerOptionsError("an action's argv is a non-empty list of strings "
                                    "without NUL characters")
    for key, value in env.items():
        if not _ENV_NAME.fullmatch(key) or not isinstance(value, str) or "\0" in value:
            raise ContainerOptionsError(f"environment variable {key!r}: a plain name and a "
                                        "string value")
    for key, value in labels.items():
        if not _LABEL.fullmatch(key) or not isinstance(value, str) or len(value) > 1024:
            raise ContainerOptionsError(f"label {key!r}: a plain name and a short string")
    memory = f"{limits.memory_mb}m"
    environment = {"HOME": WORK_DIR, "TMPDIR": WORK_DIR, **env, **(proxy_env or {})}
    return {
        "image": image,
        # the argv is the whole command: an image's entrypoint never runs first
        "entrypoint": [argv[0]],
        "command": list(argv[1:]),
        "user": ACTION_USER,
        "working_dir": WORK_DIR,
        "environment": environment,
        "read_only": True,
        "tmpfs": {WORK_DIR: f"rw,nosuid,nodev,size={memory},mode=0700,U"},
        "mounts": [dict(m) for m in mounts],
        "network_mode": "none",
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "mem_limit": memory,
        "memswap_limit": memory,
        "nano_cpus": int(limits.cpus * 1e9),
        "ulimits": [{"name": "nproc", "soft": limits.pids, "hard": limits.pids},
                    {"name": "nofile", "soft": OPEN_FILES, "hard": OPEN_FILES}],
        "labels": dict(labels),
        "log_config": {"type": "none"},
        "stdin_open": False,
        "tty": False,
        "detach": True,
    }


def api_arguments(opts: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``container_options`` split for the SDK's low-level calls (pure): the
    keyword arguments of ``APIClient.create_container`` and those of
    ``APIClient.create_host_config``. The high-level ``containers.create`` does
    this split too, then inspects the new container, a round trip the runner
    does not need. The SDK's own proxy settings (``~/.docker/config.json``) are
    never added to the environment. Raises ``ContainerOptionsError`` for an
    option it does not place."""
    unknown = sorted(set(opts) - set(CONTAINER_KEYS) - set(HOST_CONFIG_KEYS) - {"detach"})
    if unknown:
        raise ContainerOptionsError(f"container options not placed: {', '.join(unknown)}")
    container = {k: opts[k] for k in CONTAINER_KEYS if k in opts}
    return {**container, "use_config_proxy": False}, {
        k: opts[k] for k in HOST_CONFIG_KEYS if k in opts}
