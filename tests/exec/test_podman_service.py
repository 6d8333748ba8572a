"""This user's warm podman service (``runtime/containers/service.py``), against real
podman: reused across processes, started once by concurrent first users,
replaced when dead, impersonated or reconfigured, refused in a folder that is
not private, and out of reach from inside ``sandbox exec`` (bwrap and gVisor).
Judged from the host: the pids listening on the socket, the processes alive,
what a connection from the host gets."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import write_settings

from agent_sandbox import contract
from agent_sandbox.runtime.containers import service as ps
from agent_sandbox.runtime.failures import SandboxStartError

REPO = Path(__file__).resolve().parents[2]
SANDBOX = REPO / ".venv" / "bin" / "sandbox"


# -- pure decisions ----------------------------------------------------------------


def _st(mode: int, uid: int) -> os.stat_result:
    return os.stat_result((mode, 0, 0, 1, uid, 0, 0, 0, 0, 0))


def test_folder_problem() -> None:
    assert ps.folder_problem("/f", _st(stat.S_IFDIR | 0o700, 7), 7) == ""
    assert "missing" in ps.folder_problem("/f", None, 7)
    assert "mode 0755" in ps.folder_problem("/f", _st(stat.S_IFDIR | 0o755, 7), 7)
    assert "mode 0710" in ps.folder_problem("/f", _st(stat.S_IFDIR | 0o710, 7), 7)
    assert "uid 8, not 7" in ps.folder_problem("/f", _st(stat.S_IFDIR | 0o700, 8), 7)
    assert "link" in ps.folder_problem("/f", _st(stat.S_IFLNK | 0o700, 7), 7)


def test_file_problem() -> None:
    reg = _st(stat.S_IFREG | 0o600, 7)
    assert ps.file_problem("/c", reg, b"x", "x", 7) == ""
    assert "would write" in ps.file_problem("/c", reg, b"y", "x", 7)
    assert "private" in ps.file_problem("/c", _st(stat.S_IFREG | 0o644, 7), b"x", "x", 7)
    assert "private" in ps.file_problem("/c", _st(stat.S_IFREG | 0o600, 8), b"x", "x", 7)
    assert "missing" in ps.file_problem("/c", None, None, "x", 7)


def test_listener_problem() -> None:
    argv = ps.service_argv("/d")
    assert argv[3] == f"--time={ps.IDLE_SECONDS}" and argv[4] == "unix:///d/api.sock"
    ok = {"uid": 0, "podman": "/usr/bin/podman", "argv": argv, "conf": "/d/containers.conf"}
    assert ps.listener_problem(0, "/usr/bin/podman", argv, "/d/containers.conf", **ok) == ""
    assert "uid 5" in ps.listener_problem(5, "/usr/bin/podman", argv, "/d/containers.conf",
                                          **ok)
    assert "python" in ps.listener_problem(0, "/usr/bin/python3", argv,
                                           "/d/containers.conf", **ok)
    assert "started as" in ps.listener_problem(0, "/usr/bin/podman", argv[:3],
                                               "/d/containers.conf", **ok)
    assert "CONTAINERS_CONF" in ps.listener_problem(0, "/usr/bin/podman", argv, "/x.conf",
                                                    **ok)
    assert "CONTAINERS_CONF" in ps.listener_problem(0, "/usr/bin/podman", argv, None, **ok)


def test_the_service_folder_is_private_state() -> None:
    home = "/home/u"
    assert os.path.abspath(contract.podman_service_dir(home)) in contract.private_paths(home)


# -- real services -------------------------------------------------------------------


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A folder with a short path: a unix socket's path has at most 107 bytes."""
    path = Path(tempfile.mkdtemp(prefix="pm-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def state(short_tmp: Path, monkeypatch: pytest.MonkeyPatch, gvisor_image: str
          ) -> Iterator[Path]:
    """A state folder of the test's own; its services are ended afterwards."""
    monkeypatch.setenv("CONTAINERS_CONF", str(REPO / "containers.conf"))
    monkeypatch.setenv("AGENT_SANDBOX_STATE_DIR", str(short_tmp / "state"))
    yield short_tmp / "state"
    ps.stop_all(str(short_tmp / "state" / "podman"))


def listeners(folder: str) -> list[int]:
    """Pids of live processes whose command line is this folder's service."""
    want = ps.service_argv(folder)
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                argv = (d / "cmdline").read_bytes().split(b"\0")[:-1]
                status = (d / "status").read_text()
            except OSError:
                continue
            if [a.decode() for a in argv] == want and "\nState:\tZ" not in status:
                found.append(int(d.name))
    return found


def ping(url: str) -> bytes:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(5)
        s.connect(url.removeprefix("unix://"))
        s.sendall(b"GET /_ping HTTP/1.0\r\n\r\n")
        return s.recv(200)


USE = textwrap.dedent("""
    from agent_sandbox.runtime.containers.podman import service
    s = service("none")
    print(s.pid, s.url, flush=True)
""")


@pytest.mark.slow
def test_reused_by_this_and_later_processes(state: Path) -> None:
    first = ps.shared("none")
    assert first.api_version and ping(first.url).startswith(b"HTTP/1.0 200 OK")
    folder = Path(first.folder)
    assert folder.parent == state / "podman"
    for f in (folder.parent, folder):
        assert stat.S_IMODE(f.stat().st_mode) == 0o700 and f.stat().st_uid == os.geteuid()
    assert stat.S_ISSOCK((folder / ps.SOCKET).lstat().st_mode)
    conf = (folder / "containers.conf").read_text()
    assert f'runsc = ["{folder}/runsc-none"]' in conf and 'runtime = "runsc"' in conf
    assert "--network=none" in (folder / "runsc-none").read_text()
    assert ps.shared("none").pid == first.pid
    out = subprocess.run([sys.executable, "-c", USE], capture_output=True, text=True,
                         timeout=60, env=dict(os.environ))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(first.pid), first.url]  # another process, same service
    assert listeners(first.folder) == [first.pid]
    # another network mode is another service, in a folder of its own
    host = ps.shared("host")
    assert host.pid != first.pid and host.folder != first.folder


@pytest.mark.slow
def test_concurrent_first_starts_start_one(state: Path) -> None:
    procs = [subprocess.Popen([sys.executable, "-c", USE], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=dict(os.environ))
             for _ in range(4)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    pids = {o.split()[0] for o, _ in outs}
    assert len(pids) == 1
    folder = ps.shared("none").folder
    assert listeners(folder) == [int(pids.pop())]


@pytest.mark.slow
def test_a_dead_service_is_replaced(state: Path) -> None:
    first = ps.shared("none")
    os.kill(first.pid, signal.SIGKILL)  # its socket file stays behind
    deadline = time.monotonic() + 10
    while first.pid in listeners(first.folder) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert os.path.exists(first.url.removeprefix("unix://"))
    again = ps.shared("none")
    assert again.pid != first.pid and listeners(again.folder) == [again.pid]
    assert ping(again.url).startswith(b"HTTP/1.0 200 OK")


IMPOSTOR = textwrap.dedent("""
    import os, socket, sys
    path = sys.argv[1]
    os.unlink(path)
    s = socket.socket(socket.AF_UNIX)
    s.bind(path)
    s.listen(8)
    print("ready", flush=True)
    while True:
        c, _ = s.accept()
        try:
            c.recv(1024)
            c.sendall(b"HTTP/1.0 200 OK\\r\\nApi-Version: 1.41\\r\\n\\r\\nOK")
        except OSError:
            pass
        c.close()
""")


@pytest.mark.slow
def test_an_impostor_on_the_socket_is_never_used_nor_killed(state: Path) -> None:
    first = ps.shared("none")
    sock = first.url.removeprefix("unix://")
    impostor = subprocess.Popen([sys.executable, "-c", IMPOSTOR, sock], stdout=subprocess.PIPE,
                                text=True)
    try:
        assert impostor.stdout is not None and impostor.stdout.readline() == "ready\n"
        # the control: it answers the ping as podman would
        assert ping(first.url).startswith(b"HTTP/1.0 200 OK\r\nApi-Version")
        problem, pid, _ = ps.judge(first.folder, ps.expected("none")[0])
        assert pid == impostor.pid and "python" in problem, problem
        again = ps.shared("none")
        assert again.pid not in (impostor.pid, first.pid)
        assert listeners(again.folder) == [again.pid]  # podman, started afresh
        assert impostor.poll() is None  # not ours to end
        assert first.pid not in listeners(first.folder)  # the old service was ended
    finally:
        impostor.kill()
        impostor.wait()


@pytest.mark.slow
def test_a_service_whose_conf_was_changed_is_replaced(state: Path) -> None:
    first = ps.shared("none")
    conf = Path(first.folder) / "containers.conf"
    good = conf.read_text()
    conf.write_text(good.replace('runtime = "runsc"', 'runtime = "runc"'))
    again = ps.shared("none")
    assert again.pid != first.pid and conf.read_text() == good
    assert first.pid not in listeners(first.folder)


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["mode", "owner", "link"])
def test_a_folder_that_is_not_private_is_refused(state: Path, short_tmp: Path,
                                                 damage: str) -> None:
    base = state / "podman"
    if damage == "link":
        real = short_tmp / "elsewhere"
        real.mkdir(mode=0o700)
        state.mkdir(parents=True, exist_ok=True)
        base.symlink_to(real)
    else:
        base.mkdir(parents=True, mode=0o700)
        if damage == "mode":
            base.chmod(0o755)
        else:
            if os.geteuid() != 0:
                pytest.skip("giving a folder to another user needs root")
            os.chown(base, 65534, 65534)
    with pytest.raises(SandboxStartError, match="cannot be trusted"):
        ps.shared("none")
    found = list((short_tmp / "elsewhere").iterdir()) if damage == "link" else list(
        base.iterdir())
    assert found == []  # nothing was started or written there
    # the same one level down, in a service's own folder
    if damage == "mode":
        base.chmod(0o700)
        first = ps.shared("none")
        Path(first.folder).chmod(0o750)
        with pytest.raises(SandboxStartError, match="mode 0750"):
            ps.shared("none")


PROBE = textwrap.dedent("""
    import os, socket, sys
    folder, sock = sys.argv[1], sys.argv[2]
    try:
        print("listing", sorted(os.listdir(folder)))
    except OSError as e:
        print("listing refused", e.errno)
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(5)
    try:
        s.connect(sock)
        s.sendall(b"GET /_ping HTTP/1.0\\r\\n\\r\\n")
        print("reached", s.recv(100))
    except OSError as e:
        print("connect refused", e.errno)
""")


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["bwrap", "gvisor"])
def test_unreachable_from_inside_sandbox_exec(short_tmp: Path, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch,
                                              gvisor_image: str, backend: str) -> None:
    """The service's folder lies inside the run's writable root, and the settings
    allow every unix socket: the sandboxed command still finds an empty folder
    and no socket, while the same probe on the host reaches podman."""
    work = short_tmp / "w"
    work.mkdir()
    state = work / "state"
    monkeypatch.setenv("CONTAINERS_CONF", str(REPO / "containers.conf"))
    monkeypatch.setenv("AGENT_SANDBOX_STATE_DIR", str(state))
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    try:
        svc = ps.shared("none")
        sock = svc.url.removeprefix("unix://")
        folder = str(state / "podman")
        host = subprocess.run([sys.executable, "-c", PROBE, folder, sock],
                              capture_output=True, text=True, timeout=30)
        assert "reached b'HTTP/1.0 200 OK" in host.stdout  # the control
        s = write_settings(tmp_path / "s.json", {
            "network": {"allowedDomains": [], "deniedDomains": [],
                        "allowAllUnixSockets": True, "allowUnixSockets": [sock]},
            "filesystem": {"allowWrite": [str(work)], "allowRead": [folder]}})
        py = sys.executable if backend == "bwrap" else "python3"
        argv = [str(SANDBOX), "exec", "--settings", str(s),
                *(["--backend", "gvisor"] if backend == "gvisor" else []),
                "--", py, "-I", "-c", PROBE, folder, sock]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=180, cwd=work,
                           env=dict(os.environ))
        assert "listing" in r.stdout, (r.stdout, r.stderr)
        assert "listing []" in r.stdout or "listing refused" in r.stdout
        assert "connect refused 2" in r.stdout, r.stdout  # ENOENT: no socket there at all
        assert "reached" not in r.stdout
        if backend == "gvisor":  # the run itself went through that very service
            assert ps.shared("none").pid == svc.pid
    finally:
        ps.stop_all(str(state / "podman"))


def test_a_long_state_folder_puts_the_service_in_the_runtime_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A unix socket's name holds 107 bytes: a state folder too long for one (a deep
    home, a test's folder) leaves the service in the user's short runtime folder,
    which is hidden in every sandbox all the same; a socket path still too long is
    refused, never truncated."""
    from agent_sandbox import contract

    long_state = tmp_path / ("x" * 80)
    monkeypatch.setenv("AGENT_SANDBOX_STATE_DIR", str(long_state))
    chosen = contract.podman_service_dir(str(tmp_path))
    assert not chosen.startswith(str(long_state))
    assert len(os.fsencode(os.path.join(chosen, "none-0123456789ab", "api.sock"))) <= 107
    assert os.path.abspath(chosen) in contract.private_paths(str(tmp_path))
    monkeypatch.setattr(contract, "podman_service_dir", lambda home: str(long_state))
    with pytest.raises(SandboxStartError, match="longer than a unix socket's"):
        ps.shared("none")
