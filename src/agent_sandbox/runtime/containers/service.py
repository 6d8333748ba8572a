"""This user's warm podman service: one ``podman system service`` (podman's
Docker API) whose only runtime is gVisor, shared by every process of the user
that runs a gVisor container (an action's runner, ``sandbox exec --backend
gvisor``). The first process that needs it starts it; it stops itself after
``IDLE_SECONDS`` without a request. A process then pays a ping, not the second
podman takes to start.

Each service has a folder of its own in ``contract.podman_service_dir`` (mode
0700, this user's, hidden in every sandbox: whoever reaches the socket runs
containers as this user, root for a rootful podman), holding the runsc wrapper
(runsc with its network mode fixed), the containers.conf that names it as the
engine's only runtime, the socket and the service's log. The folder's name
carries the network mode and a digest of what the service is started with (the
wrapper, the conf, podman, ``PATH`` and the ``CONTAINERS_*`` variables), so
that a process configured otherwise gets a service of its own.

Before every use, under the folder's lock, the service is judged from what the
host says:

- the folders are directories (not links) of this user, mode 0700; otherwise
  nothing is started or trusted there (``SandboxStartError``);
- the wrapper and the conf are regular files of this user that no one else may
  read, byte for byte what this process would write;
- the socket is a socket of this user, and the process listening on it (the
  peer credentials of a connection, ``SO_PEERCRED``) runs as this user the
  podman this process would run, with exactly the command line and the
  ``CONTAINERS_CONF`` this module starts it with;
- it answers podman's ``/_ping``.

A service that fails any of these (gone, stale, or started by anything else)
is replaced, never used; the lock makes concurrent first starts start one.

Must never hand out a socket it has not judged, start a service outside that
folder, or end a process it has not judged to be one of these services (its
command line names that folder's socket).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shlex
import shutil
import signal
import socket
import stat
import struct
import subprocess
import time
from dataclasses import dataclass

from ... import contract
from ..failures import SandboxStartError

RUNTIME_NAME = "runsc"
IDLE_SECONDS = 300
START_SECONDS = 15.0
PING_SECONDS = 5.0
SOCKET = "api.sock"
SOCKET_PATH_MAX = 107  # bytes of a unix socket's path (sun_path, without its NUL)
CONF = "containers.conf"
LOG = "service.log"
LOCK = "lock"
PID = "pid"  # the pid of the service last started here
_STARTED: list[subprocess.Popen[bytes]] = []  # reaped when they have exited


@dataclass(frozen=True)
class Expected:
    """What a service of this process must be started with (``expected``)."""

    network: str
    podman: str
    wrapper: str  # the wrapper's file name and content
    wrapper_text: str
    conf_text: str
    env: tuple[tuple[str, str], ...]  # PATH and the CONTAINERS_* variables but the conf

    @property
    def key(self) -> str:
        h = hashlib.sha256()
        for part in (self.network, self.podman, self.wrapper_text, self.conf_text,
                     repr(self.env)):
            h.update(part.encode() + b"\0")
        return h.hexdigest()[:12]


@dataclass(frozen=True)
class Service:
    """A judged service: its socket's URL and the Docker API version it names."""

    url: str
    folder: str
    network: str
    pid: int
    api_version: str


def gvisor_containers_conf(wrapper: str, name: str = RUNTIME_NAME) -> str:
    """The service's whole containers.conf (pure): ``wrapper`` (runsc with its network
    mode fixed) as the only runtime, called ``name``, and the caller's own limits for
    the containers (podman's defaults can exceed a host's hard limits, and runc then
    fails with "error setting rlimit").

    Nothing else is taken from anywhere: not from the file ``$CONTAINERS_CONF``
    names, nor ``$CONTAINERS_CONF_OVERRIDE``, nor the user's
    ``~/.config/containers``. Each may lie where a sandbox writes, and a
    containers.conf names programs the service runs as this user (``conmon_path``,
    hooks, runtimes)."""
    return "\n".join(["# written by agent-sandbox for its podman service; nothing else is read",
                      "[containers]", "default_ulimits = []", "", "[engine]",
                      f'runtime = "{name}"', "", "[engine.runtimes]",
                      f'{name} = ["{wrapper}"]', ""])


def service_env(conf: str) -> dict[str, str]:
    """The service's environment: this one without any variable that points podman
    at other configuration (``CONTAINERS_*``, ``XDG_CONFIG_HOME``), and ``conf``."""
    keep = {k: v for k, v in os.environ.items()
            if not k.startswith(("CONTAINERS_", "XDG_CONFIG_")) and k != "REGISTRIES_CONFIG_PATH"}
    return {**keep, "CONTAINERS_CONF": conf}


def service_argv(folder: str) -> list[str]:
    """The service's command line (what its ``/proc/PID/cmdline`` must say)."""
    return ["podman", "system", "service", f"--time={IDLE_SECONDS}",
            f"unix://{os.path.join(folder, SOCKET)}"]


def folder_problem(path: str, st: os.stat_result | None, uid: int) -> str:
    """Why ``path`` (its ``lstat``) is not a private folder of ``uid``, or "" (pure)."""
    if st is None:
        return f"{path} is missing"
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a folder (a link or a file)"
    if st.st_uid != uid:
        return f"{path} belongs to uid {st.st_uid}, not {uid}"
    if stat.S_IMODE(st.st_mode) != 0o700:
        return f"{path} has mode {stat.S_IMODE(st.st_mode):04o}, not 0700"
    return ""


def file_problem(path: str, st: os.stat_result | None, content: bytes | None, want: str,
                 uid: int) -> str:
    """Why the file at ``path`` is not this process's own ``want``, or "" (pure)."""
    if st is None or content is None:
        return f"{path} is missing"
    if not stat.S_ISREG(st.st_mode) or st.st_uid != uid or st.st_mode & 0o077:
        return f"{path} is not a private file of uid {uid}"
    if content != want.encode():
        return f"{path} is not what this process would write"
    return ""


def listener_problem(peer_uid: int, exe: str, cmdline: list[str], conf_env: str | None, *,
                     uid: int, podman: str, argv: list[str], conf: str) -> str:
    """Why the process listening on the socket is not the service this module
    starts, or "" (pure): another user, another program, another command line,
    another containers.conf."""
    if peer_uid != uid:
        return f"the socket's listener runs as uid {peer_uid}, not {uid}"
    if exe != podman:
        return f"the socket's listener is {exe or 'unknown'}, not {podman}"
    if cmdline != argv:
        return f"the socket's listener was started as {shlex.join(cmdline)!r}"
    if conf_env != conf:
        return f"the socket's listener runs with CONTAINERS_CONF={conf_env!r}, not {conf}"
    return ""


def private_folder(path: str) -> str:
    """Create ``path`` (0700) when missing; raise unless it is this user's private
    folder (``folder_problem``)."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st: os.stat_result | None = os.lstat(path)
    except OSError:
        st = None
    problem = folder_problem(path, st, os.geteuid())
    if problem:
        raise SandboxStartError(
            f"the podman service's folder cannot be trusted: {problem}; nothing was started "
            "there (make it a folder of this user, mode 0700, or remove it)")
    return path


def expected(network: str) -> tuple[Expected, str]:
    """What a service for ``network`` must be started with, and its folder's
    name. Raises ``SandboxStartError`` when podman or runsc is missing."""
    if network not in ("none", "host"):
        raise ValueError(f"network mode {network!r}: expected none or host")
    runsc = shutil.which("runsc")
    if runsc is None:
        raise SandboxStartError("runsc (gVisor) is not installed: install the runsc "
                                "package (scripts/bootstrap.sh does)")
    podman = shutil.which("podman")
    if podman is None:
        raise SandboxStartError("podman is not installed: install the podman package "
                                "(scripts/bootstrap.sh does)")
    base = ""  # the service's configuration is ours alone (gvisor_containers_conf)
    env = tuple(sorted((k, v) for k, v in os.environ.items() if k == "PATH"))
    wrapper_text = f'#!/bin/sh\nexec {shlex.quote(runsc)} --network={network} "$@"\n'
    partial = Expected(network, os.path.realpath(podman), f"runsc-{network}", wrapper_text,
                       base, env)
    name = f"{network}-{partial.key}"
    return partial, name


def _conf_text(exp: Expected, folder: str) -> str:
    return gvisor_containers_conf(os.path.join(folder, exp.wrapper))


def _read(path: str | None) -> str:
    if not path:
        return ""
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return ""


def _read_private(path: str) -> tuple[os.stat_result | None, bytes | None]:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None, None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > 1 << 20:
            return st, None
        with os.fdopen(os.dup(fd), "rb") as fh:
            return st, fh.read()
    finally:
        os.close(fd)


def _proc(pid: int) -> tuple[str, list[str], str | None]:
    """The executable, command line and ``CONTAINERS_CONF`` of ``pid``."""
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmdline = [a.decode("utf-8", "replace") for a in fh.read().split(b"\0")[:-1]]
        with open(f"/proc/{pid}/environ", "rb") as fh:
            env = fh.read().split(b"\0")
    except OSError:
        return "", [], None
    conf = next((e[len(b"CONTAINERS_CONF="):].decode("utf-8", "replace") for e in env
                 if e.startswith(b"CONTAINERS_CONF=")), None)
    return exe, cmdline, conf


def judge(folder: str, exp: Expected) -> tuple[str, int, str]:
    """``(problem, listener pid, API version)`` of the service in ``folder``;
    ``problem`` is "" for a service that may be used. Reads the host, changes
    nothing (the ping is podman's own no-op)."""
    uid = os.geteuid()
    for name, want in ((exp.wrapper, exp.wrapper_text), (CONF, _conf_text(exp, folder))):
        path = os.path.join(folder, name)
        problem = file_problem(path, *_read_private(path), want, uid)
        if problem:
            return problem, 0, ""
    sock_path = os.path.join(folder, SOCKET)
    try:
        st = os.lstat(sock_path)
    except OSError:
        return "no service is listening (no socket)", 0, ""
    if not stat.S_ISSOCK(st.st_mode) or st.st_uid != uid:
        return f"{sock_path} is not a socket of uid {uid}", 0, ""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(PING_SECONDS)
        try:
            conn.connect(sock_path)
            pid, peer_uid, _ = struct.unpack(
                "3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
        except OSError as exc:
            return f"no service is listening ({exc.strerror or exc})", 0, ""
        problem = listener_problem(peer_uid, *_proc(pid), uid=uid, podman=exp.podman,
                                   argv=service_argv(folder),
                                   conf=os.path.join(folder, CONF))
        if problem:
            return problem, pid, ""
        try:
            conn.sendall(b"GET /_ping HTTP/1.0\r\nHost: d\r\n\r\n")
            answer = b""
            while chunk := conn.recv(4096):
                answer += chunk
                if len(answer) > 65536:
                    break
        except OSError as exc:
            return f"the service did not answer its ping ({exc})", pid, ""
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    if not lines[0].startswith("HTTP/1.") or lines[0].split()[1:2] != ["200"] or body != b"OK":
        return f"the service answered its ping with {lines[0][:80]!r}", pid, ""
    version = next((ln.split(":", 1)[1].strip() for ln in lines[1:]
                    if ln.lower().startswith("api-version:")), "")
    return "", pid, version


def _write_private(path: str, text: str, mode: int) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 mode)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)


def _end(pid: int, folder: str) -> None:
    """End the service ``pid`` if it is one of ours for ``folder`` (its command
    line says so), and wait a little for it to go."""
    if pid <= 0 or _proc(pid)[1] != service_argv(folder):
        return
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _proc(pid)[1] == service_argv(folder):
        _reap()
        time.sleep(0.02)


def _reap() -> None:
    for proc in list(_STARTED):
        if proc.poll() is not None:
            _STARTED.remove(proc)


def _start(folder: str, exp: Expected) -> subprocess.Popen[bytes]:
    """Write the wrapper and the conf afresh and start the service in ``folder``."""
    _write_private(os.path.join(folder, exp.wrapper), exp.wrapper_text, 0o700)
    conf = os.path.join(folder, CONF)
    _write_private(conf, _conf_text(exp, folder), 0o600)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(folder, SOCKET))
    log = os.open(os.path.join(folder, LOG), os.O_WRONLY | os.O_CREAT | os.O_TRUNC
                  | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        proc = subprocess.Popen(service_argv(folder), executable=exp.podman,
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd="/",
                                env=service_env(conf),
                                start_new_session=True)
    finally:
        os.close(log)
    _STARTED.append(proc)
    _write_private(os.path.join(folder, PID), f"{proc.pid}\n", 0o600)
    return proc


def _started_pid(folder: str) -> int:
    _, content = _read_private(os.path.join(folder, PID))
    text = (content or b"").decode("ascii", "replace").strip()
    return int(text) if text.isdigit() else 0


def _log_tail(folder: str) -> str:
    text = _read(os.path.join(folder, LOG)).strip()
    return f": {text[-300:]}" if text else ""


def shared(network: str = "none", home: str | None = None) -> Service:
    """This user's service for ``network`` (``none`` or ``host``, see
    ``podman.service``), judged, and started or replaced when it may not be
    used. Raises ``SandboxStartError``."""
    exp, name = expected(network)
    base = private_folder(contract.podman_service_dir(home or os.path.expanduser("~")))
    folder = os.path.join(base, name)
    sock = os.path.join(folder, SOCKET)
    if len(os.fsencode(sock)) > SOCKET_PATH_MAX:
        raise SandboxStartError(
            f"the podman service's socket path {sock} is longer than a unix socket's "
            f"{SOCKET_PATH_MAX} bytes: set {contract.STATE_DIR_ENV} to a shorter folder")
    lock = os.open(os.path.join(private_folder(folder), LOCK),
                   os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _reap()
        private_folder(folder)  # judged again under the lock
        problem, pid, version = judge(folder, exp)
        if problem:
            _end(pid, folder)  # the listener, if it is a service of ours
            _end(_started_pid(folder), folder)  # and the last one started here
            proc = _start(folder, exp)
            deadline = time.monotonic() + START_SECONDS
            while True:
                problem, pid, version = judge(folder, exp)
                if not problem:
                    break
                if proc.poll() is not None or time.monotonic() > deadline:
                    _end(proc.pid, folder)
                    raise SandboxStartError(
                        f"podman system service did not start ({problem}){_log_tail(folder)}")
                time.sleep(0.02)
        return Service(f"unix://{sock}", folder, network, pid, version)
    finally:
        os.close(lock)


def stop_all(base: str) -> int:
    """End the services in ``base`` (a ``contract.podman_service_dir``: those
    this module started, judged by their command line); returns how many. For
    a teardown: a running action loses its service."""
    try:
        names = os.listdir(base)
    except OSError:
        return 0
    ended = 0
    for name in names:
        folder = os.path.join(base, name)
        sock = os.path.join(folder, SOCKET)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            try:
                conn.connect(sock)
                pid, _, _ = struct.unpack(
                    "3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
            except OSError:
                continue
        if _proc(pid)[1] == service_argv(folder):
            _end(pid, folder)
            ended += 1
    return ended
