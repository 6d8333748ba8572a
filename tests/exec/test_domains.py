"""The domain matcher and the proxy's pure decisions: no processes, no sockets."""

from __future__ import annotations

import ipaddress

import pytest

from agent_sandbox.runtime.proxy import (
    _split_hostport,
    address_refusal,
    decide_name,
)
from agent_sandbox.spec.domains import (
    DomainError,
    canonical_host,
    host_allowed,
    parse_ip_literal,
    pattern_matches,
    validate_pattern,
)


@pytest.mark.parametrize("raw,canon", [
    ("Example.COM", "example.com"),
    ("example.com.", "example.com"),
    ("bücher.example", "xn--bcher-kva.example"),
    ("2130706433", "127.0.0.1"),
    ("0x7f000001", "127.0.0.1"),
    ("0177.0.0.1", "127.0.0.1"),
    ("127.1", "127.0.0.1"),
    ("[::ffff:127.0.0.1]", "127.0.0.1"),
    ("::ffff:7f00:1", "127.0.0.1"),
    ("169.254.169.254", "169.254.169.254"),
])
def test_canonical_host(raw: str, canon: str) -> None:
    assert canonical_host(raw) == canon


@pytest.mark.parametrize("bad", ["", "exa mple.com", "example.com\x00.evil", "a..b",
                                 "-x.example.com", "x" * 64 + ".com", "exa\tmple.com"])
def test_canonical_host_refuses(bad: str) -> None:
    with pytest.raises(DomainError):
        canonical_host(bad)


@pytest.mark.parametrize("text,ip", [
    ("10.0.0.1", "10.0.0.1"), ("0x0a.0.0.1", "10.0.0.1"), ("167772161", "10.0.0.1"),
    ("example.com", None), ("1.2.3.4.5", None), ("256.1.1.1", None), ("08.1.1.1", None),
])
def test_parse_ip_literal(text: str, ip: str | None) -> None:
    got = parse_ip_literal(text)
    assert (str(got) if got is not None else None) == ip


@pytest.mark.parametrize("pattern,host,match", [
    ("example.com", "example.com", True),
    ("example.com", "a.example.com", False),
    ("*.example.com", "a.example.com", True),
    ("*.example.com", "a.b.example.com", True),
    ("*.example.com", "example.com", False),
    ("*.example.com", "badexample.com", False),
    ("*.example.com", "example.com.evil.test", False),
    ("*", "anything.test", True),
])
def test_pattern_matches(pattern: str, host: str, match: bool) -> None:
    assert pattern_matches(pattern, host) is match


@pytest.mark.parametrize("pattern", ["*", "*.com", "http://example.com", "example.com/x",
                                     "example.com:443", "ex*ample.com", "*.*.example.com"])
def test_allow_list_refuses_broad_or_malformed(pattern: str) -> None:
    with pytest.raises(DomainError):
        validate_pattern(pattern, allow_list=True)


def test_deny_list_accepts_star() -> None:
    assert validate_pattern("*", allow_list=False) == "*"


@pytest.mark.parametrize("host,allowed,reason", [
    ("up.example.com", True, "allowed"),
    ("UP.EXAMPLE.COM.", True, "allowed"),
    ("bad.example.com", False, "blocked-by-denylist"),
    ("Bad.Example.Com.", False, "blocked-by-denylist"),
    ("other.test", False, "blocked-by-allowlist"),
    ("up.example.com\x00.evil.test", False, "invalid-host"),
])
def test_host_allowed_denied_wins(host: str, allowed: bool, reason: str) -> None:
    ok, why = host_allowed(host, ["*.example.com"], ["bad.example.com"])
    assert ok is allowed
    assert why.startswith(reason)


def test_ip_literal_forms_match_the_same_pattern() -> None:
    allowed = [validate_pattern("10.0.0.1", allow_list=True)]
    for form in ("10.0.0.1", "167772161", "0xa000001", "012.0.0.1", "[::ffff:10.0.0.1]"):
        assert host_allowed(form, allowed, [])[0], form
    denied = [validate_pattern("10.0.0.1", allow_list=False)]
    for form in ("167772161", "0xa000001", "::ffff:a00:1"):
        assert not host_allowed(form, ["*.example.com", "10.0.0.1"], denied)[0], form


OWN = frozenset({ipaddress.ip_address("192.0.2.10")})


@pytest.mark.parametrize("addr,why", [
    ("127.0.0.1", "loopback"), ("127.8.9.10", "loopback"), ("::1", "loopback"),
    ("::ffff:127.0.0.1", "loopback"), ("64:ff9b::7f00:1", "loopback"),
    ("169.254.169.254", "metadata"), ("fd00:ec2::254", "metadata"),
    ("100.100.100.200", "metadata"), ("169.254.1.1", "link-local"), ("fe80::1", "link-local"),
    ("0.0.0.0", "unspecified"), ("0.1.2.3", "unspecified"), ("::", "unspecified"),
    ("224.0.0.1", "multicast"), ("192.0.2.10", "host-address"),
    ("93.184.216.34", None), ("10.1.2.3", None), ("2606:4700::1", None),
])
def test_address_refusal(addr: str, why: str | None) -> None:
    assert address_refusal(ipaddress.ip_address(addr), OWN) == why


def test_decide_name_port_and_reason() -> None:
    assert not decide_name("example.com", 0, ["example.com"], []).allowed
    d = decide_name("EXAMPLE.com.", 443, ["example.com"], [])
    assert d.allowed and d.host == "example.com"
    assert decide_name("example.org", 443, ["example.com"], []).reason == "blocked-by-allowlist"


@pytest.mark.parametrize("text,default,expect", [
    ("example.com:8443", 443, ("example.com", 8443)),
    ("example.com", 80, ("example.com", 80)),
    ("[::1]:443", 80, ("::1", 443)),
    ("[::1]", 80, ("::1", 80)),
    ("example.com:99999999", 80, ("example.com", -1)),
    ("example.com:x", 80, ("example.com", -1)),
])
def test_split_hostport(text: str, default: int, expect: tuple[str, int]) -> None:
    assert _split_hostport(text, default) == expect
