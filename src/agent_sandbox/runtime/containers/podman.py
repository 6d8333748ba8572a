"""The ``docker`` SDK against this user's podman service, whose only runtime is
gVisor: what the gVisor backend of ``sandbox exec`` and the one-shot containers
of infrastructure actions are driven through.

``service`` hands out the warm service (``containers.service``: shared by this
user's processes, judged before every use); its runtime, named ``runsc`` (what
a container's inspect reports), is runsc with the network mode fixed: ``none``
(no network at all) or, for containers whose network namespace is furnished
from the host (the egress proxy's ports, an action's relayed endpoints),
``host``: gVisor then uses the container's own network namespace, which has
nothing but loopback and what was opened in it. The Docker API has no runtime
flags, and podman's ignores a container's own runtime, so the service's
default is the only runtime a container created through it can get.

The rest are the calls the SDK makes in more round trips than podman needs:
``inspect`` (libpod's: the OCI runtime and the pid in one answer),
``init_container`` (creates a container's processes without starting its
command, so that its network namespace can be furnished from the host
first), ``attach_output`` (without the SDK's look-up of the container's tty),
``wait_exit`` (libpod's wait) and ``remove`` (one forced removal).

It must never fall back to another runtime: a missing ``runsc`` or ``podman``
is a ``SandboxStartError``.
"""

from __future__ import annotations

import sys
from typing import Any

from ..failures import SandboxStartError
from .service import RUNTIME_NAME, Service, gvisor_containers_conf

__all__ = ["RUNTIME_NAME", "Service", "docker_client", "gvisor_containers_conf", "service"]

_API_VERSIONS: dict[str, str] = {}


def import_docker(url: str = "") -> Any:
    """The ``docker`` package, imported without paramiko unless ``url`` is an
    ``ssh://`` one: the SDK imports its SSH transport (paramiko, and through it
    invoke and yaml: about 140 ms) whenever paramiko is installed, and a unix
    socket never uses it. paramiko stays importable afterwards; an ``ssh://``
    URL in a process that imported the SDK this way is refused by the SDK
    (it asks for paramiko), never served otherwise."""
    if "docker" in sys.modules or url.startswith("ssh://") or "paramiko" in sys.modules:
        import docker

        return docker
    sys.modules["paramiko"] = None  # type: ignore[assignment]  # ImportError for the SDK
    try:
        import docker
    finally:
        if sys.modules.get("paramiko", 0) is None:
            del sys.modules["paramiko"]
    return docker


def docker_client(url: str, timeout: int) -> Any:
    """A docker SDK client for ``url`` speaking the API version the server
    names in its ``/_ping`` headers, asked once per URL and process (or named
    by ``service``, which pings the service before handing it out). The SDK's
    own negotiation reads ``/version``, which podman answers in about half a
    second (it gathers host information first); its ping takes a millisecond.
    A server that names no version is negotiated with as the SDK does."""
    docker = import_docker(url)
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


def service(network: str = "none", home: str | None = None) -> Service:
    """This user's warm podman service for ``network`` (``none`` or ``host``),
    judged before it is handed out, started or replaced when it may not be used
    (``service.shared``). Raises ``SandboxStartError``."""
    from .service import shared

    svc = shared(network, home)
    if svc.api_version:
        _API_VERSIONS[svc.url] = svc.api_version
    return svc


def inspect(client: Any, cid: str) -> dict[str, Any]:
    """libpod's inspect of container ``cid`` (``OCIRuntime``, ``State.Pid``...).
    Raises ``SandboxStartError``."""
    resp = client.api._get(client.api._url("/libpod/containers/{0}/json", cid))
    if resp.status_code >= 400:
        raise SandboxStartError(f"gVisor container could not be inspected: {resp.text[:300]}")
    data = resp.json()
    if not isinstance(data, dict):
        raise SandboxStartError("gVisor container could not be inspected: not an object")
    return data


def init_container(client: Any, cid: str) -> dict[str, Any]:
    """Create container ``cid``'s processes without starting its command
    (libpod's ``init``) and return its inspect, whose ``State.Pid`` is the host
    pid whose network namespace is the container's. Raises
    ``SandboxStartError``."""
    resp = client.api._post(client.api._url("/libpod/containers/{0}/init", cid))
    if resp.status_code >= 400:
        raise SandboxStartError(f"gVisor container could not be created: {resp.text[:300]}")
    return inspect(client, cid)


def namespace_pid(info: dict[str, Any]) -> int:
    """The pid an inspect names for an initialised container (pure). Raises
    ``SandboxStartError``."""
    pid = int((info.get("State") or {}).get("Pid") or 0)
    if pid <= 0:
        raise SandboxStartError("gVisor container has no process to find its network in")
    return pid


def oci_runtime(info: dict[str, Any]) -> str:
    """The OCI runtime podman created the container with (libpod's inspect:
    ``OCIRuntime``), or "" when the server does not say (pure)."""
    return str(info.get("OCIRuntime") or "")


def attach_output(client: Any, cid: str) -> Any:
    """A stream of ``(stdout, stderr)`` chunks of container ``cid`` from now on
    (the Docker API's attach, demultiplexed). The SDK's ``attach`` first
    inspects the container to learn whether it has a tty; these containers
    never have one. podman creates the container's processes (runsc's
    ``create``) when an attach finds it only configured."""
    resp = client.api._post(
        client.api._url("/containers/{0}/attach", cid),
        headers={"Connection": "Upgrade", "Upgrade": "tcp"},
        params={"logs": 0, "stdout": 1, "stderr": 1, "stream": 1}, stream=True)
    from docker.types.daemon import CancellableStream

    return CancellableStream(client.api._read_from_socket(resp, True, False, demux=True), resp)


WAIT_INTERVAL = "5ms"


def wait_exit(client: Any, cid: str, timeout: float | None) -> int:
    """The container's exit status, waiting at most ``timeout`` seconds (libpod's
    ``wait``: the Docker API's polls the container's state every 250 ms, which
    is longer than a short command runs; libpod's takes the interval). Raises
    what ``requests`` raises when the timeout passes or the API is gone."""
    resp = client.api._post(
        client.api._url("/libpod/containers/{0}/wait", cid),
        params={"condition": ["exited", "stopped"], "interval": WAIT_INTERVAL},
        timeout=timeout)
    if resp.status_code >= 400:
        raise SandboxStartError(f"waiting for the gVisor container failed: {resp.text[:300]}")
    return int(resp.json())


def remove(client: Any, cid: str) -> bool:
    """Remove container ``cid`` whatever its state, in one call; True when
    podman says it is gone (removed now, or no such container)."""
    resp = client.api._delete(client.api._url("/containers/{0}", cid),
                              params={"force": True, "v": True})
    code = int(resp.status_code)
    return code < 300 or code == 404


def end_orphan(url: str, name: str, home: str) -> None:
    """End the container ``name`` that a killed gVisor run left running (its API at
    ``url``: this user's warm service, started again when it has stopped since; the
    container outlives it). Raises ``SandboxStartError`` when it cannot be ended."""
    import os

    if url.startswith("unix://") and not os.path.exists(url[len("unix://"):]):
        url = service("host" if "/host-" in url else "none", home).url
    try:
        client = docker_client(url, 60)
        try:
            gone = remove(client, name)
        finally:
            client.close()
    except SandboxStartError:
        raise
    except Exception as exc:  # the SDK's and requests' own types
        raise SandboxStartError(f"the container {name} of a killed run could not be "
                                f"ended: {exc}") from None
    if not gone:
        raise SandboxStartError(f"the container {name} of a killed run could not be removed")
