"""``sandbox mcp DIR`` with this user's resident server, and without it.

Real stdio sessions with the SDK's client against the launcher exactly as the
clients start it (``contract.self_argv``). Who served a session is judged from
the host: a warm session is a child of the resident while it lasts; a cold one
is not. Every fault of the resident (none, stale, stopped, killed, refused)
must still leave the client a working session.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_sandbox import contract
from agent_sandbox.mcp_launch import resident_file

from .conftest import make_repo

PY = sys.executable
PKG = Path(contract.__file__).resolve().parent
TOOLS = {"run_privileged", "check_request", "sandbox_status", "list_actions", "run_action"}


class Place:
    """A test's state folder and repository, and the installation (``python``)
    whose launcher and resident it runs."""

    def __init__(self, base: Path, repo: Path, python: str = PY) -> None:
        self.base = base
        self.repo = repo
        self.python = python
        self.folder = base / "state" / "mcp"
        if python == PY:
            self.sock = Path(resident_file(".sock"))  # this installation's
            self.log = Path(resident_file(".log"))
        else:
            ask = ("from agent_sandbox.mcp_launch import resident_file as f; "
                   "print(f('.sock')); print(f('.log'))")
            out = subprocess.run([python, "-I", "-c", ask], env=self.env(), text=True,
                                 capture_output=True, check=True).stdout.split("\n")
            self.sock, self.log = Path(out[0]), Path(out[1])
        assert self.sock.parent == self.folder

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
        return {**env, **extra}

    def log_text(self) -> str:
        return self.log.read_text() if self.log.exists() else ""


@pytest.fixture
def place(monkeypatch: pytest.MonkeyPatch) -> Iterator[Place]:
    # short: a unix socket's path has at most 107 bytes
    base = Path(tempfile.mkdtemp(prefix="asm-", dir="/tmp"))
    monkeypatch.setenv(contract.STATE_DIR_ENV, str(base / "state"))
    monkeypatch.delenv(contract.MCP_RESIDENT_ENV, raising=False)
    p = Place(base, make_repo(base / "repo"))
    try:
        yield p
    finally:
        # a launcher starts a resident a moment after a miss (from a forked child that
        # waits first): kill every process started with this test's state folder until
        # none is left, so that no resident outlives its folder (a socket no sandbox can
        # locate then refuses every run that allows sockets by path)
        deadline, quiet = time.monotonic() + 10, 0
        while quiet < 2 and time.monotonic() < deadline:
            found = started_here(p)
            for pid in found:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
                    os.kill(pid, signal.SIGKILL)
            quiet = 0 if found else quiet + 1
            time.sleep(0.1)
        # the state folder stays: a socket a late resident bound there is then still
        # at its name, where a sandbox that allows sockets by path can mask it; gone,
        # it could not be located and every such run on the machine would be refused
        shutil.rmtree(base / "repo", ignore_errors=True)
        shutil.rmtree(base / "venv", ignore_errors=True)


def residents(p: Place) -> list[int]:
    """Every resident server of this test's state folder (starting or listening)."""
    want = f"{contract.STATE_DIR_ENV}={p.base / 'state'}".encode()
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if (d / "cmdline").read_bytes().split(b"\0")[-3:-1] == [b"mcp", b"--resident"] \
                    and want in (d / "environ").read_bytes().split(b"\0"):
                out.append(int(d.name))
        except OSError:
            continue
    return out


def started_here(p: Place) -> list[int]:
    """Every process started with this test's state folder (launchers, the children
    that start a resident after a delay, residents), this one excepted."""
    want = f"{contract.STATE_DIR_ENV}={p.base / 'state'}".encode()
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) != os.getpid():
            with contextlib.suppress(OSError):
                if want in (d / "environ").read_bytes().split(b"\0"):
                    out.append(int(d.name))
    return out


def wait_resident(p: Place, timeout: float = 60.0) -> int:
    """The pid of the resident listening on the socket, once it does (read from
    its log: a probe connection would be one more line there)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = [x for x in p.log_text().splitlines() if " listening on " in x]
        if lines and p.sock.exists():
            pid = int(lines[-1].split("[", 1)[1].split("]", 1)[0])
            if pid in residents(p):
                return pid
        time.sleep(0.05)
    raise AssertionError(f"no resident listening: {p.log_text()}")


def start_resident(p: Place) -> int:
    p.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    subprocess.Popen(contract.self_argv(p.python, "mcp", "--resident"), cwd="/",
                     env=p.env(), start_new_session=True,
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL)
    return wait_resident(p)


def children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]


def session(p: Place, env: dict[str, str], *, cwd: Path | None = None,
            resident: int | None = None, umask: int = 0o022,
            argv: list[str] | None = None) -> dict[str, Any]:
    """One SDK client session against the launcher: what it answered, and the
    resident's children while it lasted."""
    import anyio
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    out: dict[str, Any] = {}

    async def run() -> None:
        full = argv or contract.self_argv(p.python, "mcp", str(p.repo))
        params = StdioServerParameters(command=full[0], args=full[1:], env=env,
                                       cwd=str(cwd or p.repo))
        async with stdio_client(params) as (r, w), ClientSession(r, w) as s:
            init = await s.initialize()
            out["server"] = init.server_info.name
            out["tools"] = {t.name for t in (await s.list_tools()).tools}
            res = await s.call_tool("run_privileged", {"command": "ls -a"})
            out["ls"] = res.content[0].text  # type: ignore[union-attr]
            res = await s.call_tool("run_privileged", {"command": "rm -rf /tmp/x"})
            out["rm"] = res.content[0].text  # type: ignore[union-attr]
            res = await s.call_tool("run_privileged", {"command": "cat /proc/self/environ"})
            out["env"] = res.content[0].text  # type: ignore[union-attr]
            out["children"] = kids = children(resident) if resident else []
            for kid in kids[:1]:
                out["child_cwd"] = os.readlink(f"/proc/{kid}/cwd")
                status = Path(f"/proc/{kid}/status").read_text().splitlines()
                out["child_umask"] = next(x.split()[1] for x in status
                                          if x.startswith("Umask:"))

    old = os.umask(umask)
    try:
        anyio.run(run)
    finally:
        os.umask(old)
    return out


def answered(out: dict[str, Any]) -> None:
    assert out["server"] == "agent-sandbox", out
    assert out["tools"] == TOOLS, out
    assert "exit status: 0" in out["ls"] and ".sandbox" in out["ls"], out
    assert out["rm"].startswith("denied by policy"), out


def test_a_cold_session_starts_the_resident_and_the_next_is_warm(place: Place) -> None:
    assert not residents(place)
    cold = session(place, place.env())  # none yet: served cold, a resident started
    answered(cold)
    pid = wait_resident(place)
    warm = session(place, place.env(), resident=pid)
    answered(warm)
    assert len(warm["children"]) == 1, warm  # the session was the resident's child
    assert residents(place) == [pid]


def test_switched_off_the_session_is_cold_beside_a_resident(place: Place) -> None:
    pid = start_resident(place)
    out = session(place, place.env(**{contract.MCP_RESIDENT_ENV: "off"}), resident=pid)
    answered(out)
    assert out["children"] == [], out
    control = session(place, place.env(), resident=pid)
    answered(control)
    assert len(control["children"]) == 1, control


def test_the_session_gets_the_clients_folder_environment_and_umask(place: Place) -> None:
    pid = start_resident(place)
    sub = place.repo / "sub"
    sub.mkdir()
    env = place.env(PROBE="from-the-client")
    out = session(place, env, cwd=sub, resident=pid, umask=0o027)
    answered(out)
    assert out["child_cwd"] == str(sub), out
    assert "PROBE=from-the-client" in out["env"], out  # what its tools ran with
    assert "PROBE" not in Path(f"/proc/{pid}/environ").read_text()
    assert out["child_umask"] == "0027", out


def test_a_launcher_started_by_hand_shares_the_resident(place: Place) -> None:
    """``sandbox mcp DIR`` typed by a user (the console script, not isolated) has
    the same installed code as the clients' isolated launchers: served warm, and
    the resident stays for the next."""
    script = Path(PY).parent / "sandbox"
    if not script.exists():
        pytest.skip("no sandbox console script beside the interpreter")
    pid = start_resident(place)
    out = session(place, place.env(), resident=pid, argv=[str(script), "mcp", str(place.repo)])
    answered(out)
    assert len(out["children"]) == 1, out
    assert residents(place) == [pid] and "changed" not in place.log_text()


def _plant(folder: Path, marker: Path) -> None:
    """A package named ``agent_sandbox`` mirroring ours, every module of which
    writes ``marker`` when imported."""
    code = f"open({str(marker)!r}, 'w').write('ran on the host')\n"
    for src in PKG.rglob("*.py"):
        dst = folder / "agent_sandbox" / src.relative_to(PKG)
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_text(code)


def test_a_package_planted_in_the_clients_folder_is_never_imported(place: Place) -> None:
    cwd = place.repo / "work"
    cwd.mkdir()
    marker = place.base / "marker"
    _plant(cwd, marker)
    _plant(place.repo, marker)
    env = place.env(PYTHONPATH=str(cwd), PYTHONSTARTUP=str(cwd / "agent_sandbox" /
                                                           "__init__.py"))
    answered(session(place, env, cwd=cwd))  # cold, and starts the resident from here
    pid = wait_resident(place)
    warm = session(place, env, cwd=cwd, resident=pid)
    answered(warm)
    assert len(warm["children"]) == 1, warm
    assert not marker.exists()
    # control: the same folder, not isolated, imports the planted package
    subprocess.run([PY, "-c", "import agent_sandbox"], cwd=cwd, env=env, check=False)
    assert marker.exists()


def own_installation(base: Path) -> tuple[str, Path]:
    """The python and package folder of a second installation of this code: a
    virtualenv with its own copy of the package, the rest read from this one's site
    folder. A test that changes installed files changes these: every other test
    running meanwhile (other workers start residents of this installation) keeps
    its code."""
    venv = base / "venv"
    subprocess.run([PY, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next(venv.glob("lib/python*/site-packages"))
    shutil.copytree(PKG, site / "agent_sandbox", ignore=shutil.ignore_patterns("__pycache__"))
    (site / "deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    where = subprocess.run([venv / "bin" / "python", "-I", "-c",
                            "import agent_sandbox; print(agent_sandbox.__file__)"],
                           capture_output=True, text=True, check=True).stdout.strip()
    assert Path(where).parent == site / "agent_sandbox", where
    return str(venv / "bin" / "python"), site / "agent_sandbox"


def test_a_stale_resident_is_not_used_and_exits(place: Place) -> None:
    python, pkg = own_installation(place.base)
    place = Place(place.base, place.repo, python)
    pid = start_resident(place)
    target = pkg / "__init__.py"
    st = target.stat()
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    try:  # the installed code changed under the resident
        out = session(place, place.env(), resident=pid)
        answered(out)
        assert out["children"] == [], out
        assert "installed code changed" in place.log_text()
        deadline = time.monotonic() + 10
        while pid in residents(place) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pid not in residents(place)
    finally:
        os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    # the code is back as it was: a resident of that code serves again
    for pid in residents(place):
        os.kill(pid, signal.SIGKILL)
    fresh = start_resident(place)
    answered(out := session(place, place.env(), resident=fresh))
    assert len(out["children"]) == 1, out


@pytest.mark.parametrize("fault", ["killed", "stopped"])
def test_a_dead_or_stuck_resident_leaves_the_next_launch_working(place: Place,
                                                                 fault: str) -> None:
    pid = start_resident(place)
    os.kill(pid, signal.SIGKILL if fault == "killed" else signal.SIGSTOP)
    t = time.monotonic()
    out = session(place, place.env(), resident=pid)
    answered(out)
    assert out["children"] == [], out
    assert time.monotonic() - t < 60
    if fault == "stopped":
        os.kill(pid, signal.SIGKILL)
        os.kill(pid, signal.SIGCONT)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)
    answered(session(place, place.env()))  # a dead one's socket: this launch starts one
    again = wait_resident(place)
    assert again != pid
    warm = session(place, place.env(), resident=again)
    answered(warm)
    assert len(warm["children"]) == 1, warm


def _raw_request(sock_path: str) -> str:
    """Code for a peer that sends a well-formed request and prints the answer."""
    return (
        "import array, json, os, socket, sys\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        "s.settimeout(10)\n"
        "try:\n"
        f"    s.connect({sock_path!r})\n"
        "except OSError as e:\n"
        "    print('connect failed', e.errno); sys.exit(0)\n"
        "body = json.dumps({'protocol': 1, 'identity': 'x', 'argv': [], 'env': {},"
        " 'umask': 18, 'limits': []}).encode()\n"
        "fds = array.array('i', [0, 1, 2, os.open('.', os.O_RDONLY)])\n"
        "try:\n"
        "    s.sendmsg([len(body).to_bytes(4, 'big') + body],"
        " [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds.tobytes())])\n"
        "    print('answer', s.recv(1))\n"
        "except OSError:\n"
        "    print('answer reset')\n")


@pytest.mark.skipif(os.geteuid() != 0, reason="switching to another uid needs root")
def test_the_resident_refuses_another_uid(place: Place) -> None:
    pid = start_resident(place)
    code = _raw_request(str(place.sock))
    as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", PY, "-I",
                 "-c", code]
    r = subprocess.run(as_nobody, cwd="/", capture_output=True, text=True, timeout=60)
    assert r.stdout.startswith("connect failed"), r  # 0700 folder, 0600 socket
    # even with the modes loosened, the resident itself refuses the other uid
    place.base.chmod(0o755)
    (place.base / "state").chmod(0o711)
    place.folder.chmod(0o711)
    place.sock.chmod(0o666)
    r = subprocess.run(as_nobody, cwd="/", capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() in ("answer b''", "answer reset"), r
    assert "refused: uid 65534" in place.log_text()
    assert children(pid) == [] and residents(place) == [pid]


def test_a_peer_confined_otherwise_is_refused_and_served_cold(place: Place) -> None:
    """A process in another network namespace (as every sandbox is) that reaches
    the socket anyway gets no session from the resident, and its own cold one works."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs unshare as root")
    pid = start_resident(place)
    launcher = contract.self_argv(PY, "mcp", str(place.repo))
    r = subprocess.run(["unshare", "--net", *launcher], input=INIT, capture_output=True,
                       text=True, env=place.env(), timeout=120)
    assert '"serverInfo"' in r.stdout and "agent-sandbox" in r.stdout, r
    assert "refused: pid" in place.log_text() and "net:" in place.log_text()
    assert children(pid) == []


INIT = ('{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":'
        '"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}\n')


def _sandboxed(argv: list[str], settings: dict[str, Any], place: Place, **kw: Any) -> Any:
    import json

    from agent_sandbox.runtime.failures import InvalidSettingsError
    from agent_sandbox.runtime.run import run_sandboxed

    if shutil.which("bwrap") is None:
        pytest.skip("needs bubblewrap")
    work = place.base / "w"
    work.mkdir(exist_ok=True)
    path = place.base / "settings.json"
    settings = {"network": {"allowedDomains": [], "deniedDomains": [],
                            **settings.get("network", {})},
                "filesystem": {"denyRead": [], "allowWrite": [str(work)], "denyWrite": [],
                               **settings.get("filesystem", {})}}
    path.write_text(json.dumps(settings))
    try:
        return run_sandboxed(argv, str(path), str(work), timeout=120, **kw)
    except InvalidSettingsError as exc:
        if "no longer at the name it was bound to" in str(exc):  # the planner's own rule
            pytest.skip(f"another program's socket cannot be located on this machine: {exc}")
        raise


def test_a_sandboxed_process_cannot_reach_the_resident(place: Place) -> None:
    """Judged from the host: even with settings that allow unix sockets, name the
    resident's own socket and make the state folder writable, nothing inside
    ``sandbox exec`` sees or connects to it."""
    pid = start_resident(place)
    before = place.log_text()
    loose = {"network": {"allowUnixSockets": [str(place.sock)]},
             "filesystem": {"allowWrite": [str(place.base / "w"), str(place.base / "state")]}}
    look = f"import os; print(os.listdir({str(place.folder)!r}))"
    r = _sandboxed([PY, "-I", "-c", look], loose, place)
    assert r.returncode == 0 and r.stdout == b"[]\n", r  # hidden: an empty folder
    r = _sandboxed([PY, "-I", "-c", _raw_request(str(place.sock))], loose, place)
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode().startswith("connect failed"), r.stdout
    time.sleep(0.5)
    assert place.log_text() == before, place.log_text()  # not even a refused connection
    out = session(place, place.env(), resident=pid)  # control: it is listening
    answered(out)
    assert len(out["children"]) == 1


def test_a_launcher_inside_the_sandbox_serves_its_own_session(place: Place) -> None:
    """Without unix sockets (seccomp refuses them) the launcher inside cannot ask
    the resident: it serves the session itself, confined, and starts nothing."""
    pid = start_resident(place)
    before = place.log_text()
    launcher = contract.self_argv(PY, "mcp", str(place.repo))
    r = _sandboxed(launcher, {}, place, stdin=INIT.encode())
    assert b'"serverInfo"' in r.stdout, r
    time.sleep(0.5)
    assert place.log_text() == before, place.log_text()
    assert residents(place) == [pid]


class FakeResident:
    """A listener at the resident's socket that ends each handshake early: at
    once, or after answering ``R`` and reading ``G`` (a child that died before
    taking the session)."""

    def __init__(self, p: Place, until: str) -> None:
        import socket
        import threading

        p.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.bind(str(p.sock))
        self.sock.listen(4)
        self.until, self.seen = until, 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        import socket

        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.seen += 1
            with conn:
                if self.until == "at-once":
                    continue
                _, anc, _, _ = conn.recvmsg(1 << 16, socket.CMSG_SPACE(16))
                for _level, _kind, data in anc:
                    for i in range(0, len(data) - len(data) % 4, 4):
                        os.close(int.from_bytes(data[i:i + 4], sys.byteorder))
                conn.sendall(b"R")
                conn.recv(1)  # G: and then this "child" dies

    def close(self) -> None:
        self.sock.close()


@pytest.mark.parametrize("until", ["at-once", "after-ready"])
def test_a_resident_dying_mid_handshake_leaves_the_session_cold(place: Place,
                                                               until: str) -> None:
    fake = FakeResident(place, until)
    try:
        answered(session(place, place.env()))
        assert fake.seen == 1
    finally:
        fake.close()
