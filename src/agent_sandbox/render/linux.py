"""Renderer for the Linux runtime artifacts.

- ``/etc/agent-sandbox/exec.json``: the bwrap profile ``sandbox exec`` reads
  (backend, settings file, audit folder, seccomp, the protected set it
  enforces, the namespaces it unshares);
- ``/etc/systemd/system/agent-sandbox-proxy.service``: the egress proxy as a
  hardened service (unix socket plus the loopback ports srt is pointed at);
- ``/etc/systemd/system/agent-sandbox-web.service``: when the spec enables it
  (``platforms.linux.web``), ``sandbox serve`` on loopback as the approver account;
- ``/etc/apparmor.d/agent-sandbox-bwrap``: on Ubuntu 24.04+, the AppArmor
  profile that lets bwrap (and only bwrap) create user namespaces.

Pure: (spec, facts) -> artifacts. Never writes files or starts processes.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from typing import Any

from ..contract import APPARMOR_PROFILE, EXEC_PROFILE, PROXY_UNIT, WEB_UNIT
from ..inventory import HostFacts
from ..spec.models import Spec
from ..spec.paths import MANDATORY_DENY_WRITE
from . import Artifact, json_bytes
from .srt import SYSTEM_SETTINGS
from .templating import render_template

BWRAP = "/usr/bin/bwrap"
NAMESPACES = ("user", "pid", "net", "ipc", "uts", "cgroup")


def exec_profile(spec: Spec) -> dict[str, Any]:
    """The document ``sandbox exec`` reads for host-wide runtime choices (pure)."""
    linux = spec.platforms.linux
    return {
        "backend": linux.backend,
        "bwrap": BWRAP,
        "settings": SYSTEM_SETTINGS,
        "auditDir": spec.audit.host_path,
        "seccomp": linux.seccomp,
        "proxySocket": linux.proxy_socket,
        "namespaces": list(NAMESPACES),
        "mandatoryDenyWrite": list(MANDATORY_DENY_WRITE),
    }


def _systemd_dir_name(path: str, base: str) -> str:
    """RuntimeDirectory=/LogsDirectory= take a path relative to /run or /var/log."""
    rel = posixpath.relpath(path, base)
    return rel if not rel.startswith("..") else "agent-sandbox"


def render(spec: Spec, facts: HostFacts) -> Iterable[Artifact]:
    if facts.os != "linux":
        return
    linux = spec.platforms.linux
    yield Artifact(EXEC_PROFILE, json_bytes(exec_profile(spec)), 0o644, "bwrap-profile")
    # The service keeps its own audit chain in a folder of its own, beside the
    # host's: it runs as a dynamic user, and systemd hands a LogsDirectory= to
    # that user (a shared folder would be taken from root's writers).
    logs_dir = _systemd_dir_name(spec.audit.host_path, "/var/log") + "-proxy"
    yield Artifact(PROXY_UNIT, render_template(
        "linux/agent-sandbox-proxy.service.j2",
        python=facts.python,
        settings=SYSTEM_SETTINGS,
        audit_dir=posixpath.join("/var/log", logs_dir),
        proxy_socket=linux.proxy_socket,
        runtime_dir=_systemd_dir_name(posixpath.dirname(linux.proxy_socket), "/run"),
        logs_dir=logs_dir,
        http_port=spec.network.http_proxy_port or 3128,
        socks_port=spec.network.socks_proxy_port or 1080,
    ), 0o644, "systemd-unit")
    if linux.web.enabled:
        yield Artifact(WEB_UNIT, render_template(
            "linux/agent-sandbox-web.service.j2", python=facts.python, user=linux.web.user,
            port=linux.web.port, repos=linux.web.repos,
        ), 0o644, "web-unit")
    if linux.apparmor_userns_profile:
        yield Artifact(APPARMOR_PROFILE, render_template(
            "linux/agent-sandbox-bwrap.apparmor.j2", bwrap=BWRAP, target=APPARMOR_PROFILE,
        ), 0o644, "apparmor-profile")
