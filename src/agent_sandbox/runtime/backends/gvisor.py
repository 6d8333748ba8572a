"""The gVisor backend: a one-shot container under ``runsc``, driven through the
``docker`` SDK against podman's Docker API (a ``podman system service`` this
module shares with the action runner: this user's warm service, judged before
every use (``runtime/containers/service.py``), or ``$DOCKER_HOST``). It shares it
because it needs exactly that service (runsc as the only runtime, the network
mode fixed, the socket hidden in every sandbox) and would otherwise pay
podman's start, about a second, on every run.

The root filesystem is the image (``$AGENT_SANDBOX_GVISOR_IMAGE``, default
``localhost/agent-sandbox-base:bookworm``), read-only; the mounts come from the
same plan as bwrap's: the writable roots read-write with the protected set and
``denyWrite`` read-only and denied reads hidden inside them, the working
directory read-only otherwise. Nothing else of the host is visible. The network
policy is bwrap's too: when the settings allow any domain, the container is
created (not started), the egress proxy's ports are opened in its own network
namespace (loopback only) and served from here, and gVisor uses that namespace
(``runsc --network=host`` inside it); the command then starts with the proxy
variables set. Otherwise, and through a ``$DOCKER_HOST`` whose runtime cannot
be chosen, it has no network at all.

It never runs the command outside a sandbox: a missing image or API is a
``SandboxStartError``.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from typing import Any

from ..bwrap.owed import settle_or_refuse
from ..bwrap.plan import Plan
from ..containers import podman
from ..containers.podman import Service, docker_client, import_docker, init_container, wait_exit
from ..containers.podman import service as _service
from ..failures import TIMED_OUT, SandboxStartError
from ..limits import DEFAULT_FILE_SIZE, DEFAULT_PROCESSES, host_memory
from ..output import BoundedOutput
from ..private_state import private_paths
from ..result import CompletedRun, bounded, completed
from ..settings import Settings
from .base import OUTPUT_LIMIT, Backend

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..broker.pinned import Pin

GVISOR_IMAGE = "localhost/agent-sandbox-base:bookworm"


def gvisor_mounts(plan: Plan, cwd: str) -> list[dict[str, Any]]:
    """Docker ``Mounts`` for a bwrap plan (pure).

    The container's root is the image, so only what the plan makes writable is
    brought in (read-write), with the plan's read-only and hidden paths inside
    it; the working directory comes in read-only when it is not writable. One
    mount per target: the strongest operation on a path wins (deny over allow).
    """
    by_target: dict[str, dict[str, Any]] = {}
    roots = plan.writable_roots
    inside = [m for m in plan.mounts
              if any(m.path == r or m.path.startswith(r.rstrip("/") + "/") for r in roots)]
    for m in inside:  # plan order: shallow to deep, hide < show < rw < ro on a path
        if m.op == "rw":
            by_target[m.path] = {"Type": "bind", "Source": m.path, "Target": m.path,
                                 "ReadOnly": False}
        elif m.op in ("ro", "show"):
            by_target[m.path] = {"Type": "bind", "Source": m.path, "Target": m.path,
                                 "ReadOnly": True}
        elif m.op == "hide":
            by_target[m.path] = (
                {"Type": "tmpfs", "Target": m.path, "ReadOnly": True} if m.kind == "d"
                else {"Type": "bind", "Source": "/dev/null", "Target": m.path, "ReadOnly": True})
    if not any(cwd == r or cwd.startswith(r.rstrip("/") + "/") for r in roots):
        # read-only, with what the plan hides below it hidden here too (denied reads,
        # credentials, the runtime's private state); inside a hidden folder, nothing
        hidden_above = any(m.op == "hide" and (cwd == m.path or cwd.startswith(
            m.path.rstrip("/") + "/")) for m in plan.mounts)
        by_target.setdefault(cwd, {"Type": "tmpfs", "Target": cwd, "ReadOnly": True}
                             if hidden_above else
                             {"Type": "bind", "Source": cwd, "Target": cwd, "ReadOnly": True})
        below = [] if hidden_above else [
            m for m in plan.mounts if m.op in ("hide", "show") and m.path != cwd
            and m.path.startswith(cwd.rstrip("/") + "/")]
        for m in below:  # plan order: a folder shown inside a hidden one comes after it
            by_target[m.path] = (
                {"Type": "bind", "Source": m.path, "Target": m.path, "ReadOnly": True}
                if m.op == "show" else
                {"Type": "tmpfs", "Target": m.path, "ReadOnly": True} if m.kind == "d"
                else {"Type": "bind", "Source": "/dev/null", "Target": m.path,
                      "ReadOnly": True})
    return [by_target[t] for t in sorted(by_target, key=lambda t: (t.count("/"), t))]


def gvisor_container_options(argv: list[str], plan: Plan, cwd: str,
                             runtime: str | None = "runsc",
                             proxy: bool = False,
                             limits: tuple[int | None, int | None, int | None] = (None,) * 3
                             ) -> dict[str, Any]:
    """The docker SDK ``containers.create`` keyword arguments (pure).

    ``proxy``: the command may reach the egress proxy (its ports are opened from
    the host in the container's network namespace before the command starts;
    see ``PodmanService``): it gets the proxy variables.
    """
    from ..bwrap import argv as bwargv

    opts: dict[str, Any] = {
        "image": os.environ.get("AGENT_SANDBOX_GVISOR_IMAGE", GVISOR_IMAGE),
        "command": argv,
        "working_dir": cwd,
        "mounts": gvisor_mounts(plan, cwd),
        "network_mode": "none",
        **({"runtime": runtime} if runtime else {}),
        "read_only": True,
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        # the run's limits (runtime.limits), as the container's
        "pids_limit": limits[0] or DEFAULT_PROCESSES,
        "mem_limit": limits[1] or host_memory() // 2,
        "ulimits": [{"name": "fsize", "soft": limits[2] or DEFAULT_FILE_SIZE,
                     "hard": limits[2] or DEFAULT_FILE_SIZE}],
        "detach": True,
    }
    if proxy:
        opts["environment"] = {k: v for k, v in bwargv.proxy_env().items()
                               if k != "GIT_SSH_COMMAND"}
    return opts


def run_gvisor(argv: list[str], settings: Settings, cwd: str, home: str, *,
               timeout: float | None, capture: bool,
               output_limit: int) -> CompletedRun:
    from agent_sandbox import contract

    from ..bwrap import fsview
    from ..bwrap import plan as bw
    from ..bwrap.path_entries import tool_dirs
    from ..bwrap.placeholders import Placeholders
    from ..bwrap.run import runtime_paths
    from ..bwrap.sweep import measure, owe, quarantine, spared
    from ..settings import require_enforceable

    require_enforceable(settings, "gvisor")
    started = time.monotonic()
    service: Service | None = None
    url = os.environ.get("DOCKER_HOST")
    # the proxy needs a private service's runtime for network=host (see PodmanService);
    # through another Docker API the container has no network at all
    wants_proxy = bool(settings.network.allowed_domains) and not url
    if not url:
        service = _service("host" if wants_proxy else "none", home)
        url = service.url
    docker = import_docker(url)
    placeholders = Placeholders(contract.lock_dir(home))
    said_late: list[str] = []
    try:
        settle_or_refuse(placeholders, None, said_late.append)  # as bwrap's start does
    except BaseException:
        placeholders.cleanup()
        raise
    try:
        with placeholders:  # plan under the lock: see Placeholders
            others = placeholders.others()
            # the same protected set as bwrap's: the runtime's own state, lock and
            # installation folders, and the tools on PATH below a writable root
            plan = bw.plan(settings, home=home, cwd=cwd, fs=fsview.RealFs(),
                           protect=runtime_paths(home, settings.source), tools=tool_dirs(),
                           private=private_paths(home))
            relied = [m.path for m in plan.mounts if m.path in others]
            plan = bw.without(plan, placeholders.create(plan.placeholders, relied))
            guarded, before = measure(plan, relied)
    except BaseException:
        placeholders.cleanup()
        raise
    container = None
    proxy = None
    out = bounded(output_limit)
    close_audit: Callable[[], None] = lambda: None  # noqa: E731
    notes = "".join(said_late).encode()
    skip = spared(plan, guarded)
    # owed until this run's sweep is done: a caller killed meanwhile leaves its
    # container running under the service; the next start ends it, then sweeps
    box = f"agent-sandbox-{os.path.basename(placeholders.record).replace('.', '-')}"
    owed = ""
    try:
        try:
            owed = owe(placeholders.dir, os.path.basename(placeholders.record), home,
                       plan.writable_roots, before, skip, container=(url, box))
            client = docker_client(url, max(60, int(timeout or 0) + 30))
            opts = gvisor_container_options(argv, plan, cwd, proxy=wants_proxy,
                                            runtime=None if service else "runsc",
                                            limits=settings.limits)
            container = client.containers.create(name=box, **opts)
            if wants_proxy:
                proxy, close_audit = _gvisor_proxy(client, container, settings)
            container.start()
        except (docker.errors.DockerException, OSError) as exc:
            raise SandboxStartError(f"gVisor container could not start: {exc}") from None
        timed_out = False
        try:
            if service is not None:  # podman: libpod's wait, without the 250 ms polls
                rc = wait_exit(client, container.id, timeout)
            else:  # any Docker API
                rc = int(container.wait(timeout=timeout).get("StatusCode", 1))
        except Exception:  # the wait timed out (requests raises its own types)
            timed_out = True
            with contextlib.suppress(Exception):
                container.kill()
            rc = TIMED_OUT
        _logs(container, out, capture)
    finally:
        if container is not None:
            with contextlib.suppress(Exception):
                if service is None or not podman.remove(client, container.id):
                    container.remove(force=True)
        if proxy is not None:
            proxy.stop()
        close_audit()
        roots = [w for w in plan.writable_roots if os.path.isdir(w)]
        _, said = quarantine(roots, before, home, skip,
                             lock_dir=placeholders.dir, own=placeholders.record)
        notes += "".join(said).encode()
        if owed:
            with contextlib.suppress(OSError):
                os.unlink(owed)
        placeholders.cleanup()
    if not capture:
        os.write(2, notes)
    return completed(out, rc, time.monotonic() - started, timed_out, "gvisor", notes=notes)


def _logs(container: Any, out: BoundedOutput, capture: bool) -> None:
    """The container's output, streamed: kept within ``out``'s bound when
    captured, else written through as it is read. The container has ended, so
    nothing is followed (podman's follow polls every 250 ms for the end)."""
    for n, fd in ((0, 1), (1, 2)):
        for chunk in container.logs(stdout=n == 0, stderr=n == 1, stream=True,
                                    follow=False):
            if capture:
                out.feed(n, chunk)
            else:
                _write_all(fd, chunk)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _gvisor_proxy(client: Any, container: Any,
                  settings: Settings) -> tuple[Any, Callable[[], None]]:
    """Create (init) the container without starting its command, open the proxy's
    ports in its network namespace and serve them from here: the command finds
    them ready. Any failure here ends the run before the command starts."""
    from ..containers.net import PROXY_PORTS, open_ports, serve_proxy

    pid = podman.namespace_pid(init_container(client, container.id))
    http, socks = open_ports(pid, PROXY_PORTS)
    return serve_proxy(http, socks, settings.network, f"gvisor-{os.getpid()}")


class GvisorBackend(Backend):
    """gVisor behind the ``Backend`` interface: ``run_gvisor`` (the command's
    environment and standard input are the container's own)."""

    name = "gvisor"

    def run(self, argv: list[str], settings: Settings, cwd: str, home: str, *,
            timeout: float | None, capture: bool, env: dict[str, str] | None = None,
            stdin: bytes | None = None, output_limit: int = OUTPUT_LIMIT,
            audit_dir: str | None = None, pin: Pin | None = None) -> CompletedRun:
        return run_gvisor(argv, settings, cwd, home, timeout=timeout, capture=capture,
                          output_limit=output_limit)
