"""The gVisor backend: a one-shot container under ``runsc``, driven through the
``docker`` SDK against podman's Docker API (a ``podman system service`` this
module starts on a private socket, or ``$DOCKER_HOST``).

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
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from typing import Any

from ..bwrap import Plan
from ..errors import TIMED_OUT, SandboxStartError
from ..result import CompletedRun
from ..settings import Settings

GVISOR_IMAGE = "localhost/agent-sandbox-base:bookworm"


def _read(path: str | None) -> str:
    if not path:
        return ""
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return ""


def gvisor_containers_conf(base: str, wrapper: str, name: str = "runsc-nonet") -> str:
    """A containers.conf: ``base`` with ``wrapper`` (runsc with its network mode
    fixed) as the engine's runtime, called ``name``."""
    import re

    lines = [ln for ln in base.splitlines()
             if not re.match(r"\s*runtime\s*=", ln)]
    engine = f'runtime = "{name}"'
    out, seen = [], False
    for ln in lines:
        out.append(ln)
        if ln.strip() == "[engine]":
            out.append(engine)
            seen = True
    if not seen:
        out += ["", "[engine]", engine]
    out += ["", "[engine.runtimes]", f'{name} = ["{wrapper}"]', ""]
    return "\n".join(out)


class PodmanService:
    """A private ``podman system service`` (Docker API) for the gVisor backend.

    Its default runtime is runsc with the network mode fixed (the Docker API has
    no runtime flags, and podman's ignores a container's runtime): ``none`` (no
    network at all) or, for runs that may reach the egress proxy, ``host``: gVisor
    then uses the container's own network namespace, which has nothing but
    loopback and the proxy's ports.
    """

    def __init__(self, network: str = "none") -> None:
        self.dir = tempfile.mkdtemp(prefix="agent-sandbox-podman-")
        self.sock = os.path.join(self.dir, "podman.sock")
        name = "runsc-nonet" if network == "none" else "runsc-netns"
        wrapper = os.path.join(self.dir, name)
        runsc = shutil.which("runsc") or "/usr/bin/runsc"
        with open(wrapper, "w") as fh:
            fh.write(f'#!/bin/sh\nexec {shlex.quote(runsc)} --network={network} "$@"\n')
        os.chmod(wrapper, 0o700)
        conf = os.path.join(self.dir, "containers.conf")
        with open(conf, "w") as fh:
            fh.write(gvisor_containers_conf(_read(os.environ.get("CONTAINERS_CONF")), wrapper,
                                            name))
        env = dict(os.environ, CONTAINERS_CONF=conf)
        self.proc = subprocess.Popen(
            ["podman", "system", "service", "--time=0", f"unix://{self.sock}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        deadline = time.monotonic() + 15
        while not os.path.exists(self.sock):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise SandboxStartError("podman system service did not start (is podman "
                                        "installed and CONTAINERS_CONF set if needed?)")
            time.sleep(0.02)

    @property
    def url(self) -> str:
        return f"unix://{self.sock}"

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


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
        by_target.setdefault(cwd, {"Type": "bind", "Source": cwd, "Target": cwd,
                                   "ReadOnly": True})
    return [by_target[t] for t in sorted(by_target, key=lambda t: (t.count("/"), t))]


def gvisor_container_options(argv: list[str], plan: Plan, cwd: str,
                             runtime: str | None = "runsc",
                             proxy: bool = False) -> dict[str, Any]:
    """The docker SDK ``containers.create`` keyword arguments (pure).

    ``proxy``: the command may reach the egress proxy (its ports are opened from
    the host in the container's network namespace before the command starts;
    see ``PodmanService``): it gets the proxy variables.
    """
    from .. import bwrap_argv as bwargv

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
        "pids_limit": 4096,
        "detach": True,
    }
    if proxy:
        opts["environment"] = {k: v for k, v in bwargv.proxy_env().items()
                               if k != "GIT_SSH_COMMAND"}
    return opts


_SERVICES: dict[str, PodmanService] = {}
_API_VERSIONS: dict[str, str] = {}


def docker_client(url: str, timeout: int) -> Any:
    """A docker SDK client for ``url`` speaking the API version the server
    names in its ``/_ping`` headers, asked once per URL and process. The SDK's
    own negotiation reads ``/version``, which podman answers in about half a
    second (it gathers host information first); its ping takes a millisecond.
    A server that names no version is negotiated with as the SDK does."""
    import docker
    from docker.constants import MINIMUM_DOCKER_API_VERSION

    version = _API_VERSIONS.get(url)
    if version is None:
        probe = docker.APIClient(base_url=url, version=MINIMUM_DOCKER_API_VERSION, timeout=30)
        try:
            resp = probe.get(probe._url("/_ping", versioned_api=False), timeout=30)
            named = resp.headers.get("Api-Version", "") if resp.ok else ""
        except Exception as exc:  # as the SDK reports a failed negotiation
            raise docker.errors.DockerException(
                f"Error while fetching server API version: {exc}") from exc
        finally:
            probe.close()
        version = _API_VERSIONS[url] = named or "auto"
    return docker.DockerClient(base_url=url, version=version, timeout=timeout)


def _service(network: str = "none") -> PodmanService:
    """One private podman service per network mode and process, started on first
    use, stopped at exit."""
    service = _SERVICES.get(network)
    if service is None or service.proc.poll() is not None:
        import atexit

        service = _SERVICES[network] = PodmanService(network)
        atexit.register(service.close)
    return service


def run_gvisor(argv: list[str], settings: Settings, cwd: str, home: str, *,
               timeout: float | None, capture: bool) -> CompletedRun:
    import docker

    from agent_sandbox import contract

    from .. import bwrap as bw
    from .. import fsview
    from ..placeholders import Placeholders
    from ..settings import require_enforceable
    from ..sweep import identities, quarantine

    require_enforceable(settings, "gvisor")
    started = time.monotonic()
    service: PodmanService | None = None
    url = os.environ.get("DOCKER_HOST")
    # the proxy needs a private service's runsc-netns runtime (see PodmanService);
    # through another Docker API the container has no network at all
    wants_proxy = bool(settings.network.allowed_domains) and not url
    if not url:
        service = _service("host" if wants_proxy else "none")
        url = service.url
    placeholders = Placeholders(contract.lock_dir(home))
    try:
        with placeholders:  # plan under the lock: see Placeholders
            others = placeholders.others()
            plan = bw.plan(settings, home=home, cwd=cwd, fs=fsview.RealFs(),
                           private=contract.private_paths(home))
            relied = [m.path for m in plan.mounts if m.path in others]
            plan = bw.without(plan, placeholders.create(plan.placeholders, relied))
            before = identities(plan.before)
    except BaseException:
        placeholders.cleanup()
        raise
    container = None
    proxy = None
    close_audit: Callable[[], None] = lambda: None  # noqa: E731
    notes = b""
    try:
        try:
            client = docker_client(url, max(60, int(timeout or 0) + 30))
            opts = gvisor_container_options(argv, plan, cwd, proxy=wants_proxy,
                                            runtime=None if service else "runsc")
            container = client.containers.create(**opts)
            if wants_proxy:
                proxy, close_audit = _gvisor_proxy(client, container, settings)
            container.start()
        except docker.errors.DockerException as exc:
            raise SandboxStartError(f"gVisor container could not start: {exc}") from None
        timed_out = False
        try:
            result = container.wait(timeout=timeout)
            rc = int(result.get("StatusCode", 1))
        except Exception:  # the wait timed out (requests raises its own types)
            timed_out = True
            with contextlib.suppress(Exception):
                container.kill()
            rc = TIMED_OUT
        out = container.logs(stdout=True, stderr=False) or b""
        err = container.logs(stdout=False, stderr=True) or b""
    finally:
        if container is not None:
            with contextlib.suppress(Exception):
                container.remove(force=True)
        if proxy is not None:
            proxy.stop()
        close_audit()
        roots = [w for w in plan.writable_roots if os.path.isdir(w)]
        _, said = quarantine(roots, before, home, [m.path for m in plan.mounts])
        notes += "".join(said).encode()
        placeholders.cleanup()
    err += notes
    if not capture:
        os.write(1, out)
        os.write(2, err)
    return CompletedRun(rc, out, err, time.monotonic() - started, timed_out, "gvisor")


def _gvisor_proxy(client: Any, container: Any,
                  settings: Settings) -> tuple[Any, Callable[[], None]]:
    """Create (init) the container without starting its command, open the proxy's
    ports in its network namespace and serve them from here: the command finds
    them ready. Any failure here ends the run before the command starts."""
    from agent_sandbox import contract

    from ..netns import open_listeners
    from ..proxy import audit_recorder, refusing, serve

    resp = client.api._post(client.api._url("/libpod/containers/{0}/init", container.id))
    if resp.status_code >= 400:
        raise SandboxStartError(f"gVisor container could not be created: {resp.text[:300]}")
    container.reload()
    pid = int(container.attrs.get("State", {}).get("Pid") or 0)
    if pid <= 0:
        raise SandboxStartError("gVisor container has no process to find its network in")
    try:
        http, socks = open_listeners(pid, (contract.PROXY_HTTP_PORT, contract.PROXY_SOCKS_PORT),
                                     loopback_up=True)
    except OSError as exc:
        raise SandboxStartError(f"gVisor container: {exc}") from None
    close: Callable[[], None] = lambda: None  # noqa: E731
    try:
        record, close = audit_recorder(None)
    except Exception as exc:  # no audit, no egress: every request is refused
        record = refusing(f"the audit log is unavailable ({type(exc).__name__}: {exc})")
    return serve(settings.network, http, socks, record, f"gvisor-{os.getpid()}"), close
