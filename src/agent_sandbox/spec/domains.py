"""Domain names and domain patterns, with srt's rules.

A pattern is a host name (``example.com``), a wildcard over strict subdomains
(``*.example.com`` matches ``a.example.com`` but not ``example.com``), or an IP
literal. Patterns carry no scheme, path or port. ``*`` and wildcards over a
public suffix with a single label (``*.com``) are refused in allow lists; ``*``
alone is accepted in deny lists (deny everything).

srt settings may also end a pattern with ``:PORT`` (``api.example.com:443``,
``*:22`` in a deny list, ``[::1]:8080``): such an entry applies to that
destination port only (``validate_port_pattern``, ``host_allowed``). The spec's
own patterns stay portless.

Everything here is a pure function. ``canonical_host`` is what the proxy calls on
every request: it must never let a disguised name (case, trailing dot, IDNA,
embedded NUL, decimal/octal/hex or IPv6-mapped IP literals) slip past a match.
"""

from __future__ import annotations

from agent_sandbox.errors import SandboxError

TYPE_CHECKING = False  # (typing.TYPE_CHECKING would import typing)
if TYPE_CHECKING:
    import ipaddress

# ``ipaddress`` loads only for an IP literal, and there are no regular expressions
# here: ``sandbox exec`` validates every domain at each start, and importing ``re``
# would cost more than the checks themselves.
_LABEL_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-")
_DEC = frozenset("0123456789")
_OCT = frozenset("01234567")
_HEX = frozenset("0123456789abcdefABCDEF")


def _valid_label(label: str) -> bool:
    return (0 < len(label) <= 63 and label[0] != "-" and label[-1] != "-"
            and all(c in _LABEL_CHARS for c in label))


class DomainError(SandboxError, ValueError):
    """A host name or pattern is malformed; the message says how."""


def _parse_ipv4_part(part: str) -> int:
    if part.lower().startswith("0x"):
        digits = part[2:]
        if not digits:
            return 0
        if not all(c in _HEX for c in digits):
            raise ValueError(part)
        return int(digits, 16)
    if len(part) > 1 and part.startswith("0"):
        if not all(c in _OCT for c in part):
            raise ValueError(part)
        return int(part, 8)
    if not part or not all(c in _DEC for c in part):
        raise ValueError(part)
    return int(part, 10)


def parse_ip_literal(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """Parse any IP literal the C resolver would accept (inet_aton forms too).

    ``2130706433``, ``0x7f000001``, ``0177.0.0.1``, ``127.1`` all give 127.0.0.1;
    ``[::ffff:127.0.0.1]`` gives 127.0.0.1 as well. Returns None for a name.
    """
    t = text.strip()
    if t.startswith("[") and t.endswith("]"):
        t = t[1:-1]
    if ":" in t:
        import ipaddress

        try:
            v6 = ipaddress.IPv6Address(t.split("%", 1)[0])
        except ValueError:
            return None
        mapped = v6.ipv4_mapped
        return mapped if mapped is not None else v6
    parts = t.split(".")
    if not 1 <= len(parts) <= 4 or any(p == "" for p in parts):
        return None
    try:
        nums = [_parse_ipv4_part(p) for p in parts]
    except ValueError:
        return None
    # inet_aton: a.b.c.d / a.b.c(16 bits) / a.b(24 bits) / a(32 bits)
    limits = [0xFF] * (len(nums) - 1)
    tail_bits = 8 * (5 - len(nums))
    if any(n > lim for n, lim in zip(nums[:-1], limits, strict=True)) or nums[-1] >= (
            1 << tail_bits):
        return None
    value = 0
    for n in nums[:-1]:
        value = (value << 8) | n
    value = (value << tail_bits) | nums[-1]
    import ipaddress

    return ipaddress.IPv4Address(value)


def canonical_host(name: str) -> str:
    """The canonical form of a host name or IP literal, or DomainError.

    Lower case, no trailing dot, IDNA (punycode) for non-ASCII labels, IP
    literals in their standard text form (IPv4-mapped IPv6 as IPv4).
    """
    if not isinstance(name, str) or not name:
        raise DomainError("empty host name")
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in name):
        raise DomainError(f"host name {name!r} contains a control character or space")
    ip = parse_ip_literal(name)
    if ip is not None:
        return str(ip)
    host = name.rstrip(".") if name.endswith(".") and not name.endswith("..") else name
    if not host:
        raise DomainError(f"host name {name!r} is empty")
    if not host.isascii():
        try:
            host = host.encode("idna").decode("ascii")
        except UnicodeError as exc:
            raise DomainError(f"host name {name!r} is not valid IDNA: {exc}") from None
    host = host.lower()
    if len(host) > 253:
        raise DomainError(f"host name {name!r} is longer than 253 characters")
    labels = host.split(".")
    for label in labels:
        if not _valid_label(label):
            raise DomainError(f"host name {name!r} has an invalid label {label!r}")
    return host


def validate_pattern(pattern: str, *, allow_list: bool) -> str:
    """Check a domain pattern and return its canonical form, or DomainError.

    ``allow_list`` refuses the over-broad patterns that srt refuses there.
    """
    if not isinstance(pattern, str) or not pattern.strip():
        raise DomainError("empty domain pattern")
    p = pattern.strip()
    if "://" in p:
        raise DomainError(f"{pattern!r}: a domain pattern has no scheme (write the host name only)")
    if "/" in p:
        raise DomainError(f"{pattern!r}: a domain pattern has no path (write the host name only)")
    if p == "*":
        if allow_list:
            raise DomainError("'*' would allow every domain; list the domains instead")
        return "*"
    ip = parse_ip_literal(p)
    if ip is not None:
        return str(ip)
    if ":" in p:
        raise DomainError(f"{pattern!r}: a domain pattern has no port")
    if p.startswith("*."):
        rest = p[2:]
        if "*" in rest:
            raise DomainError(f"{pattern!r}: only one leading '*.' wildcard is allowed")
        base = canonical_host(rest)
        if "." not in base:
            raise DomainError(
                f"{pattern!r} is too broad: a wildcard needs at least two labels after '*.'"
            )
        return "*." + base
    if "*" in p:
        raise DomainError(f"{pattern!r}: '*' is only allowed as a leading '*.' label")
    host = canonical_host(p)
    if "." not in host and host != "localhost" and allow_list and ip is None:
        raise DomainError(f"{pattern!r}: a domain needs at least one dot (e.g. example.com)")
    return host


def split_port(pattern: str) -> tuple[str, int | None]:
    """A pattern's host part and its ``:PORT`` suffix, if any (srt's rules).

    Only a decimal port 1-65535 without leading zeros counts (so
    ``evil.com:443.example.com`` stays whole and then fails validation). An IPv6
    literal takes a port only in brackets (``[::1]:443``); unbracketed, a last
    hextet is never read as a port.
    """
    if pattern.startswith("["):
        close = pattern.find("]")
        if close == -1:
            return pattern, None
        rest = pattern[close + 1:]
        if not rest:
            return pattern, None
        port = _port_suffix(rest[1:]) if rest.startswith(":") else None
        return (pattern, None) if port is None else (pattern[:close + 1], port)
    if pattern.count(":") != 1:
        return pattern, None
    host, _, suffix = pattern.partition(":")
    port = _port_suffix(suffix)
    return (pattern, None) if port is None else (host, port)


def _port_suffix(text: str) -> int | None:
    if not 1 <= len(text) <= 5 or text[0] == "0" or not all(c in _DEC for c in text):
        return None
    n = int(text)
    return n if n <= 65535 else None


def validate_port_pattern(pattern: str, *, allow_list: bool) -> str:
    """``validate_pattern`` for srt settings: an optional ``:PORT`` suffix, and in a
    deny list ``*:PORT`` too. Canonical form: the host's, then ``:PORT``
    (``[v6]:PORT`` for an IPv6 literal)."""
    if not isinstance(pattern, str) or not pattern.strip():
        raise DomainError("empty domain pattern")
    if "/" in pattern:  # a URL: say so (scheme, path) rather than "bad port"
        validate_pattern(pattern, allow_list=allow_list)
    host, port = split_port(pattern.strip())
    if port is None and ":" in host and not host.startswith("[") and host.count(":") == 1:
        raise DomainError(f"{pattern!r}: the port after ':' must be a number 1-65535")
    canon = validate_pattern(host, allow_list=allow_list)
    if port is None:
        return canon
    return f"[{canon}]:{port}" if ":" in canon else f"{canon}:{port}"


def pattern_matches_port(pattern: str, host: str, port: int | None) -> bool:
    """``pattern_matches`` for a canonical pattern that may carry ``:PORT``: such a
    pattern matches a connection to that port only."""
    bare, want = split_port(pattern)
    if want is not None:
        if port != want:
            return False
        if bare.startswith("["):
            bare = bare[1:-1]
    return pattern_matches(bare, host)


def pattern_matches(pattern: str, host: str) -> bool:
    """Whether a canonical pattern matches a canonical host."""
    if pattern == "*":
        return True
    if pattern.startswith("*."):
        return host.endswith(pattern[1:]) and len(host) > len(pattern) - 1
    return pattern == host


def any_match(patterns: list[str] | tuple[str, ...], host: str) -> bool:
    return any(pattern_matches(p, host) for p in patterns)


def pattern_covers(upper: str, lower: str) -> bool:
    """Whether everything ``lower`` matches is also matched by ``upper``."""
    if upper == "*":
        return True
    if lower == "*":
        return False
    if upper.startswith("*."):
        if lower.startswith("*."):
            return lower[1:].endswith(upper[1:])
        return pattern_matches(upper, lower)
    return upper == lower


def host_allowed(host: str, allowed: list[str], denied: list[str],
                 port: int | None = None) -> tuple[bool, str]:
    """The proxy's decision for a host name and destination port: (allowed, reason).

    Denied patterns win over allowed ones; a name that is not canonical, or not
    in the allow list, is refused. A pattern with ``:PORT`` counts only for
    that port.
    """
    try:
        h = canonical_host(host)
    except DomainError as exc:
        return False, f"invalid-host: {exc}"
    if any(pattern_matches_port(p, h, port) for p in denied):
        return False, "blocked-by-denylist"
    if any(pattern_matches_port(p, h, port) for p in allowed):
        return True, "allowed"
    return False, "blocked-by-allowlist"
