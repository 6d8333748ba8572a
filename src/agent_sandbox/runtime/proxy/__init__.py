"""The domain-filtering egress proxy: HTTP (absolute-URI and CONNECT) and SOCKS5.

The sandbox has no network but its own loopback; this proxy is its only way
out. One concept per module:

- ``decide``: the pure decision over parsed settings (domain matching, the
  resolved-address checks) and its ``Decision``;
- ``name_lookup``: pinned names (``$AGENT_SANDBOX_HOSTS``), this host's addresses, the lookup;
- ``egress_gate``: decide, record, connect: the one way to a destination;
- ``http`` and ``socks``: the two protocols, each request decided on its own;
- ``relay``: moving the bytes of a decided connection; worker threads;
- ``audit``: the recorder (no audit, no egress);
- ``server``: listening sockets, and ``serve`` for ``sandbox exec``;
- ``standalone``: the standalone service (``python -I -m agent_sandbox.runtime.proxy``).

An allowed connection goes to the checked address, or on through an upstream
proxy when the settings (or the proxy's own environment) name one
(``runtime/upstream.py``: srt's ``parentProxy`` and ``mitmProxy``). The proxy
must never relay a byte for a request it has not allowed, and any error while
deciding is a denial.
"""

from __future__ import annotations

from ..upstream import PARENT_VARIABLES, PROXY_VARIABLES
from .audit import audit_recorder, default_audit_dir, refusing
from .decide import (
    Decision,
    ProxyConfig,
    address_refusal,
    decide_name,
    range_refusal,
    split_hostport,
)
from .name_lookup import HOSTS_ENV, hosts_from_env, load_hosts, own_addresses
from .relay import relay
from .server import HANDSHAKE_TIMEOUT, Proxy, serve

_split_hostport = split_hostport  # the name callers used before the split

__all__ = [
    "HANDSHAKE_TIMEOUT",
    "HOSTS_ENV",
    "PARENT_VARIABLES",
    "PROXY_VARIABLES",
    "Decision",
    "Proxy",
    "ProxyConfig",
    "address_refusal",
    "audit_recorder",
    "decide_name",
    "default_audit_dir",
    "hosts_from_env",
    "load_hosts",
    "own_addresses",
    "range_refusal",
    "refusing",
    "relay",
    "serve",
    "split_hostport",
]
