"""Red-team cases for the unix-socket boundary of ``sandbox exec``, judged from the host.

With ``allowUnixSockets`` listing paths, every other pathname socket the command
could see must be unreachable, wherever it is and whatever happened to its name
since it was bound, and no such host state may refuse a start. Each case binds
real listeners on the host, in a folder outside the writable roots, runs a
command in the sandbox that tries to connect, and judges by what the host's
listeners recorded (never by the command's exit status).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")

CONNECT = """
import socket, sys
for p in sys.argv[1:]:
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(p)
        s.sendall(b"hello")
    except OSError:
        pass
    s.close()
"""


class Listener:
    """A unix stream listener on the host that records every connection."""

    def __init__(self, path: Path) -> None:
        self.hits = 0
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.bind(str(path))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.running = True
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while self.running:
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.hits += 1
            conn.close()

    def close(self) -> None:
        self.running = False
        self.thread.join()
        self.sock.close()


@pytest.fixture
def socks_dir() -> Iterator[Path]:
    """A folder in the home folder, never a writable root."""
    d = Path(tempfile.mkdtemp(prefix=".socket-attacks-", dir=Path.home()))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    p = tmp_path / "proj"
    p.mkdir()
    (p / "connect.py").write_text(CONNECT)
    return p


def run_connect(project: Path, tmp_path: Path, allowed: list[str],
                targets: list[str]) -> subprocess.CompletedProcess[str]:
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({
        "network": {"allowedDomains": [], "deniedDomains": [], "allowUnixSockets": allowed},
        "filesystem": {"denyRead": [], "allowWrite": [str(project)], "denyWrite": []},
    }))
    return subprocess.run(
        [sys.executable, "-m", "agent_sandbox", "exec", "--settings", str(settings),
         "--", sys.executable, "-I", "connect.py", *targets],
        cwd=project, capture_output=True, text=True, timeout=120, check=False)


def test_control_listed_socket_is_reached_and_unlisted_is_not(socks_dir: Path, project: Path,
                                                              tmp_path: Path) -> None:
    """The judge fires: the listed socket records a connection, an unlisted one bound
    before the run records none."""
    (socks_dir / "a").mkdir()
    ok, other = Listener(socks_dir / "a" / "ok.sock"), Listener(socks_dir / "other.sock")
    try:
        run_connect(project, tmp_path, [str(socks_dir / "a" / "ok.sock")],
                    [str(socks_dir / "a" / "ok.sock"), str(socks_dir / "other.sock")])
    finally:
        ok.close()
        other.close()
    assert ok.hits == 1
    assert other.hits == 0


def test_socket_renamed_after_bind_is_masked(socks_dir: Path, project: Path,
                                             tmp_path: Path) -> None:
    (socks_dir / "a").mkdir()
    ok = Listener(socks_dir / "a" / "ok.sock")
    moved = Listener(socks_dir / "tmp.sock")
    os.rename(socks_dir / "tmp.sock", socks_dir / "final.sock")
    try:
        run_connect(project, tmp_path, [str(socks_dir / "a" / "ok.sock")],
                    [str(socks_dir / "a" / "ok.sock"), str(socks_dir / "final.sock")])
    finally:
        ok.close()
        moved.close()
    assert ok.hits == 1  # the run itself worked
    assert moved.hits == 0


def test_socket_in_renamed_folder_is_masked(socks_dir: Path, project: Path,
                                            tmp_path: Path) -> None:
    (socks_dir / "a").mkdir()
    (socks_dir / "d1").mkdir()
    ok = Listener(socks_dir / "a" / "ok.sock")
    moved = Listener(socks_dir / "d1" / "agent.sock")
    (socks_dir / "d1" / "notes.txt").write_text("not only sockets\n")
    os.rename(socks_dir / "d1", socks_dir / "d2")
    try:
        run_connect(project, tmp_path, [str(socks_dir / "a" / "ok.sock")],
                    [str(socks_dir / "a" / "ok.sock"), str(socks_dir / "d2" / "agent.sock")])
    finally:
        ok.close()
        moved.close()
    assert ok.hits == 1
    assert moved.hits == 0


def test_socket_linked_then_unlinked_is_masked(socks_dir: Path, project: Path,
                                               tmp_path: Path) -> None:
    (socks_dir / "a").mkdir()
    ok = Listener(socks_dir / "a" / "ok.sock")
    cm = Listener(socks_dir / "cm.sock.XXXXXXXX")
    os.link(socks_dir / "cm.sock.XXXXXXXX", socks_dir / "cm.sock")
    os.unlink(socks_dir / "cm.sock.XXXXXXXX")
    try:
        run_connect(project, tmp_path, [str(socks_dir / "a" / "ok.sock")],
                    [str(socks_dir / "a" / "ok.sock"), str(socks_dir / "cm.sock")])
    finally:
        ok.close()
        cm.close()
    assert ok.hits == 1
    assert cm.hits == 0


def test_socket_bound_through_proc_self_fd_neither_refuses_nor_is_reached(
        socks_dir: Path, project: Path, tmp_path: Path) -> None:
    """Its bind-time name leads nowhere; the run starts all the same (a connection is
    judged when it is made, by where the socket file is), and it stays unreached."""
    (socks_dir / "a").mkdir()
    deep = socks_dir / "deep"
    deep.mkdir()
    ok = Listener(socks_dir / "a" / "ok.sock")
    dfd = os.open(deep, os.O_RDONLY | os.O_DIRECTORY)
    try:
        via_fd = Listener(Path(f"/proc/self/fd/{dfd}/daemon.sock"))
    finally:
        os.close(dfd)
    try:
        run = run_connect(project, tmp_path, [str(socks_dir / "a" / "ok.sock")],
                          [str(socks_dir / "a" / "ok.sock"), str(deep / "daemon.sock")])
    finally:
        ok.close()
        via_fd.close()
    assert run.returncode == 0, run.stderr
    assert ok.hits == 1
    assert via_fd.hits == 0


def test_unlisted_socket_in_writable_root_is_masked(socks_dir: Path, project: Path,
                                                    tmp_path: Path) -> None:
    """Blocked: a host daemon's socket inside the writable root, and a hard link to it,
    are masked (the command cannot rename or relink them past the mask either)."""
    (socks_dir / "a").mkdir()
    ok = Listener(socks_dir / "a" / "ok.sock")
    daemon = Listener(project / "daemon.sock")
    os.link(project / "daemon.sock", project / "second-name.sock")
    (project / "move.py").write_text(
        "import os\n"
        "for a, b in (('daemon.sock', 'moved.sock'), ('second-name.sock', 'moved2.sock')):\n"
        "    try:\n        os.rename(a, b)\n    except OSError:\n        pass\n"
        "    try:\n        os.link(a, 'l-' + b)\n    except OSError:\n        pass\n"
        + CONNECT.replace("sys.argv[1:]", "['moved.sock', 'moved2.sock', 'l-moved.sock', "
                          "'l-moved2.sock', 'daemon.sock', 'second-name.sock']"))
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({
        "network": {"allowedDomains": [], "deniedDomains": [],
                    "allowUnixSockets": [str(socks_dir / "a" / "ok.sock")]},
        "filesystem": {"denyRead": [], "allowWrite": [str(project)], "denyWrite": []},
    }))
    try:
        subprocess.run([sys.executable, "-m", "agent_sandbox", "exec", "--settings",
                        str(settings), "--", sys.executable, "-I", "move.py"],
                       cwd=project, capture_output=True, timeout=120, check=False)
        run_connect(project, tmp_path, [str(socks_dir / "a" / "ok.sock")],
                    [str(socks_dir / "a" / "ok.sock")])
    finally:
        ok.close()
        daemon.close()
    assert ok.hits == 1
    assert daemon.hits == 0


def test_socket_whose_folder_is_gone_neither_refuses_nor_is_reached(
        socks_dir: Path, project: Path, tmp_path: Path) -> None:
    """A listening socket whose folder was renamed away after the bind: the run
    starts, the listed socket is reached, and the moved one is not, at its new
    place nor at its old name."""
    (socks_dir / "a").mkdir()
    (socks_dir / "app").mkdir()
    ok = Listener(socks_dir / "a" / "ok.sock")
    moved = Listener(socks_dir / "app" / "daemon.sock")
    os.rename(socks_dir / "app", socks_dir / "elsewhere")
    try:
        run = run_connect(project, tmp_path, [str(socks_dir / "a" / "ok.sock")],
                          [str(socks_dir / "a" / "ok.sock"),
                           str(socks_dir / "elsewhere" / "daemon.sock"),
                           str(socks_dir / "app" / "daemon.sock")])
    finally:
        ok.close()
        moved.close()
    assert run.returncode == 0, run.stderr
    assert ok.hits == 1
    assert moved.hits == 0
