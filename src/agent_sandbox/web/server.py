"""Running ``sandbox serve``: where it may listen, its token, and uvicorn.

``bind_refusal`` (pure) says why an address may not be used: only loopback without
TLS, unless the operator says ``--insecure-bind`` (a token sent in clear over a
network can be read by anyone on the path). The socket is bound here, before the
server starts, so the printed URL names the real port (``--port 0`` picks one), and
the token file is made or read before anything listens (``--rotate-token`` first
writes a new one in place; with no repository it only does that). The dashboard's
login accepts the origins of the address it listens on (``login.own_origin``).

Never listens on a non-loopback address without TLS unless told to, and never prints
the token itself, only where it is.
"""

from __future__ import annotations

import ipaddress
import socket
import sys
from dataclasses import dataclass
from typing import Any, TextIO

from agent_sandbox.errors import SandboxError


class ServeError(SandboxError):
    """``sandbox serve`` cannot start; the message says why and what to do."""


@dataclass(frozen=True)
class Options:
    repos: list[str]
    host: str = "127.0.0.1"
    port: int = 8765
    tls_cert: str | None = None
    tls_key: str | None = None
    insecure_bind: bool = False
    webhook_file: str | None = None
    public_url: str | None = None
    rotate_token: bool = False


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bind_refusal(opts: Options) -> str | None:
    """Why ``opts`` may not be served as given, or None (pure)."""
    if bool(opts.tls_cert) != bool(opts.tls_key):
        return "--tls-cert and --tls-key go together"
    if not 0 <= opts.port <= 65535:
        return f"--port {opts.port} is not a port"
    if is_loopback(opts.host) or opts.tls_cert or opts.insecure_bind:
        return None
    return (f"{opts.host} is not a loopback address: the token would cross the network in "
            "clear. Give --tls-cert and --tls-key, or --insecure-bind if something else "
            "(a TLS proxy on this host) protects it")


def url_of(host: str, port: int, tls: bool) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"{'https' if tls else 'http'}://{shown}:{port}/"


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ServeError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.listen(512)
    sock.set_inheritable(True)
    return sock


def serve(opts: Options, out: TextIO = sys.stdout) -> None:
    refusal = bind_refusal(opts)
    if refusal:
        raise ServeError(refusal)
    from agent_sandbox.approval.approver import ApprovalError, account_name
    from agent_sandbox.state_paths import account_home

    from .auth import FileToken, load_or_create, rotate, token_path

    path = token_path(account_home())
    if opts.rotate_token:
        rotate(path)
        out.write(f"sandbox serve: a new token in {path} (a running `sandbox serve` keeps "
                  "the old one until it restarts; dashboards log in again with the new "
                  "one)\n")
        out.flush()
        if not opts.repos:
            return
    if not opts.repos:
        raise ServeError("give at least one repository to serve (or --rotate-token alone)")
    from .sites import Sites

    try:
        sites = Sites(opts.repos)
    except ApprovalError as exc:
        raise ServeError(str(exc)) from None
    bearer = FileToken(load_or_create(path), account_name())
    sock = bind(opts.host, opts.port)
    port = sock.getsockname()[1]
    url = url_of(opts.host, port, bool(opts.tls_cert))
    webhook = None
    if opts.webhook_file:
        from .webhook import Webhook, read_url

        webhook = Webhook(read_url(opts.webhook_file), opts.public_url or url)
    import uvicorn

    from .app import create_app
    from .login import Login, own_origin

    def is_own(origin: str) -> bool:
        return own_origin(origin, opts.host, port, bool(opts.tls_cert), opts.public_url)

    app = create_app(sites, bearer, login=Login(bearer, is_own), webhook=webhook)
    config: dict[str, Any] = {"log_level": "warning", "access_log": False, "ws_max_size": 65536,
                              "ws_ping_interval": 20.0, "timeout_graceful_shutdown": 2}
    if opts.tls_cert:
        config.update(ssl_certfile=opts.tls_cert, ssl_keyfile=opts.tls_key)
    server = uvicorn.Server(uvicorn.Config(app, **config))
    out.write(f"sandbox serve: {url} ({len(sites.repos)} repositories)\n"
              f"sandbox serve: token file {path} (send it as Authorization: Bearer, or paste "
              "it into the dashboard's form, never into its address)\n")
    out.flush()
    server.run(sockets=[sock])
