"""The one-shot container of an infrastructure action: a new container under
gVisor for every call, its output captured and size-limited, removed
afterwards whatever happened.

``run_action_container`` creates the container through the ``docker`` SDK
against this user's warm podman service, whose only runtime is runsc
(``runtime/containers/service.py``, judged before every use), in the fewest
round trips podman needs (``runtime/containers/podman.py``: create, inspect, attach,
start, wait, one forced removal), with the options of ``container_options`` (read-only
root, a tmpfs work folder, uid 65534, no capabilities, the action's limits).
Before the command starts it checks, from podman's own inspect, that the
container's OCI runtime is runsc, and furnishes the container's network
namespace when the action may reach anything: the egress proxy with only the
action's domains allowed, and each ``connect`` endpoint relayed to the same
port on the container's loopback (``runtime/containers/net.py``). Credential
files are mounted read-only for that container alone
(``secret_files.py``). The deadline (``limits.timeout``) kills the container.

It must never run anything outside gVisor: a missing image, podman or runsc,
an API that fails, or a container podman created with another runtime is an
``ActionRunnerError`` and nothing runs. It never leaves a container or a
credential file behind: both are removed on success, failure, timeout and
exception, and a removal that fails is an error.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import SandboxError
from ..runtime.output import BoundedOutput
from ..spec.actions import ActionLimits
from . import container_options as options

RUNTIME = "runsc"
READER_GRACE = 5.0  # seconds the output may still arrive after the container ended
# every action container names the process that runs it ("pid:start time"): a
# container whose runner is gone (killed mid-run) is removed by the next runner
RUNNER_LABEL = "agent-sandbox.action-runner"
_SWEPT: set[str] = set()


class ActionRunnerError(SandboxError):
    """The action's container could not be run; nothing ran outside gVisor."""


class ActionImageMissing(ActionRunnerError):
    """The action's image is not on this host."""


@dataclass(frozen=True)
class ActionRun:
    """What one action container did.

    ``stdout``/``stderr`` are cut at ``limits.output_bytes`` each (``truncated``
    says whether either was); ``output_digest`` covers the full output as the
    container produced it (``runtime.output.output_digest`` of the two whole streams),
    not only what was kept. ``exit_code`` is None when the deadline killed it.
    ``runtime`` is the OCI runtime podman reports for the container."""

    exit_code: int | None
    stdout: bytes
    stderr: bytes
    truncated: bool
    timed_out: bool
    container_id: str
    runtime: str
    duration: float
    output_digest: str


def run_action_container(image: str, argv: list[str], *, limits: ActionLimits,
                         files: dict[str, bytes] | None, env: dict[str, str] | None,
                         egress: list[str], connect: list[str],
                         labels: dict[str, str]) -> ActionRun:
    """Run ``argv`` in a new gVisor container of ``image`` and remove it.

    ``files``: credential files (relative path: content), mounted read-only at
    ``/run/agent-sandbox/credential/<path>``, readable by the container's user
    only; ``env``: non-secret variables (a variable carrying a file's content
    is refused); ``egress``: domains the action may reach through the egress
    proxy; ``connect``: ``host:port`` endpoints relayed to the same port on the
    container's loopback; ``labels``: the container's labels. Raises
    ``ActionRunnerError``."""
    from . import secret_files
    from .container_options import ContainerOptionsError

    started = time.monotonic()
    files = dict(files or {})
    env = dict(env or {})
    try:
        secret_files.check_env(env, files)
        from ..runtime.containers.net import endpoint_ports

        ports = endpoint_ports(connect, proxy=bool(egress))
    except (SandboxError, ValueError) as exc:
        raise ActionRunnerError(f"the action cannot run: {exc}") from None
    staged = None
    try:
        if files:
            from .. import contract

            parent = os.path.join(contract.broker_dir(os.path.expanduser("~")), "mounts")
            staged = secret_files.StagedFiles(files, parent)
        try:
            opts = options.container_options(
                image, argv, limits, env=env, labels={**labels, RUNNER_LABEL: _runner_id()},
                mounts=[staged.mount()] if staged else [],
                proxy_env=_proxy_env() if egress else None)
        except ContainerOptionsError as exc:
            raise ActionRunnerError(f"the action cannot run: {exc}") from None
        return _run(opts, limits, egress, ports, labels, started)
    except secret_files.SecretFilesError as exc:
        raise ActionRunnerError(str(exc)) from None
    finally:
        if staged is not None:
            try:
                staged.remove()
            except secret_files.SecretFilesError as exc:
                raise ActionRunnerError(str(exc)) from None


def _proxy_env() -> dict[str, str]:
    from ..runtime.bwrap.argv import proxy_env

    return {k: v for k, v in proxy_env().items() if k != "GIT_SSH_COMMAND"}


def _run(opts: dict[str, Any], limits: ActionLimits, egress: Sequence[str],
         ports: Sequence[tuple[int, str, int]], labels: Mapping[str, str],
         started: float) -> ActionRun:
    import requests

    from ..runtime.containers import podman

    docker = podman.import_docker()
    networked = bool(egress or ports)
    deadline = started + limits.timeout
    cid = ""
    client = None
    net: _Net | None = None
    failure: BaseException | None = None
    try:
        try:
            svc = podman.service("host" if networked else "none")
            client = podman.docker_client(svc.url, int(limits.timeout) + 60)
            if svc.url not in _SWEPT:  # once per service and process
                sweep_orphans(client)
                _SWEPT.add(svc.url)
            create, host = options.api_arguments(opts)
            cid = str(client.api.create_container(
                host_config=client.api.create_host_config(**host), **create)["Id"])
            runtime = podman.oci_runtime(podman.inspect(client, cid))
            if runtime != RUNTIME:
                raise ActionRunnerError(
                    f"podman created the action's container with the runtime {runtime!r}, "
                    f"not {RUNTIME}: nothing ran (an action runs under gVisor only)")
            if networked:
                pid = podman.namespace_pid(podman.init_container(client, cid))
                net = _Net(pid, egress, ports,
                           labels.get("agent-sandbox.request") or str(os.getpid()))
            out = BoundedOutput(limits.output_bytes)
            stream = podman.attach_output(client, cid)  # creates the sandbox (runsc create)
            reader = threading.Thread(target=_drain, args=(stream, out),
                                      name="agent-sandbox-action-output", daemon=True)
            reader.start()
            client.api.start(cid)
        except docker.errors.ImageNotFound:
            raise ActionImageMissing(
                f"the action image {opts['image']!r} is not on this host: build or load "
                "it first (`podman images` lists what is there)") from None
        except ActionRunnerError:
            raise
        except SandboxError as exc:
            raise ActionRunnerError(f"the action's gVisor container could not start: {exc}"
                                    ) from None
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            raise ActionRunnerError(f"the action's gVisor container could not start "
                                    f"(podman's Docker API): {exc}") from None
        timed_out = False
        exit_code: int | None = None
        try:
            exit_code = podman.wait_exit(client, cid, max(0.001, deadline - time.monotonic()))
        except (requests.exceptions.RequestException, OSError, SandboxError) as exc:
            if time.monotonic() < deadline - 1.0:  # not the deadline: the API failed
                raise ActionRunnerError(f"lost podman's Docker API while the action ran: "
                                        f"{exc}") from None
            timed_out = True
            with contextlib.suppress(Exception):
                client.api.kill(cid)
        duration = time.monotonic() - started
        reader.join(READER_GRACE)
        if reader.is_alive():  # the stream outlived the container: stop reading it
            with contextlib.suppress(Exception):
                stream.close()
        return ActionRun(exit_code=exit_code, stdout=out.stdout, stderr=out.stderr,
                         truncated=out.truncated, timed_out=timed_out,
                         container_id=cid, runtime=runtime, duration=duration,
                         output_digest=out.digest())
    except BaseException as exc:
        failure = exc
        raise
    finally:
        if net is not None:
            net.close()
        if cid:
            _remove(client, cid, failure)


def _runner_id(pid: int | None = None) -> str:
    """``pid:start time`` of a process (this one by default), "" when it is gone."""
    pid = os.getpid() if pid is None else pid
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return ""
    fields = stat[stat.rfind(b")") + 2:].split()
    return f"{pid}:{fields[19].decode()}" if len(fields) > 19 else ""


def sweep_orphans(client: Any) -> list[str]:
    """Remove the action containers whose runner process is gone (killed while
    its action ran); returns their ids. A failure leaves them for the next
    sweep."""
    removed: list[str] = []
    try:
        found = client.containers.list(all=True, filters={"label": RUNNER_LABEL})
    except Exception:
        return removed
    for container in found:
        owner = str((container.labels or {}).get(RUNNER_LABEL, ""))
        pid = owner.partition(":")[0]
        if pid.isdigit() and _runner_id(int(pid)) == owner:
            continue  # its runner still runs it
        with contextlib.suppress(Exception):
            container.remove(force=True)
            removed.append(str(container.id))
    return removed


def _drain(stream: Any, out: BoundedOutput) -> None:
    with contextlib.suppress(Exception):  # the stream ends (or breaks) with the container
        for chunk_out, chunk_err in stream:
            out.feed(0, chunk_out or b"")
            out.feed(1, chunk_err or b"")


def _remove(client: Any, cid: str, failure: BaseException | None) -> None:
    """Remove the container in one forced call, podman's answer saying it is
    gone; a container left behind is an error (unless the run is already
    failing with one)."""
    from ..runtime.containers import podman

    for _ in range(3):
        with contextlib.suppress(Exception):  # judged by podman's answer
            if podman.remove(client, cid):
                return
        time.sleep(0.2)
    if failure is None:
        raise ActionRunnerError(f"the action's container {cid[:12]} could not be "
                                "removed: remove it with `podman rm -f`")


class _Net:
    """The container's network namespace, furnished: the egress proxy (only the
    action's domains) and the relayed endpoints."""

    def __init__(self, pid: int, egress: Sequence[str], ports: Sequence[tuple[int, str, int]],
                 session: str) -> None:
        from ..runtime.containers import net as cn

        network = None
        if egress:
            from ..runtime.settings import parse

            network = parse({"network": {"allowedDomains": list(egress),
                                         "deniedDomains": []}}, "action egress").network
        want = [*(cn.PROXY_PORTS if egress else ()), *(p for p, _, _ in ports)]
        listeners = cn.open_ports(pid, want)
        self.proxy: Any = None
        self._close_audit: Any = None
        if network is not None:
            http, socks, listeners = listeners[0], listeners[1], listeners[2:]
            self.proxy, self._close_audit = cn.serve_proxy(http, socks, network,
                                                           f"action-{session}")
        self.relays = cn.Relays([(s, host, port) for s, (_, host, port)
                                 in zip(listeners, ports, strict=True)])

    def close(self) -> None:
        self.relays.stop()
        if self.proxy is not None:
            self.proxy.stop()
        if self._close_audit is not None:
            self._close_audit()
