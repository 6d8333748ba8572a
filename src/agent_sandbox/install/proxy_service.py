"""``sandbox install proxy-service``: run the rendered egress-proxy unit, idempotently.

Under systemd (``/run/systemd/system`` exists): reload when the unit file is
new or changed, enable and start it, and restart it when the unit or the
settings file its ``ExecStart`` enforces differ from those it was last
(re)started for (a SHA-256 record in the host state folder). Without an init
system (containers): the unit's ``ExecStart`` in its own session from ``/``,
tracked by a pid file, restarted on the same condition. ``restart=True`` restarts in both cases (the
front ends pass it when the installed package changed).

It reads only files root owns and no one else may write (the unit and the
settings, when it runs as root), and it never renders or edits the unit.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shlex
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass

from agent_sandbox import contract
from agent_sandbox.errors import InstallError
from agent_sandbox.install.hostfiles import read_record, trusted_bytes, write_record

SYSTEMD_MARKER = "/run/systemd/system"


@dataclass(frozen=True)
class Unit:
    """What the step needs from a rendered unit file."""

    path: str
    name: str  # agent-sandbox-proxy.service
    argv: tuple[str, ...]  # ExecStart, split
    settings: str  # the file after --settings
    runtime_dirs: tuple[str, ...]  # RuntimeDirectory=, under /run

    @property
    def stem(self) -> str:
        return self.name.removesuffix(".service")


def read_unit(path: str) -> Unit:
    """Parse the rendered unit: its ExecStart, settings file and runtime folders."""
    text = trusted_bytes(path).decode("utf-8", "replace")
    argv: list[str] = []
    runtime: list[str] = []
    for line in text.splitlines():
        if line.startswith("ExecStart="):
            argv = shlex.split(line[len("ExecStart="):])
        elif line.startswith("RuntimeDirectory="):
            runtime += line[len("RuntimeDirectory="):].split()
    if not argv or not os.path.isabs(argv[0]):
        raise InstallError(f"{path} has no ExecStart with an absolute program")
    if "--settings" not in argv[:-1]:
        raise InstallError(f"{path}: ExecStart names no --settings file")
    settings = argv[argv.index("--settings") + 1]
    bad = [d for d in runtime if d.startswith("/") or ".." in d.split("/")]
    if bad:
        raise InstallError(f"{path}: RuntimeDirectory= must be relative: {bad}")
    return Unit(path, os.path.basename(path), tuple(argv), settings, tuple(runtime))


def settings_digest(unit: Unit) -> str:
    """What the running proxy must have been started with: the unit file and the
    settings file it enforces (a change to either restarts it)."""
    h = hashlib.sha256()
    for path in (unit.path, unit.settings):
        data = trusted_bytes(path)
        h.update(len(data).to_bytes(8, "big") + data)
    return h.hexdigest()


# --- without an init system -------------------------------------------------------------


def _alive(pid: int) -> bool:
    """A live process (a zombie's cmdline is empty) under ``pid``."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return bool(fh.read().strip(b"\0"))
    except OSError:
        return False


def _pid(pidfile: str) -> int | None:
    text = read_record(pidfile)
    return int(text) if text.isdigit() and int(text) > 1 else None


def _stop(pid: int, timeout: float = 5.0) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _alive(pid) and time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.05)
    if _alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def run_detached(unit: Unit, *, restart: bool = False, run_dir: str = "/run",
                 log_dir: str = contract.HOST_AUDIT_DIR, settle: float = 1.0) -> bool:
    """Keep the unit's ExecStart running in its own session. Returns whether it
    (re)started it."""
    pidfile = os.path.join(run_dir, f"{unit.stem}.pid")
    record = os.path.join(run_dir, f"{unit.stem}.settings")
    want = settings_digest(unit)
    pid = _pid(pidfile)
    running = pid is not None and _alive(pid)
    if running and not restart and read_record(record) == want:
        return False
    if running and pid is not None:
        _stop(pid)
    for rel in unit.runtime_dirs:
        os.makedirs(os.path.join(run_dir, rel), mode=0o755, exist_ok=True)
    os.makedirs(log_dir, mode=0o700, exist_ok=True)
    log_path = os.path.join(log_dir, f"{unit.stem}.log")
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o640)
    try:
        proc = subprocess.Popen(list(unit.argv), cwd="/", stdin=subprocess.DEVNULL, stdout=log,
                                stderr=log, start_new_session=True, close_fds=True)
    finally:
        os.close(log)
    write_record(pidfile, str(proc.pid))
    write_record(record, want)
    time.sleep(settle)
    if proc.poll() is not None:
        with open(log_path, encoding="utf-8", errors="replace") as fh:
            tail = "".join(fh.readlines()[-20:])
        raise InstallError(f"{unit.name}: the proxy exited at once ({proc.returncode}):\n{tail}")
    return True


# --- under systemd ----------------------------------------------------------------------


def _systemctl(cmd: Sequence[str], *args: str) -> str:
    proc = subprocess.run([*cmd, *args], capture_output=True, text=True, check=False,
                          timeout=120)
    if proc.returncode != 0 and args[0] not in ("is-active", "is-enabled", "show"):
        raise InstallError(f"systemctl {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc.stdout.strip()


def run_systemd(unit: Unit, *, restart: bool = False,
                state_dir: str = contract.HOST_STATE_DIR,
                systemctl: Sequence[str] = ("systemctl",)) -> bool:
    """Enable and start the unit; reload and restart it when it or its settings
    changed. Returns whether anything changed."""
    changed = False
    record = os.path.join(state_dir, f"{unit.name}.settings")
    want = settings_digest(unit)
    show = _systemctl(systemctl, "show", "--property=LoadState,NeedDaemonReload", unit.name)
    props = dict(line.partition("=")[::2] for line in show.splitlines())
    if props.get("LoadState") != "loaded" or props.get("NeedDaemonReload") == "yes":
        _systemctl(systemctl, "daemon-reload")
        restart = restart or props.get("NeedDaemonReload") == "yes"
        changed = True
    if _systemctl(systemctl, "is-enabled", unit.name) != "enabled":
        _systemctl(systemctl, "enable", unit.name)
        changed = True
    if _systemctl(systemctl, "is-active", unit.name) != "active":
        _systemctl(systemctl, "start", unit.name)
        changed = True
    elif restart or read_record(record) != want:
        _systemctl(systemctl, "restart", unit.name)
        changed = True
    if read_record(record) != want:
        write_record(record, want)
    return changed


def install(unit_path: str, *, supervisor: str = "auto", restart: bool = False,
            log_dir: str = contract.HOST_AUDIT_DIR) -> bool:
    """The step ``sandbox install proxy-service`` runs. Returns whether it changed
    anything."""
    unit = read_unit(unit_path)
    if supervisor == "auto":
        supervisor = "systemd" if os.path.isdir(SYSTEMD_MARKER) else "detached"
    if supervisor == "systemd":
        return run_systemd(unit, restart=restart)
    if supervisor == "detached":
        return run_detached(unit, restart=restart, log_dir=log_dir)
    raise InstallError(f"unknown supervisor {supervisor!r} (auto, systemd or detached)")
