"""The network lab of ``sandbox verify``'s domain checks: an HTTP server in a
private network namespace joined to this host by a veth pair, a hosts file that
names it (read by the proxy only), and the client a check runs in the sandbox.
No resolver and no internet are involved. The test suite and the proxy
benchmark use ``veth_namespace`` for their own listeners.

Root only. Everything it creates (the namespace, the pair, the server) is
removed on exit, whatever happened inside.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass

from . import VerifyError

UPSTREAM = r"""
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        with open(sys.argv[3], "a") as fh:
            fh.write(self.headers.get("Host", "") + " " + self.path + "\n")
        body = b"upstream-ok " + self.path.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
srv = http.server.ThreadingHTTPServer((sys.argv[1], int(sys.argv[2])), H)
open(sys.argv[3] + ".ready", "w").close()
srv.serve_forever()
"""

CLIENT = r"""
import sys, urllib.request, urllib.error
try:
    with urllib.request.urlopen(sys.argv[1], timeout=15) as r:
        print("STATUS", r.status, r.read().decode())
except urllib.error.HTTPError as e:
    print("STATUS", e.code, e.headers.get("X-Proxy-Error", ""))
except Exception as e:
    print("ERROR", type(e).__name__, e)
"""


@dataclass
class Upstream:
    ns: str
    ip: str
    port: int
    log: str
    hosts: str

    def requests(self) -> str:
        try:
            with open(self.log, encoding="utf-8") as fh:
                return fh.read()
        except FileNotFoundError:
            return ""


def _ip(*args: str) -> None:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise VerifyError(f"ip {' '.join(args)}: {proc.stderr.strip()}")


@contextlib.contextmanager
def veth_namespace(prefix: str, subnet: str) -> Iterator[tuple[str, str, str]]:
    """A private network namespace joined to this host by a veth pair, both ends up,
    on a random /24 of ``subnet`` (such as ``"10.232"``): (namespace, host address,
    namespace address). Root only. On exit whatever still runs in the namespace is
    killed, then the namespace and the pair are removed."""
    tag = secrets.token_hex(3)
    ns, veth_host, veth_ns = f"{prefix}{tag}", f"{prefix}{tag}h", f"{prefix}{tag}n"
    octet = 16 + secrets.randbelow(200)
    host_ip, ns_ip = f"{subnet}.{octet}.1", f"{subnet}.{octet}.2"
    _ip("netns", "add", ns)
    try:
        _ip("link", "add", veth_host, "type", "veth", "peer", "name", veth_ns)
        _ip("link", "set", veth_ns, "netns", ns)
        _ip("addr", "add", f"{host_ip}/24", "dev", veth_host)
        _ip("link", "set", veth_host, "up")
        _ip("netns", "exec", ns, "ip", "addr", "add", f"{ns_ip}/24", "dev", veth_ns)
        _ip("netns", "exec", ns, "ip", "link", "set", veth_ns, "up")
        _ip("netns", "exec", ns, "ip", "link", "set", "lo", "up")
        yield ns, host_ip, ns_ip
    finally:
        pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True,
                              check=False).stdout.split()
        for pid in pids:
            with contextlib.suppress(OSError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)
        subprocess.run(["ip", "link", "del", veth_host], capture_output=True, check=False)


def reachable(ip: str, port: int, deadline: float) -> None:
    """Wait until this host reaches ``ip:port`` over the lab's veth pair.

    A veth pair that was just set up does not pass traffic at once: the kernel
    attaches its queue when it next processes link events (up to a second later,
    more on a loaded machine), and an ARP request sent before that is dropped, so
    the first connection can fail with "no route to host" after the neighbour
    probes run out. The lab is only ready once a connection from the host side
    succeeds; the checks then judge the proxy, not the lab's own start."""
    import socket

    last: OSError | None = None
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((ip, port), timeout=2):
                return
        except OSError as exc:
            last = exc
            time.sleep(0.1)
    raise VerifyError(f"the upstream test network never passed traffic to {ip}:{port}: {last}")


@contextlib.contextmanager
def upstream_network(scratch: str, python: str, names: list[str]) -> Iterator[Upstream]:
    """An HTTP server in a private network namespace joined to this host by a
    veth pair, and a hosts file naming it (read by the proxy only); its files in
    ``scratch``, the server run by the interpreter ``python``."""
    if os.geteuid() != 0:
        raise VerifyError("the network checks need root (they create a network namespace)")
    if shutil.which("ip") is None:
        raise VerifyError("the network checks need iproute2 (the ip command)")
    log = os.path.join(scratch, "upstream.log")
    hosts = os.path.join(scratch, "hosts")
    with veth_namespace("asv", "10.232") as (ns, _, up_ip):
        with open(hosts, "w", encoding="utf-8") as fh:
            fh.writelines(f"{up_ip} {n}\n" for n in names)
        script = os.path.join(scratch, "upstream.py")
        with open(script, "w", encoding="utf-8") as fh:
            fh.write(UPSTREAM)
        server = subprocess.Popen(["ip", "netns", "exec", ns, python, "-I", script, up_ip,
                                   "8080", log], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 10
            while not os.path.exists(log + ".ready"):
                if server.poll() is not None or time.monotonic() > deadline:
                    raise VerifyError("the upstream test server did not start")
                time.sleep(0.02)
            reachable(up_ip, 8080, deadline=time.monotonic() + 20)
            yield Upstream(ns, up_ip, 8080, log, hosts)
        finally:
            server.send_signal(signal.SIGKILL)
            server.wait()
