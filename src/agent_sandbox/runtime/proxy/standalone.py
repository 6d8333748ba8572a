"""The standalone proxy service: ``python -I -m agent_sandbox.runtime.proxy``.

What the rendered systemd unit (and the detached start without an init
system, the macOS LaunchDaemon, srt's external proxy ports, the benchmarks)
runs: the proxy for a settings file's network section on the addresses given,
recording every decision in its own audit folder. It is started with an
absolute interpreter in isolated mode (``-I``: no current directory, no
``PYTHON*`` variables, no user site on ``sys.path``) from a fixed working
directory: it must never import from a path a sandbox can write.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket

from ..process import signal_wakeup
from .decide import split_hostport

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from .egress_gate import Recorder

def _listen(spec: str) -> socket.socket:
    """A listening socket for ``HOST:PORT``, ``unix:PATH`` or ``fd:N`` (one inherited)."""
    if spec.startswith("fd:"):
        s = socket.socket(fileno=int(spec[3:]))
        s.setblocking(False)
        return s
    if spec.startswith("unix:"):
        path = spec[5:]
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(path)
        os.chmod(path, 0o666)  # noqa: S103 - every local user's sandbox may connect
    else:
        host, port = split_hostport(spec, -1)
        if port < 0:
            raise ValueError(f"{spec!r}: expected HOST:PORT or unix:PATH")
        s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, port))
    s.listen(512)
    s.setblocking(False)
    return s


def main(argv: list[str] | None = None) -> int:
    """The standalone proxy (the systemd unit, srt's external proxy ports, benchmarks)."""
    import argparse
    import select
    import signal
    import sys

    from ..settings import SettingsError, load
    from .audit import audit_recorder, refusing
    from .decide import ProxyConfig
    from .name_lookup import hosts_from_env, own_addresses
    from .server import Proxy

    ap = argparse.ArgumentParser(prog="python -m agent_sandbox.runtime.proxy",
                                 description="Domain-filtering HTTP/SOCKS5 egress proxy.")
    ap.add_argument("--settings", required=True, help="srt-format settings (network section)")
    ap.add_argument("--http", action="append", default=[], help="HOST:PORT or unix:PATH")
    ap.add_argument("--socks", action="append", default=[], help="HOST:PORT or unix:PATH")
    ap.add_argument("--allow-address", action="append", default=[],
                    help="exempt this address from the address checks (testing, benchmarks)")
    ap.add_argument("--audit-dir", default=None)
    ap.add_argument("--no-audit", action="store_true", help="do not record decisions")
    ap.add_argument("--session", default="proxy-service", help="the session named in the audit")
    args = ap.parse_args(argv)
    try:
        settings = load(args.settings)
        exempt = frozenset(ipaddress.ip_address(a) for a in args.allow_address)
        http = [_listen(x) for x in args.http]
        socks = [_listen(x) for x in args.socks]
    except (SettingsError, ValueError, OSError) as exc:
        sys.stderr.write(f"proxy: {exc}\n")
        return 2
    if not http and not socks:
        sys.stderr.write("proxy: give at least one --http or --socks address\n")
        return 2
    close: Callable[[], None] = lambda: None  # noqa: E731
    record: Recorder | None = None
    if not args.no_audit:
        try:
            record, close = audit_recorder(args.audit_dir)
        except Exception as exc:  # no audit, no egress: every request is refused
            reason = f"the audit log is unavailable ({type(exc).__name__}: {exc})"
            sys.stderr.write(f"proxy: {reason}; all requests are refused\n")
            record = refusing(reason)
    proxy = Proxy(ProxyConfig.from_settings(settings.network, os.environ, hosts=hosts_from_env(),
                                            own=own_addresses(), exempt=exempt,
                                            session=args.session), record)
    # A listener inherited from a launcher (fd:N) is a sandbox's: srt's proxy ports
    # hand its protocol to the external proxy, as serve() does in process. A
    # listener bound here is this service's own: it is that external proxy.
    net = settings.network
    external = [(s, port) for specs, socks_, port in ((args.http, http, net.http_proxy_port),
                                                      (args.socks, socks, net.socks_proxy_port))
                if port is not None
                for spec, s in zip(specs, socks_, strict=True) if spec.startswith("fd:")]
    handed = {id(s) for s, _ in external}
    proxy.start_in_thread([s for s in http if id(s) not in handed],
                          [s for s in socks if id(s) not in handed], external)
    # Any of the proxy's threads may take the SIGTERM: the main thread waits on the
    # signal wakeup pipe, not for a handler of its own (one SIGTERM in about 600 sent
    # right after "ready" did not stop the service when it waited on an Event).
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    with signal_wakeup() as wake:
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        select.select([wake], [], [])
    proxy.stop()
    close()
    return 0
