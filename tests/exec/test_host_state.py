"""No refusal that ordinary host state causes, and the boundary held meanwhile.

Each case sets up host state a developer's machine has at any moment, then
starts several runs: every one must start (exit 0, nothing said about the
host's state) and still refuse a protected write, judged from the host (the
file is not there afterwards):

- a process whose listening socket file was renamed, and another whose file
  was deleted, while the settings allow unix sockets by path;
- a build creating and deleting folders in the tree while the runs start;
- a podman container running (its sockets, mounts and network namespace).

Other runs over the same tree are ``test_concurrent_runs`` and ``test_one_tree``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import needs_bwrap

from base_image import build as base_image

pytestmark = [needs_bwrap]
SANDBOX = str(Path(sys.executable).parent / "sandbox")
RUNS = 6


def _settings(tmp_path: Path, root: Path, sockets: list[str] | None = None) -> Path:
    data: dict[str, object] = {
        "network": {"allowedDomains": [], "deniedDomains": []},
        "filesystem": {"denyRead": [], "allowWrite": [str(root)], "denyWrite": []}}
    if sockets is not None:
        data["network"] = {**data["network"], "allowUnixSockets": sockets}  # type: ignore[dict-item]
    path = tmp_path / "settings.json"
    path.write_text(json.dumps(data))
    return path


def _runs_start_and_hold(settings: Path, root: Path, extra: str = "true") -> list[str]:
    """``RUNS`` runs at once: each starts, does ``extra``, and tries a protected write;
    what each printed."""
    script = f"{extra}; echo planted > .bashrc 2>/dev/null; mkdir -p d && echo x > d/.envrc; true"
    procs = [subprocess.Popen([SANDBOX, "exec", "--settings", str(settings), "--", "sh", "-c",
                               script], cwd=root, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(RUNS)]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=180)
        outs.append(out)
        assert p.returncode == 0, err
        assert "refused:" in err and "sandbox exec:" not in err, err
    assert not (root / ".bashrc").exists()
    assert not (root / "d/.envrc").exists()
    return outs


def test_sockets_renamed_or_deleted_by_their_processes(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    run = tmp_path / "run"
    run.mkdir()
    servers = []
    for name in ("moved.sock", "gone.sock", "kept.sock"):
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(run / name))
        s.listen(64)  # never accepted: every run's connect waits in the backlog
        servers.append(s)
    os.rename(run / "moved.sock", run / "elsewhere.sock")
    os.unlink(run / "gone.sock")
    settings = _settings(tmp_path, root, [str(run / "kept.sock"), str(run / "moved.sock")])
    probe = (f"{sys.executable} -c \"import socket; s = socket.socket(socket.AF_UNIX); "
             f"s.connect('{run / 'kept.sock'}'); print('connected')\"")
    try:
        assert _runs_start_and_hold(settings, root, probe) == ["connected\n"] * RUNS
    finally:
        for s in servers:
            s.close()


def test_a_build_deleting_folders_while_runs_start(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    (root / "build").mkdir(parents=True)
    stop = threading.Event()

    def churn() -> None:
        n = 0
        while not stop.is_set():
            d = root / "build" / f"out{n % 50}"
            (d / "a/b/c").mkdir(parents=True, exist_ok=True)
            (d / "a/b/c/f.o").write_bytes(b"x")
            shutil.rmtree(d, ignore_errors=True)
            n += 1

    worker = threading.Thread(target=churn)
    worker.start()
    try:
        time.sleep(0.1)
        _runs_start_and_hold(_settings(tmp_path, root), root)
    finally:
        stop.set()
        worker.join()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("podman") is None, reason="podman is installed by make setup")
def test_a_podman_container_running(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    image = base_image()
    env = dict(os.environ, CONTAINERS_CONF=str(Path(__file__).resolve().parents[2]
                                               / "containers.conf"))
    name = f"host-state-{os.getpid()}"
    r = subprocess.run(["podman", "run", "-d", "--rm", "--name", name, "-v",
                        f"{root}:/work", image, "sleep", "300"], capture_output=True,
                       text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    try:
        _runs_start_and_hold(_settings(tmp_path, root), root)
    finally:
        subprocess.run(["podman", "rm", "-f", "-t", "0", name], capture_output=True,
                       timeout=120, env=env)



def test_a_start_whose_bwrap_ended_during_set_up_is_tried_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """bwrap remounts every mount of the host, and one that goes meanwhile (a
    container stopping) ends its set-up: "Unable to apply mount flags". Here bwrap
    is ended at that moment of the first start; nothing had run, the start is tried
    again, and the command runs once and holds its boundary."""
    from agent_sandbox.runtime.bwrap import run as bwrap_run
    from agent_sandbox.runtime.failures import SandboxStartError
    from agent_sandbox.runtime.run import run_sandboxed

    root = tmp_path / "w"
    root.mkdir()
    real = bwrap_run.BwrapRun._release
    ended = []

    def release(self: bwrap_run.BwrapRun, *args: object) -> None:
        if not ended:  # the first set-up ends before the command, as a vanished mount
            ended.append(self.proc.pid)  # makes it: bwrap gone, the gate never opened
            self.proc.kill()
            self.proc.wait()
            raise getattr(bwrap_run, "SetupEnded", SandboxStartError)(
                "the sandbox could not start the command (bwrap said: Unable to apply "
                "mount flags)")
        real(self, *args)

    monkeypatch.setattr(bwrap_run.BwrapRun, "_release", release)
    r = run_sandboxed(["sh", "-c", "echo ran >> runs.txt; echo x > .bashrc"],
                      json.loads(_settings(tmp_path, root).read_text()), cwd=root)
    assert ended, "the first start was not ended"
    assert r.returncode != 125, r.stderr
    assert (root / "runs.txt").read_text() == "ran\n"  # once, after the second start
    assert not (root / ".bashrc").exists()


def test_a_sandbox_ended_before_its_broker_is_armed_is_started_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """bwrap can end between its "ready" and the broker's arming (killed, or its
    set-up failing late): the broker then finds no ``/proc/PID/root``. Nothing ran,
    so the start is tried again, as any set-up that ended; it once failed the run
    with a bare FileNotFoundError instead."""
    from agent_sandbox.runtime.bwrap import run as bwrap_run
    from agent_sandbox.runtime.run import run_sandboxed

    root = tmp_path / "w"
    root.mkdir()
    real = bwrap_run.BwrapRun._release
    ended = []

    def release(self: bwrap_run.BwrapRun, fds: object, binder: object, pid1: int) -> None:
        if not ended and self.broker is not None:
            ended.append(pid1)
            os.kill(pid1, signal.SIGKILL)  # the sandbox's init, and bwrap after it
            self.proc.wait()
            while True:  # until its root is gone (a zombie has none)
                try:
                    os.close(os.open(f"/proc/{pid1}/root", os.O_PATH))
                except OSError:
                    break
                time.sleep(0.01)
        real(self, fds, binder, pid1)  # type: ignore[arg-type]

    monkeypatch.setattr(bwrap_run.BwrapRun, "_release", release)
    r = run_sandboxed(["sh", "-c", "echo ran >> runs.txt"],
                      json.loads(_settings(tmp_path, root).read_text()), cwd=root)
    assert ended, "no brokered start was ended"
    assert r.returncode == 0, r.stderr
    assert (root / "runs.txt").read_text() == "ran\n"


def test_renames_elsewhere_on_the_host_never_fail_an_open(tmp_path: Path) -> None:
    """The broker opens a command's paths with openat2 and RESOLVE_IN_ROOT; the
    kernel answers EAGAIN when any rename on the host happens while it resolves a
    ``..`` (a build, another test, a package manager: a Go build under read globs
    failed so). With a file renamed back and forth in a loop beside it, 1.5 s of
    such opens: none fails (each EAGAIN is tried again)."""
    import errno

    from agent_sandbox.runtime.broker.notify import open_in_root

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a/f").touch()
    stop = threading.Event()

    def churn() -> None:
        while not stop.is_set():
            try:
                os.rename(tmp_path / "a/f", tmp_path / "b/f")
                os.rename(tmp_path / "b/f", tmp_path / "a/f")
            except OSError:
                pass

    worker = threading.Thread(target=churn, daemon=True)
    worker.start()
    root = os.open("/", os.O_PATH)
    failed = opens = 0
    try:
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            opens += 1
            try:
                os.close(open_in_root(root, f"{tmp_path}/a/../b", os.O_PATH))
            except OSError as exc:
                assert exc.errno == errno.EAGAIN, exc
                failed += 1
    finally:
        stop.set()
        worker.join(timeout=10)
        os.close(root)
    assert opens > 1000 and failed == 0, (opens, failed)
