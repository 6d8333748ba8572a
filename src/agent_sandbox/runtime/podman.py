"""A private podman service whose only runtime is gVisor, and a ``docker`` SDK
client for it: what the gVisor backend of ``sandbox exec`` and the one-shot
containers of infrastructure actions are driven through.

``PodmanService`` starts ``podman system service`` (podman's Docker API) on a
socket in a private folder, with a containers.conf whose engine runtime is
``runsc`` with its network mode fixed: the Docker API has no runtime flags, and
podman's ignores a container's own runtime, so the service's default is the
only runtime a container created through it can get. ``init_container``
creates a container's processes without starting its command, so that its
network namespace can be furnished from the host first.

It must never fall back to another runtime: a missing ``runsc`` or ``podman``
is a ``SandboxStartError``.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
import time
from typing import Any

from .errors import SandboxStartError

RUNTIME_NAME = "runsc"


def _read(path: str | None) -> str:
    if not path:
        return ""
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return ""


def gvisor_containers_conf(base: str, wrapper: str, name: str = RUNTIME_NAME) -> str:
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
    """A private ``podman system service`` (Docker API) whose runtime is gVisor.

    Its runtime, named ``runsc`` (what a container's inspect reports), is runsc
    with the network mode fixed: ``none`` (no network at all) or, for
    containers whose network namespace is furnished from the host (the egress
    proxy's ports, an action's relayed endpoints), ``host``: gVisor then uses
    the container's own network namespace, which has nothing but loopback and
    what was opened in it.
    """

    def __init__(self, network: str = "none") -> None:
        if network not in ("none", "host"):
            raise ValueError(f"network mode {network!r}: expected none or host")
        runsc = shutil.which("runsc")
        if runsc is None:
            raise SandboxStartError("runsc (gVisor) is not installed: install the runsc "
                                    "package (scripts/bootstrap.sh does)")
        if shutil.which("podman") is None:
            raise SandboxStartError("podman is not installed: install the podman package "
                                    "(scripts/bootstrap.sh does)")
        self.network = network
        self.dir = tempfile.mkdtemp(prefix="agent-sandbox-podman-")
        self.sock = os.path.join(self.dir, "podman.sock")
        wrapper = os.path.join(self.dir, f"runsc-{network}")
        with open(wrapper, "w") as fh:
            fh.write(f'#!/bin/sh\nexec {shlex.quote(runsc)} --network={network} "$@"\n')
        os.chmod(wrapper, 0o700)
        conf = os.path.join(self.dir, "containers.conf")
        with open(conf, "w") as fh:
            fh.write(gvisor_containers_conf(_read(os.environ.get("CONTAINERS_CONF")), wrapper,
                                            RUNTIME_NAME))
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


def service(network: str = "none") -> PodmanService:
    """One private podman service per network mode and process, started on first
    use, stopped at exit."""
    svc = _SERVICES.get(network)
    if svc is None or svc.proc.poll() is not None:
        import atexit

        svc = _SERVICES[network] = PodmanService(network)
        atexit.register(svc.close)
    return svc


def init_container(client: Any, container: Any) -> int:
    """Create the container's processes without starting its command (libpod's
    ``init``) and return the host pid whose network namespace is the
    container's. Raises ``SandboxStartError``."""
    resp = client.api._post(client.api._url("/libpod/containers/{0}/init", container.id))
    if resp.status_code >= 400:
        raise SandboxStartError(f"gVisor container could not be created: {resp.text[:300]}")
    container.reload()
    pid = int(container.attrs.get("State", {}).get("Pid") or 0)
    if pid <= 0:
        raise SandboxStartError("gVisor container has no process to find its network in")
    return pid


def oci_runtime(client: Any, container: Any) -> str:
    """The OCI runtime podman created the container with (libpod's inspect:
    ``OCIRuntime``), or "" when the server does not say."""
    resp = client.api._get(client.api._url("/libpod/containers/{0}/json", container.id))
    if resp.status_code >= 400:
        return ""
    return str(resp.json().get("OCIRuntime") or "")


WAIT_INTERVAL = "5ms"


def wait_exit(client: Any, container: Any, timeout: float | None) -> int:
    """The container's exit status, waiting at most ``timeout`` seconds (libpod's
    ``wait``: the Docker API's polls the container's state every 250 ms, which
    is longer than a short command runs; libpod's takes the interval). Raises
    what ``requests`` raises when the timeout passes or the API is gone."""
    resp = client.api._post(
        client.api._url("/libpod/containers/{0}/wait", container.id),
        params={"condition": ["exited", "stopped"], "interval": WAIT_INTERVAL},
        timeout=timeout)
    if resp.status_code >= 400:
        raise SandboxStartError(f"waiting for the gVisor container failed: {resp.text[:300]}")
    return int(resp.json())
