# ruff: noqa: E501
"""Fixtures for the sandbox runtime tests: a private network namespace with an
upstream server, host-side listeners that count what reaches them, and workspaces.

Everything here is created by the fixtures and removed afterwards; no address
outside loopback and the namespaces made here is ever used.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
# the newest srt (scripts/bootstrap.d/35-srt-newest.sh: node 24 from PyPI), else the
# one Debian's node runs; the older one stays for the conformance table's column
SRT_OLDER = REPO / ".tools" / "node_modules" / ".bin" / "srt"
SRT_NEWEST = REPO / ".tools" / "srt-newest" / "srt"
SRT = SRT_NEWEST if SRT_NEWEST.exists() else SRT_OLDER
PY = sys.executable

needs_root = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None,
                                reason="needs root and iproute2 to create a network namespace")
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap missing")

UPSTREAM_SERVER = textwrap.dedent(
    """
    import socket, sys, threading, os
    ip, http_port, raw_port, udp_port, log = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    lock = threading.Lock()
    def note(text):
        with lock, open(log, "a") as fh:
            fh.write(text.replace("\\n", " ") + "\\n")
    def http(conn):
        with conn:
            data = b""
            while b"\\r\\n\\r\\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            line = data.split(b"\\r\\n", 1)[0].decode("latin-1")
            note("HTTP " + line)
            parts = line.split(" ")
            path = parts[1] if len(parts) > 1 else "/"
            if path.startswith("/bytes/"):
                n = int(path.split("/")[2])
                conn.sendall(b"HTTP/1.1 200 OK\\r\\nContent-Length: %d\\r\\nConnection: close\\r\\n\\r\\n" % n)
                chunk = b"x" * 1048576
                while n > 0:
                    conn.sendall(chunk[: min(n, len(chunk))])
                    n -= min(n, len(chunk))
                return
            body = b"upstream-ok " + path.encode()
            conn.sendall(b"HTTP/1.1 200 OK\\r\\nContent-Length: %d\\r\\nConnection: close\\r\\n\\r\\n" % len(body) + body)
    def raw(conn):
        with conn:
            conn.sendall(b"SSH-2.0-upstream-test\\r\\n")
            conn.settimeout(5)
            try:
                data = conn.recv(4096)
            except OSError:
                data = b""
            note("RAW " + data.decode("latin-1", "replace").strip()[:80])
    def serve(port, handler):
        s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((ip, port)); s.listen(64)
        while True:
            c, _ = s.accept()
            threading.Thread(target=handler, args=(c,), daemon=True).start()
    def udp():
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind((ip, udp_port))
        while True:
            data, _ = u.recvfrom(4096)
            note("UDP " + data.decode("latin-1", "replace")[:80])
    threading.Thread(target=serve, args=(raw_port, raw), daemon=True).start()
    threading.Thread(target=udp, daemon=True).start()
    open(log + ".ready", "w").close()
    serve(http_port, http)
    """
)


@dataclass
class Net:
    """The upstream network: a namespace reachable from the host over a veth pair."""

    ns: str
    host_ip: str
    up_ip: str
    http_port: int
    raw_port: int
    udp_port: int
    log: Path
    hosts_file: Path
    names: dict[str, str] = field(default_factory=dict)

    def upstream_lines(self) -> list[str]:
        try:
            return self.log.read_text().splitlines()
        except FileNotFoundError:
            return []

    def saw(self, marker: str) -> bool:
        return any(marker in line for line in self.upstream_lines())


@pytest.fixture(autouse=True)
def no_proxy_of_our_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sandbox's proxy chains through the caller's HTTP(S)_PROXY (srt's
    parentProxy fallback): tests here choose their own, never the machine's."""
    from agent_sandbox.runtime.proxy import PROXY_VARIABLES

    for k in PROXY_VARIABLES:
        monkeypatch.delenv(k, raising=False)


@pytest.fixture(scope="session")
def net(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Net]:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 to create a network namespace")
    from agent_sandbox.hostcheck.netlab import veth_namespace

    d = tmp_path_factory.mktemp("net")
    log = d / "upstream.log"
    # one subnet per xdist worker: two workers' random /24s can never meet
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:]
    subnet = f"10.{231 - int(worker) if worker.isdigit() else 231}"
    with veth_namespace("asx", subnet) as (ns, host_ip, up_ip):
        script = d / "upstream.py"
        script.write_text(UPSTREAM_SERVER)
        proc = subprocess.Popen(["ip", "netns", "exec", ns, PY, str(script), up_ip, "8080",
                                 "2222", "5353", str(log)])
        try:
            deadline = time.monotonic() + 10
            while not Path(str(log) + ".ready").exists():
                assert time.monotonic() < deadline, "upstream server did not start"
                time.sleep(0.02)
            names = {
                "up.example.com": up_ip,
                "also.up.example.com": up_ip,
                "bad.example.com": up_ip,
                "up.example.com.attacker.test": up_ip,
                "attackerup.example.com": up_ip,
                "attacker.test": up_ip,
                "xn--p-0tbb.example.com": up_ip,
                "rebind.example.com": "127.0.0.1",
                "rebind6.example.com": "::ffff:127.0.0.1",
                "meta.example.com": "169.254.169.254",
                "self.example.com": host_ip,
            }
            hosts = d / "hosts"
            hosts.write_text("".join(f"{ip} {name}\n" for name, ip in names.items()))
            yield Net(ns, host_ip, up_ip, 8080, 2222, 5353, log, hosts, names)
        finally:
            proc.kill()
            proc.wait()


class Listener:
    """A host-side listener that counts what reaches it (TCP, UDP or unix)."""

    def __init__(self, family: int, kind: int, address: object) -> None:
        self.sock = socket.socket(family, kind)
        if family != socket.AF_UNIX:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(address)
        if kind == socket.SOCK_STREAM:
            self.sock.listen(64)
        self.address = self.sock.getsockname()
        self.hits = 0
        self.data: list[bytes] = []
        self._stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        return int(self.address[1])  # type: ignore[index]

    def _run(self) -> None:
        self.sock.settimeout(0.2)
        while not self._stop:
            try:
                if self.sock.type == socket.SOCK_STREAM:
                    c, _ = self.sock.accept()
                    self.hits += 1
                    c.settimeout(0.5)
                    with contextlib.suppress(OSError):
                        self.data.append(c.recv(4096))
                    c.close()
                else:
                    data, _ = self.sock.recvfrom(4096)
                    self.hits += 1
                    self.data.append(data)
            except TimeoutError:
                continue
            except OSError:
                return

    def close(self) -> None:
        self._stop = True
        self.sock.close()


@dataclass
class HostListeners:
    tcp_lo: Listener
    udp_lo: Listener
    unix: Listener
    unix_path: str
    abstract: Listener
    abstract_name: str
    tcp_host: Listener | None

    def total(self) -> int:
        items = [self.tcp_lo, self.udp_lo, self.unix, self.abstract]
        if self.tcp_host:
            items.append(self.tcp_host)
        return sum(x.hits for x in items)


@pytest.fixture(scope="session")
def host_listeners(tmp_path_factory: pytest.TempPathFactory, net: Net) -> Iterator[HostListeners]:
    d = tmp_path_factory.mktemp("sock")
    unix_path = str(d / "host.sock")
    abstract_name = f"\0agent-sandbox-test-{secrets.token_hex(4)}"
    ls = HostListeners(
        tcp_lo=Listener(socket.AF_INET, socket.SOCK_STREAM, ("127.0.0.1", 0)),
        udp_lo=Listener(socket.AF_INET, socket.SOCK_DGRAM, ("127.0.0.1", 0)),
        unix=Listener(socket.AF_UNIX, socket.SOCK_STREAM, unix_path),
        unix_path=unix_path,
        abstract=Listener(socket.AF_UNIX, socket.SOCK_STREAM, abstract_name),
        abstract_name=abstract_name,
        tcp_host=Listener(socket.AF_INET, socket.SOCK_STREAM, (net.host_ip, 0)),
    )
    os.chmod(unix_path, 0o777)
    yield ls
    for x in (ls.tcp_lo, ls.udp_lo, ls.unix, ls.abstract, ls.tcp_host):
        if x:
            x.close()


@pytest.fixture
def audit_dir(tmp_path: Path) -> Path:
    d = tmp_path / "audit"
    return d


@pytest.fixture
def proxy_env(net: Net, audit_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Net:
    monkeypatch.setenv("AGENT_SANDBOX_HOSTS", str(net.hosts_file))
    monkeypatch.setenv("AGENT_SANDBOX_AUDIT_DIR", str(audit_dir))
    return net


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """The working directory and writable root of a sandboxed command."""
    w = tmp_path / "work"
    w.mkdir()
    return w


# A sandboxed command that keeps exchanging ``src/x`` (a folder) with ``src/y`` (a
# link to ``../.git``) by three renames, until ``stop`` appears or ``argv[2]``
# seconds pass: what a host-side process resolves once and opens later by path
# meets the repository's ``.git`` instead. ``ready`` says it started.
FLIPPER = """
import os, sys, time
os.chdir(sys.argv[1])
os.symlink("../.git", "src/y")
open("ready", "w").close()
end = time.time() + float(sys.argv[2])
while time.time() < end and not os.path.exists("stop"):
    try:  # three renames (the sandbox answers RENAME_EXCHANGE with EINVAL)
        os.rename("src/x", "src/x.swap")
        os.rename("src/y", "src/x")
        os.rename("src/x.swap", "src/y")
    except OSError:
        pass
"""


def marked(marker: str) -> list[int]:
    """Processes whose command line (arguments joined by spaces) contains marker."""
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) != os.getpid():
            try:
                if marker.encode() in (d / "cmdline").read_bytes().replace(b"\0", b" "):
                    pids.append(int(d.name))
            except OSError:
                continue
    return pids


def wait_gone(marker: str, message: str = "left behind", timeout: float = 5.0) -> None:
    """Wait until no process's command line contains marker; fail after timeout."""
    deadline = time.monotonic() + timeout
    while found := marked(marker):
        assert time.monotonic() < deadline, f"{message}: {found}"
        time.sleep(0.05)


def wait_for_file(path: Path, timeout: float = 20.0) -> None:
    """Wait until path exists (a sandboxed command's sign that it got there)."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.02)


def kill_marked(marker: str) -> None:
    """SIGKILL whatever still carries marker (a test's clean-up)."""
    for pid in marked(marker):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def running(command: str) -> list[int]:
    """Processes that are the command itself (command line starts with it), not
    `sandbox exec` or bwrap, whose arguments merely contain it."""
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if (d / "cmdline").read_bytes().replace(b"\0", b" ").startswith(command.encode()):
                    pids.append(int(d.name))
            except OSError:
                continue
    return pids


def write_settings(path: Path, data: dict) -> Path:
    """An srt settings file: ``data`` with the lists srt requires that it leaves
    out written as ``[]`` (a file without them is refused, as srt refuses it)."""
    full = {**data, "network": dict(data.get("network") or {}),
            "filesystem": dict(data.get("filesystem") or {})}
    for section, keys in (("network", ("allowedDomains", "deniedDomains")),
                          ("filesystem", ("denyRead", "allowWrite", "denyWrite"))):
        for key in keys:
            full[section].setdefault(key, [])
    path.write_text(json.dumps(full))
    return path


def audit_records(directory: Path) -> list[dict]:
    f = directory / "audit.jsonl"
    if not f.exists():
        return []
    return [json.loads(line) for line in f.read_text().splitlines() if line.strip()]


def write_results(name: str, text: str, build: Path = REPO / "build") -> Path:
    """Write a suite's side-by-side table to build/<name>.md (under pytest-xdist
    build/<name>.<worker>.md, with the cases that worker ran) and return its path.

    build/ sits in a checkout that sandboxed commands may have written: the table
    is written below the checkout as the host writes every such file
    (``below_root.replace_file``): a build/ that is a link is refused, and a link
    planted at the table's name is replaced, its target untouched."""
    from agent_sandbox import below_root

    worker = os.environ.get("PYTEST_XDIST_WORKER")
    out = build / (f"{name}.{worker}.md" if worker else f"{name}.md")
    below_root.replace_file(str(build.parent), f"{build.name}/{out.name}", text.encode(),
                            0o644, create=True)
    return out


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Print the side-by-side tables of the escape suite (build/escape-results.md)
    and of srt's own scenarios (build/srt-conformance.md)."""
    for module, title in (("test_escape", "escape suite: sandbox exec vs srt"),
                          ("test_srt_conformance", "srt's Linux scenarios: srt vs sandbox exec")):
        lines = getattr(sys.modules.get(module), "SUMMARY", None)
        if lines:
            terminalreporter.write_sep("=", title)
            for line in lines:
                terminalreporter.write_line(line)


@contextlib.contextmanager
def parent_proxy(tmp_path: Path, net: Net, allowed: list[str],
                 listen: str) -> Iterator[Path]:
    """This project's proxy, run as a service, as the sandbox proxy's parent (srt's
    parentProxy) or mitmProxy. Yields its audit folder: what it saw."""
    audit = tmp_path / f"parent-audit-{secrets.token_hex(3)}"
    settings = write_settings(tmp_path / f"parent-{secrets.token_hex(3)}.json",
                              {"network": {"allowedDomains": allowed}})
    env = dict(os.environ, AGENT_SANDBOX_HOSTS=str(net.hosts_file))
    from agent_sandbox.runtime.proxy import PARENT_VARIABLES

    for k in PARENT_VARIABLES:
        env.pop(k, None)
    # as the service unit runs it: isolated (-I), from a fixed directory
    p = subprocess.Popen([PY, "-I", "-m", "agent_sandbox.runtime.proxy",
                          "--settings", str(settings),
                          "--http", listen, "--audit-dir", str(audit)],
                         stdout=subprocess.PIPE, text=True, env=env, cwd="/")
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        yield audit
    finally:
        p.terminate()
        p.wait(timeout=60)  # it syncs its audit and signs a checkpoint first


def decisions(audit: Path) -> set[tuple[str, str, bool]]:
    """(protocol, host, allowed) of each proxy decision in an audit folder."""
    return {(x["protocol"], x["host"], x["allowed"]) for x in audit_records(audit)
            if x.get("event") == "proxy.decision"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def gvisor_env(monkeypatch: pytest.MonkeyPatch, gvisor_image: str) -> None:
    monkeypatch.setenv("CONTAINERS_CONF", str(REPO / "containers.conf"))
    monkeypatch.delenv("DOCKER_HOST", raising=False)
