"""Where names go: the operator's pinned names, this host's own addresses, and
the one lookup the decision checks.

Names can be pinned to addresses by the operator with a hosts(5)-format file
named in ``$AGENT_SANDBOX_HOSTS`` (read outside the sandbox, by the proxy's
own process; the address checks still apply to what it pins). Must never be
pointed at a file a sandbox can write: it would choose where allowed names go.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket

from agent_sandbox.spec import domains

from .decide import IPAddress

HOSTS_ENV = "AGENT_SANDBOX_HOSTS"


def own_addresses() -> frozenset[IPAddress]:
    """Every address configured on this host's interfaces (plus loopback).

    Read from the kernel's own tables (``/proc/net/fib_trie`` for IPv4, the
    ``LOCAL`` host routes; ``/proc/net/if_inet6`` for IPv6): no import costs the
    first connection's time. Elsewhere, ``psutil``.
    """
    found: set[IPAddress] = set()
    try:
        with open("/proc/net/fib_trie", encoding="ascii") as fh:
            last = ""
            for line in fh:
                text = line.strip()
                if text.startswith(("|--", "+--")):
                    last = text[3:].split()[0]
                elif text == "/32 host LOCAL" and last:
                    with contextlib.suppress(ValueError):
                        found.add(ipaddress.ip_address(last))
        with contextlib.suppress(FileNotFoundError), open("/proc/net/if_inet6",
                                                          encoding="ascii") as fh:
            for line in fh:
                with contextlib.suppress(ValueError, IndexError):
                    found.add(ipaddress.IPv6Address(bytes.fromhex(line.split()[0])))
        if found:
            return frozenset(found)
    except OSError:
        pass
    try:
        import psutil

        for addrs in psutil.net_if_addrs().values():
            for a in addrs:
                if a.family in (socket.AF_INET, socket.AF_INET6):
                    with contextlib.suppress(ValueError):
                        found.add(ipaddress.ip_address(a.address.split("%", 1)[0]))
    except Exception:  # noqa: S110 - loopback and metadata checks still apply
        pass
    return frozenset(found)


def load_hosts(path: str) -> dict[str, list[str]]:
    """A hosts(5)-format file as {canonical name: [addresses]}."""
    out: dict[str, list[str]] = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            parts = line.split("#", 1)[0].split()
            if len(parts) < 2:
                continue
            for name in parts[1:]:
                with contextlib.suppress(domains.DomainError):
                    out.setdefault(domains.canonical_host(name), []).append(parts[0])
    return out


def hosts_from_env() -> dict[str, list[str]]:
    """The operator's pinned names (``$AGENT_SANDBOX_HOSTS``); none when unset or
    unreadable."""
    path = os.environ.get(HOSTS_ENV)
    if path:
        with contextlib.suppress(OSError):
            return load_hosts(path)
    return {}


def resolve(pinned: dict[str, list[str]], host: str, port: int) -> list[IPAddress]:
    """A canonical host's addresses: an IP literal itself, a pinned name's
    addresses, else one system lookup (OSError when it does not resolve)."""
    ip = domains.parse_ip_literal(host)
    if ip is not None:
        return [ip]
    if host in pinned:
        return [ipaddress.ip_address(a) for a in pinned[host]]
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(ipaddress.ip_address(str(i[4][0]).split("%", 1)[0])
                              for i in infos))
