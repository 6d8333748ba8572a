"""The gVisor backend: a one-shot container under ``runsc``, driven through the
``docker`` SDK against podman's Docker API (a ``podman system service`` this
module shares with the action runner: this user's warm service, judged before
every use (``runtime/containers/service.py``), or ``$DOCKER_HOST``). It shares it
because it needs exactly that service (runsc as the only runtime, the network
mode fixed, the socket hidden in every sandbox) and would otherwise pay
podman's start, about a second, on every run.

The root filesystem is the image (``$AGENT_SANDBOX_GVISOR_IMAGE``, default
``localhost/agent-sandbox-base:bookworm``), read-only; the mounts come from the
same plan as bwrap's: the writable roots read-write, each through a private
layer (``containers/layer``: an overlay whose upper layer lives outside the
tree), with ``denyWrite`` and the runtime's own paths read-only and denied reads
hidden inside them, the working directory read-only otherwise. Nothing else of
the host is visible. The command changes its layers alone; after it, what it
wrote is published into the tree, each change judged by the broker's rules
(``broker.publish``), and the git folders it made are judged as a brokered
run's are. Nothing is made in the tree before the run, and nothing is walked
but the layers (and the roots for ``denyRead`` globs, which nothing here can
judge at open). The network
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
from collections.abc import Callable, Mapping, Sequence
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
    from ..bwrap.run_records import RunRecord
    from ..containers.layer import Layers

GVISOR_IMAGE = "localhost/agent-sandbox-base:bookworm"


def gvisor_mounts(plan: Plan, cwd: str, layers: Mapping[str, str] | None = None
                  ) -> list[dict[str, Any]]:
    """Docker ``Mounts`` for a bwrap plan (pure).

    The container's root is the image, so only what the plan makes writable is
    brought in (read-write): from ``layers`` (a writable root -> its private
    layer's overlay, ``containers/layer``) where it has one, with the plan's
    read-only and hidden paths inside it; the working directory comes in
    read-only when it is not writable. One mount per target: the strongest
    operation on a path wins (deny over allow).
    """
    layers = layers or {}
    by_target: dict[str, dict[str, Any]] = {}
    roots = plan.writable_roots
    inside = [m for m in plan.mounts
              if any(m.path == r or m.path.startswith(r.rstrip("/") + "/") for r in roots)]
    for m in inside:  # plan order: shallow to deep, hide < show < rw < ro on a path
        if m.op == "rw":  # a root, or a folder inside one: from the root's layer
            by_target[m.path] = {"Type": "bind", "Source": _in_layer(m.path, layers),
                                 "Target": m.path, "ReadOnly": False}
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


def _in_layer(path: str, layers: Mapping[str, str]) -> str:
    """Where ``path`` (inside a writable root) is in that root's layer, if it has one."""
    root = max((r for r in layers if path == r or path.startswith(r.rstrip("/") + "/")),
               key=len, default=None)
    return path if root is None else layers[root] + path[len(root.rstrip("/")):]


def gvisor_container_options(argv: list[str], plan: Plan, cwd: str,
                             runtime: str | None = "runsc",
                             proxy: bool = False,
                             limits: tuple[int | None, int | None, int | None] = (None,) * 3,
                             layers: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The docker SDK ``containers.create`` keyword arguments (pure).

    ``proxy``: the command may reach the egress proxy (its ports are opened from
    the host in the container's network namespace before the command starts;
    see ``PodmanService``): it gets the proxy variables. ``layers``: the
    writable roots' private layers (``gvisor_mounts``).
    """
    from ..bwrap import argv as bwargv

    opts: dict[str, Any] = {
        "image": os.environ.get("AGENT_SANDBOX_GVISOR_IMAGE", GVISOR_IMAGE),
        "command": argv,
        "working_dir": cwd,
        "mounts": gvisor_mounts(plan, cwd, layers),
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


def _plan(settings: Settings, cwd: str, home: str, record: RunRecord
          ) -> tuple[Plan, tuple[str, ...]]:
    """The plan (under the runs' lock), as bwrap's with a broker: the protected set
    judged by name when what the command wrote is published (``broker.publish``),
    nothing made or walked for it; ``denyRead`` globs found by a walk (nothing
    judges an open here). Returns the plan and the protected paths it keeps from
    being made (the runtime's own, the tools on PATH, what git's configuration names)."""
    from ..bwrap import fsview
    from ..bwrap import plan as bw
    from ..bwrap.path_entries import tool_dirs
    from ..bwrap.run import runtime_paths

    with record:
        plan = bw.plan(settings, home=home, cwd=cwd, fs=fsview.RealFs(skip=[record.dir]),
                       protect=runtime_paths(home, settings.source), tools=tool_dirs(),
                       private=private_paths(home), brokered=True, reads_at_open=False)
    absent = tuple(x for x, _ in plan.absent)
    return bw.without(plan, set(absent) | {m.path for m in plan.mounts
                                           if not os.path.lexists(m.path)}), absent


def _publish(plan: Plan, settings: Settings, cwd: str, home: str, layers: Layers,
             absent: Sequence[str], recorder: Callable[[], Callable[[dict[str, Any]], None]]
             ) -> list[str]:
    """What the command wrote, judged and made in the tree (``broker.publish``); the
    git folders it made judged after, as a brokered run's are; what to say."""
    from agent_sandbox.spec.paths import expand

    from ..broker.judge import Judge
    from ..broker.publish import Publisher
    from ..bwrap.path_entries import path_shadows
    from ..bwrap.sweep import quarantine

    judge = Judge(layers.roots, home, [expand(r, home=home, cwd=cwd)
                                       for r in settings.filesystem.deny_write],
                  (), absent, shadows=path_shadows())
    publisher = Publisher(judge, layers.since_ns)
    for root in layers.roots:
        publisher.publish(layers.upper(root), root)
    notes = [f"sandbox: refused: {why}\n" for _, why in publisher.refused]
    if publisher.refused:
        with contextlib.suppress(Exception):
            record = recorder()
            for path, why in publisher.refused:
                record({"event_kind": "write_refused", "path": path, "reason": why,
                        "published": False})
    _, said = quarantine(layers.roots, {}, home, recorder=recorder,
                         repos=publisher.made.repos)
    return notes + said


def _prepare(settings: Settings, cwd: str, home: str, record: RunRecord,
             said: list[str]) -> tuple[Plan, tuple[str, ...], Layers]:
    """The owed sweeps settled, the plan, and the writable roots' layers mounted (the
    layers of gVisor runs killed before publishing kept first)."""
    from ..bwrap.run_records import run_alive
    from ..containers import layer

    try:
        settle_or_refuse(record, None, said.append)  # as bwrap's start does
        plan, absent = _plan(settings, cwd, home, record)
        roots = [w for w in plan.writable_roots if os.path.isdir(w)]
        base = layer.layers_dir(home, roots)
        said += layer.settle(base, run_alive(record.runs))
        layers = layer.Layers(base, os.path.basename(record.record), roots)
        layers.mount()
    except BaseException:
        record.cleanup()
        raise
    return plan, absent, layers


def _publish_or_keep(ran: bool, plan: Plan, settings: Settings, cwd: str, home: str,
                     layers: Layers, absent: Sequence[str],
                     recorder: Callable[[], Callable[[dict[str, Any]], None]]) -> list[str]:
    """What the command wrote published (``ran``) and the layers gone; kept for review
    when publishing stops."""
    try:
        said = _publish(plan, settings, cwd, home, layers, absent, recorder) if ran else []
        layers.remove()
        return said
    except Exception as exc:  # what was not published is the user's to review
        return [f"sandbox: publishing what the command wrote stopped ({type(exc).__name__}: "
                f"{exc}); what it wrote is kept in {layers.keep()}, part of it may be in the "
                "tree\n"]


def run_gvisor(argv: list[str], settings: Settings, cwd: str, home: str, *,
               timeout: float | None, capture: bool,
               output_limit: int) -> CompletedRun:
    from agent_sandbox import contract

    from ..bwrap.run_records import RunRecord
    from ..bwrap.sweep import owe
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
    record = RunRecord(contract.lock_dir(home))
    said: list[str] = []
    plan, absent, layers = _prepare(settings, cwd, home, record, said)
    merged = layers.merged
    container = None
    proxy = None
    out = bounded(output_limit)
    closes: list[Callable[[], None]] = []
    opened: list[Callable[[dict[str, Any]], None]] = []

    def recorder() -> Callable[[dict[str, Any]], None]:
        """The audit, opened on first use (the refusals' and quarantines' records)."""
        if not opened:
            from ..proxy import audit_recorder

            record, close = audit_recorder(contract.default_audit_dir(home))
            opened.append(record)
            closes.append(close)
        return opened[0]

    # owed until what the command wrote is published: a caller killed meanwhile
    # leaves its container running under the service; the next start ends it, and
    # the next gVisor start keeps its layers for review (``layer.settle``)
    box = f"agent-sandbox-{os.path.basename(record.record).replace('.', '-')}"
    owed = ""
    rc = 1
    timed_out = False
    try:
        try:
            owed = owe(record.dir, os.path.basename(record.record), home,
                       [], {}, (), container=(url, box), brokered=True)
            client = docker_client(url, max(60, int(timeout or 0) + 30))
            opts = gvisor_container_options(argv, plan, cwd, proxy=wants_proxy,
                                            runtime=None if service else "runsc",
                                            limits=settings.limits, layers=merged)
            container = client.containers.create(name=box, **opts)
            if wants_proxy:
                proxy, close_proxy_audit = _gvisor_proxy(client, container, settings)
                closes.append(close_proxy_audit)
            container.start()
        except (docker.errors.DockerException, OSError) as exc:
            raise SandboxStartError(f"gVisor container could not start: {exc}") from None
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
        gone = container is None
        if container is not None:
            with contextlib.suppress(Exception):
                if service is None or not podman.remove(client, container.id):
                    container.remove(force=True)
                gone = True
        if proxy is not None:
            proxy.stop()
        layers.unmount()
        if gone:  # nothing writes to the layers any more
            said += _publish_or_keep(container is not None, plan, settings, cwd, home,
                                     layers, absent, recorder)
            if owed:
                with contextlib.suppress(OSError):
                    os.unlink(owed)
        for close in closes:
            close()
        record.cleanup()
    notes = "".join(said).encode()
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
