"""The proxy run as a service imports nothing from where a sandbox can write.

The unit (and every test and bench that starts the service) runs
``PYTHON -I -m agent_sandbox.runtime.proxy`` from ``/``. Judged from the host:
a package planted in the working directory, or named by ``PYTHONPATH``, leaves
a marker file when it is imported. The control starts the same command
without ``-I`` and shows the plant does fire.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def _plant(tmp_path: Path) -> tuple[Path, Path]:
    """A folder a sandbox could write, holding a fake ``agent_sandbox`` package."""
    writable = tmp_path / "writable"
    pkg = writable / "agent_sandbox"
    pkg.mkdir(parents=True)
    marker = tmp_path / "planted-code-ran"
    (pkg / "__init__.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    return writable, marker


@pytest.mark.parametrize("how", ["cwd", "PYTHONPATH"])
def test_isolated_service_ignores_a_planted_package(tmp_path: Path, how: str) -> None:
    writable, marker = _plant(tmp_path)
    env = {"PATH": "/usr/bin:/bin"}
    if how == "PYTHONPATH":
        env["PYTHONPATH"] = str(writable)
    cwd = writable if how == "cwd" else Path("/")

    def start(*flags: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([sys.executable, *flags, "-m", "agent_sandbox.runtime.proxy",
                               "--help"], cwd=cwd, env=env, capture_output=True, timeout=60)

    # the control: without -I the planted package is what runs
    start()
    assert marker.exists(), "the plant did not fire: this test could not fail"
    marker.unlink()
    r = start("-I")
    assert r.returncode == 0 and b"--settings" in r.stdout
    assert not marker.exists()


def test_inherited_listener_hands_http_to_the_external_proxy(tmp_path: Path) -> None:
    """As the native launcher starts it (listeners as fd:3/fd:4): ``httpProxyPort``
    hands the sandbox's HTTP connections to the external proxy on that port; the
    SOCKS5 listener, with no port given, is decided here."""
    import json
    import socket

    external = socket.socket()
    external.bind(("127.0.0.1", 0))
    external.listen(4)
    settings = tmp_path / "s.json"
    settings.write_text(json.dumps({
        "network": {"allowedDomains": [], "deniedDomains": [],
                    "httpProxyPort": external.getsockname()[1]},
        "filesystem": {"denyRead": [], "allowWrite": [], "denyWrite": []}}))
    lis = [socket.socket(), socket.socket()]
    for s in lis:
        s.bind(("127.0.0.1", 0))
        s.listen(4)
    hport, sport = (s.getsockname()[1] for s in lis)
    p = subprocess.Popen(
        [sys.executable, "-I", "-m", "agent_sandbox.runtime.proxy", "--settings", str(settings),
         "--http", f"fd:{lis[0].fileno()}", "--socks", f"fd:{lis[1].fileno()}", "--no-audit"],
        pass_fds=[s.fileno() for s in lis], stdout=subprocess.PIPE, cwd="/")
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == b"ready"
        for s in lis:
            s.close()
        c = socket.create_connection(("127.0.0.1", hport), timeout=10)
        c.sendall(b"GET http://denied.example/ HTTP/1.1\r\n\r\n")
        external.settimeout(10)
        conn, _ = external.accept()  # reached the external proxy, undecided here
        conn.settimeout(10)
        assert conn.recv(100).startswith(b"GET http://denied.example/")
        conn.close()
        c.close()
        s5 = socket.create_connection(("127.0.0.1", sport), timeout=10)
        s5.sendall(b"\x05\x01\x00\x05\x01\x00\x03\x0edenied.example\x00\x50")
        reply = b""
        while chunk := s5.recv(64):  # the method reply, then the request's, then EOF
            reply += chunk
        assert reply[2:4] == b"\x05\x02"  # SOCKS5 decided here: not allowed
        s5.close()
    finally:
        p.terminate()
        p.wait(timeout=10)
        external.close()


def test_sigterm_taken_by_any_thread_stops_the_service(tmp_path: Path) -> None:
    """The kernel hands a process's SIGTERM to any of its threads. Sent to one of the
    proxy's own threads (``tgkill``), it must still stop the service: the main
    thread used to wait on an Event that only a handler in the main thread would
    set, and stayed there. The control sends it to the main thread."""
    import ctypes
    import json
    import os
    import signal
    import time

    settings = tmp_path / "s.json"
    settings.write_text(json.dumps({"network": {"allowedDomains": ["example.test"],
                                                "deniedDomains": []},
                                    "filesystem": {"denyRead": [], "allowWrite": [],
                                                   "denyWrite": []}}))
    tgkill = ctypes.CDLL(None, use_errno=True).tgkill

    def stopped_after_sigterm(to_main: bool) -> bool:
        proc = subprocess.Popen([sys.executable, "-I", "-m", "agent_sandbox.runtime.proxy",
                                 "--settings", str(settings), "--http", "127.0.0.1:0",
                                 "--no-audit"], cwd="/", stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
            threads = sorted(int(t) for t in os.listdir(f"/proc/{proc.pid}/task"))
            others = [t for t in threads if t != proc.pid]
            assert others, threads  # the listeners' threads
            target = proc.pid if to_main else others[0]
            assert tgkill(proc.pid, target, signal.SIGTERM) == 0, ctypes.get_errno()
            deadline = time.monotonic() + 10
            while proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            return proc.poll() == 0
        finally:
            proc.kill()
            proc.wait()

    assert stopped_after_sigterm(to_main=True)
    assert stopped_after_sigterm(to_main=False)
