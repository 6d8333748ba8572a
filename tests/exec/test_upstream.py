"""Upstream proxies (srt's ``parentProxy`` and ``mitmProxy``): pure routing first;
then real sandboxes whose proxy chains through a second, real proxy (this
project's own, run as a service with its own policy and audit), and a scripted
proxy where the wire format itself is the point. Judged from the host: what the
upstream server saw, what each proxy's audit holds."""

from __future__ import annotations

import base64
import contextlib
import json
import re
import secrets
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import (
    Net,
    audit_records,
    decisions,
    free_port,
    needs_bwrap,
    parent_proxy,
    write_settings,
)

from agent_sandbox.runtime.proxy import Proxy, ProxyConfig
from agent_sandbox.runtime.run import run_sandboxed
from agent_sandbox.runtime.settings import SettingsError, parse
from agent_sandbox.runtime.upstream import (
    NoProxy,
    Upstream,
    UpstreamError,
    open_tunnel,
    parse_upstream,
    redact,
    routes,
)

# --- pure ------------------------------------------------------------------


def test_upstream_urls() -> None:
    u = parse_upstream("http://alice:p%40ss@proxy.corp:3128")
    assert (u.scheme, u.host, u.port, u.label) == ("http", "proxy.corp", 3128,
                                                   "http://proxy.corp:3128")
    assert u.auth == "Basic " + base64.b64encode(b"alice:p@ss").decode()
    assert u.header() == f"Proxy-Authorization: {u.auth}\r\n".encode()
    assert parse_upstream("https://proxy.corp").port == 443
    assert parse_upstream("http://[2001:db8::1]:8080").label == "http://[2001:db8::1]:8080"
    assert parse_upstream("http://proxy.corp").header() == b""
    assert redact("http://alice:secret@proxy.corp:3128/") == "http://***@proxy.corp:3128/"
    assert "secret" not in repr(u)


@pytest.mark.parametrize("raw,yes,no", [
    ("*", ["anything.example", "10.1.2.3"], []),
    (".corp.example", ["corp.example", "a.corp.example"], ["xcorp.example"]),
    ("corp.example", ["corp.example", "a.corp.example"], ["xcorp.example"]),
    ("*.corp.example", ["a.corp.example", "corp.example"], ["xcorp.example"]),
    ("corp.example:8080", ["corp.example"], []),
    ("10.0.0.0/8, 192.168.1.10", ["10.2.3.4", "192.168.1.10"], ["192.168.1.11", "11.0.0.1"]),
    ("[2001:db8::1]:443, fc00::/7", ["2001:db8::1", "fd00::5"], ["2001:db8::2"]),
    ("not/a/cidr, ,", [], ["not", "a.example"]),
])
def test_no_proxy_reads_like_go_and_srt(raw: str, yes: list[str], no: list[str]) -> None:
    rules = NoProxy(raw)
    assert all(rules.bypass(h) for h in yes), yes
    assert not any(rules.bypass(h) for h in no), no


def test_parent_falls_back_to_the_environment_field_by_field() -> None:
    env = {"HTTP_PROXY": "http://env-http:3128", "https_proxy": "env-https:8443",
           "NO_PROXY": ".internal"}
    r = routes(None, None, env)
    assert r.http is not None and r.http.label == "http://env-http:3128"
    assert r.https is not None and r.https.label == "http://env-https:8443"
    assert r.route("a.internal", True) is None
    assert r.route("github.com", True) is r.https and r.route("github.com", False) is r.http
    # the settings' own fields win; https falls back to http; a bad env URL is ignored
    r = routes(("http://set:1", "", ""), None, {"HTTP_PROXY": "http://env:2",
                                               "NO_PROXY": "github.com"})
    assert r.http is not None and r.http.label == "http://set:1"
    assert r.https is not None and r.https.label == "http://set:1"
    assert r.route("github.com", True) is None
    assert not routes(None, None, {"HTTP_PROXY": "ftp://nope:21"})
    # loopback never goes through a parent; mitm domains go through the mitm first
    r = routes(("http://set:1", "", ""), ("/run/mitm.sock", ("*.github.com",)), {})
    assert r.route("localhost", True) is None and r.route("127.0.0.1", True) is None
    via = r.route("api.github.com", False)
    assert via is not None and via.label == "unix:/run/mitm.sock"
    assert r.route("github.com", True) is r.https


@pytest.mark.parametrize("doc,fragment", [
    ({"network": {"parentProxy": "http://p:1"}}, "parentProxy: expected an object"),
    ({"network": {"parentProxy": {"http": "socks5://p:1"}}}, "parentProxy.http"),
    ({"network": {"parentProxy": {"https": "http://p:99999"}}}, "a number 1-65535"),
    ({"network": {"parentProxy": {"https": "http://alice:s3cret@p:0"}}}, "'http://***@p:0'"),
    ({"network": {"parentProxy": {"http": "http://p:1/path"}}}, "expected http://HOST"),
    ({"network": {"parentProxy": {"noProxy": ["a"]}}}, "noProxy: expected a string"),
    ({"network": {"mitmProxy": {"socketPath": "relative.sock", "domains": []}}},
     "socketPath: expected the absolute path"),
    ({"network": {"mitmProxy": {"socketPath": "/m.sock", "domains": ["*"]}}},
     "would allow every domain"),
])
def test_bad_upstream_settings_are_refused(doc: dict, fragment: str) -> None:
    with pytest.raises(SettingsError, match=re.escape(fragment)):
        parse(doc)


def test_names_are_checked_here_when_the_upstream_is_local(tmp_path: Path) -> None:
    hosts = {"rebind.example.com": ["127.0.0.1"], "meta.example.com": ["169.254.169.254"],
             "ok.example.com": ["192.0.2.10"]}
    allowed = ("rebind.example.com", "meta.example.com", "ok.example.com",
               "unresolvable.invalid")
    local = Proxy(ProxyConfig(allowed, hosts=hosts,
                              routes=routes(("http://127.0.0.1:9", "", ""), None, {})))
    assert local.decide("rebind.example.com", 443).reason == "blocked-by-address: loopback"
    assert local.decide("meta.example.com", 80, tunnel=False).reason.endswith("metadata")
    d = local.decide("ok.example.com", 443)
    assert d.allowed and d.via == "http://127.0.0.1:9" and d.address is None
    # what this host cannot resolve, the upstream may: allowed, through it
    assert local.decide("unresolvable.invalid", 443).via == "http://127.0.0.1:9"
    # a remote upstream resolves names itself (as srt lets it); IP literals are still checked
    remote = Proxy(ProxyConfig((*allowed, "169.254.169.254"), hosts=hosts,
                               routes=routes(("http://192.0.2.1:3128", "", ""), None, {})))
    d = remote.decide("rebind.example.com", 443)
    assert d.allowed and d.via == "http://192.0.2.1:3128"
    assert remote.decide("169.254.169.254", 80).reason == "blocked-by-address: metadata"


# --- a scripted parent, for the wire format ----------------------------------


@contextlib.contextmanager
def scripted_parent(answer: bytes) -> Iterator[tuple[Upstream, list[bytes]]]:
    """A one-connection-at-a-time TCP proxy that records each request head and
    answers ``answer`` (then echoes what it gets)."""
    srv = socket.create_server(("127.0.0.1", 0))
    seen: list[bytes] = []

    def serve() -> None:
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            with c:
                head = b""
                while b"\r\n\r\n" not in head:
                    chunk = c.recv(4096)
                    if not chunk:
                        break
                    head += chunk
                seen.append(head)
                if not answer:
                    continue  # hang up
                c.sendall(answer)
                with contextlib.suppress(OSError):
                    while data := c.recv(4096):
                        c.sendall(data)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    port = srv.getsockname()[1]
    try:
        yield parse_upstream(f"http://bob:hunter2@127.0.0.1:{port}"), seen
    finally:
        srv.close()


@contextlib.contextmanager
def proxy_through(parent: str) -> Iterator[tuple[Proxy, tuple[str, int]]]:
    """Our proxy, in this process, allowing up.example.com through ``parent``:
    the proxy and the address it listens on."""
    proxy = Proxy(ProxyConfig(("up.example.com",), hosts={"up.example.com": ["192.0.2.7"]},
                              routes=routes((parent, "", ""), None, {})))
    lis = socket.create_server(("127.0.0.1", 0))
    lis.setblocking(False)
    proxy.start_in_thread([lis], [])
    try:
        yield proxy, lis.getsockname()
    finally:
        proxy.stop()


def test_tunnel_sends_credentials_and_keeps_what_the_server_said_first() -> None:
    with scripted_parent(b"HTTP/1.1 200 Connection established\r\n\r\nSSH-2.0-banner\r\n"
                         ) as (up, seen):
        s, ahead = open_tunnel(up, "git.example.com", 22, timeout=5)
        with s:
            assert ahead == b"SSH-2.0-banner\r\n"  # the server spoke first
            s.sendall(b"ping")
            assert s.recv(4) == b"ping"
    head = seen[0].decode()
    assert head.startswith("CONNECT git.example.com:22 HTTP/1.1\r\n")
    assert "Host: git.example.com:22\r\n" in head
    assert f"Proxy-Authorization: Basic {base64.b64encode(b'bob:hunter2').decode()}" in head


@pytest.mark.parametrize("answer", [b"HTTP/1.1 407 Proxy Authentication Required\r\n\r\n",
                                    b"HTTP/1.1 403 Forbidden\r\n\r\n", b"garbage\r\n\r\n", b""])
def test_a_refused_tunnel_is_an_error(answer: bytes) -> None:
    with scripted_parent(answer) as (up, _), pytest.raises(UpstreamError):
        open_tunnel(up, "git.example.com", 443, timeout=5)


def test_plain_http_goes_to_the_parent_in_absolute_form_with_its_own_credentials() -> None:
    with scripted_parent(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok") as (up, seen), \
            proxy_through(f"http://bob:hunter2@127.0.0.1:{up.port}") as (proxy, address), \
            socket.create_connection(address, timeout=5) as c:
        c.sendall(b"GET http://up.example.com:8080/x?y=1 HTTP/1.1\r\n"
                  b"Host: up.example.com:8080\r\n"
                  b"Proxy-Authorization: Basic Y2xpZW50OnNlY3JldA==\r\n\r\n")
        got = b""
        while not got.endswith(b"ok"):
            chunk = c.recv(4096)
            if not chunk:
                break
            got += chunk
    head = seen[0].decode()
    assert head.startswith("GET http://up.example.com:8080/x?y=1 HTTP/1.1\r\n")
    assert f"Proxy-Authorization: Basic {base64.b64encode(b'bob:hunter2').decode()}" in head
    assert "Y2xpZW50OnNlY3JldA==" not in head  # the client's credentials stay here
    assert got.endswith(b"ok")
    assert proxy.decisions[0].via == f"http://127.0.0.1:{up.port}"


# --- real sandboxes through a real parent --------------------------------------


def _settings(tmp_path: Path, work: Path, network: dict) -> Path:
    return write_settings(tmp_path / "s.json", {
        "network": network, "filesystem": {"denyRead": [], "allowWrite": [str(work)],
                                           "denyWrite": []}})


@needs_bwrap
def test_allowed_connections_go_on_through_the_parent(tmp_path: Path, work: Path,
                                                      proxy_env: Net, audit_dir: Path) -> None:
    m = secrets.token_hex(6)
    port = free_port()
    with parent_proxy(tmp_path, proxy_env, ["up.example.com"], f"127.0.0.1:{port}") as parent:
        s = _settings(tmp_path, work, {
            "allowedDomains": ["up.example.com", "also.up.example.com"],
            "deniedDomains": ["bad.example.com"],
            "parentProxy": {"http": f"http://127.0.0.1:{port}"}})
        r = run_sandboxed(["sh", "-c",
                           f"curl -s -m 5 http://up.example.com:8080/h{m}; echo; "
                           f"curl -s -m 5 -p http://up.example.com:8080/c{m}; echo; "
                           f"curl -s -m 5 -x socks5h://127.0.0.1:1080 http://up.example.com:8080"
                           f"/s{m}; echo; "
                           f"curl -si -m 5 http://also.up.example.com:8080/p{m}; echo; "
                           f"curl -si -m 5 -p http://also.up.example.com:8080/q{m}; echo; "
                           f"curl -si -m 5 http://bad.example.com:8080/b{m}"], s, work, timeout=60)
        out = r.stdout.decode()
        for k in "hcs":
            assert f"upstream-ok /{k}{m}" in out and proxy_env.saw(f"/{k}{m}")
        # the parent's own policy still applies: its 403 comes back as it is
        assert f"GET http://also.up.example.com:8080/p{m}" not in out
        assert "403 Forbidden" in out and not proxy_env.saw(f"p{m}")
        # ... and a tunnel it refuses is our 502
        assert "X-Proxy-Error: upstream-failed" in out and not proxy_env.saw(f"q{m}")
        # our policy first: a denied name never reaches the parent
        assert "X-Proxy-Error: blocked-by-denylist" in out and not proxy_env.saw(f"b{m}")
        theirs = decisions(parent)
        assert {("http", "up.example.com", True), ("http-connect", "up.example.com", True),
                ("http", "also.up.example.com", False),
                ("http-connect", "also.up.example.com", False)} <= theirs
        assert not any(host == "bad.example.com" for _, host, _ in theirs)
    ours = [x for x in audit_records(audit_dir) if x.get("event") == "proxy.decision"]
    assert {x.get("via") for x in ours if x["allowed"]} == {f"http://127.0.0.1:{port}"}


@needs_bwrap
def test_no_proxy_and_the_environment(tmp_path: Path, work: Path, proxy_env: Net,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    m = secrets.token_hex(6)
    port = free_port()
    with parent_proxy(tmp_path, proxy_env, ["up.example.com", "also.up.example.com"],
                      f"127.0.0.1:{port}") as parent:
        # no parentProxy in the settings: the proxy's own environment names one
        monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{port}")
        monkeypatch.setenv("NO_PROXY", "also.up.example.com")
        s = _settings(tmp_path, work, {"allowedDomains": ["up.example.com",
                                                         "also.up.example.com"]})
        r = run_sandboxed(["sh", "-c",
                           f"curl -s -m 5 -p http://up.example.com:8080/e{m}; echo; "
                           f"curl -s -m 5 -p http://also.up.example.com:8080/n{m}"], s, work,
                          timeout=60)
        assert f"upstream-ok /e{m}".encode() in r.stdout
        assert f"upstream-ok /n{m}".encode() in r.stdout
        theirs = decisions(parent)
        assert ("http-connect", "up.example.com", True) in theirs
        assert not any(h == "also.up.example.com" for _, h, _ in theirs)  # went direct


@needs_bwrap
def test_mitm_domains_go_through_the_unix_socket(tmp_path: Path, work: Path,
                                                  proxy_env: Net) -> None:
    m = secrets.token_hex(6)
    sock = tmp_path / "mitm.sock"
    with parent_proxy(tmp_path, proxy_env, ["also.up.example.com"], f"unix:{sock}") as mitm:
        s = _settings(tmp_path, work, {
            "allowedDomains": ["up.example.com", "also.up.example.com"],
            "mitmProxy": {"socketPath": str(sock), "domains": ["also.up.example.com"]}})
        r = run_sandboxed(["sh", "-c",
                           f"curl -s -m 5 -p http://also.up.example.com:8080/i{m}; echo; "
                           f"curl -s -m 5 http://also.up.example.com:8080/j{m}; echo; "
                           f"curl -s -m 5 -p http://up.example.com:8080/d{m}"], s, work,
                          timeout=60)
        for k in "ijd":
            assert f"upstream-ok /{k}{m}".encode() in r.stdout
        theirs = decisions(mitm)
        assert {("http-connect", "also.up.example.com", True),
                ("http", "also.up.example.com", True)} <= theirs
        assert not any(h == "up.example.com" for _, h, _ in theirs)


def test_parent_settings_reach_srt_as_written() -> None:
    doc = {"network": {"allowedDomains": ["github.com"],
                       "parentProxy": {"http": "http://proxy.corp:3128", "noProxy": ".corp"},
                       "mitmProxy": {"socketPath": "/run/mitm.sock", "domains": ["github.com"]}},
           "filesystem": {"denyRead": [], "allowWrite": [], "denyWrite": []}}
    out = parse(doc).to_srt()
    assert out["network"]["parentProxy"] == doc["network"]["parentProxy"]
    assert out["network"]["mitmProxy"] == doc["network"]["mitmProxy"]
    assert json.loads(json.dumps(out)) == out


@pytest.mark.parametrize("head", [
    b"GET http://up.example.com/a\nX-Injected:1 HTTP/1.1\r\nHost: up.example.com\r\n\r\n",
    b"GET http://up.example.com/a HTTP/1.1\r\nHost: up.example.com\nX-Injected: 1\r\n\r\n",
    b"GET http://up.example.com/a\tHTTP/1.1 HTTP/1.1\r\nHost: up.example.com\r\n\r\n",
    b"GET http://up.example.com/a HTTP/1.1\r\nHost: up.example.com\rX: 1\r\n\r\n",
    b"CONNECT up.example.com:443\x00 HTTP/1.1\r\n\r\n",
])
def test_ambiguous_requests_are_refused_before_anything_is_passed_on(head: bytes) -> None:
    with scripted_parent(b"HTTP/1.1 200 OK\r\n\r\n") as (up, seen), \
            proxy_through(f"http://127.0.0.1:{up.port}") as (proxy, address), \
            socket.create_connection(address, timeout=5) as c:
        c.sendall(head)
        got = c.recv(4096)
    assert got.startswith(b"HTTP/1.1 403") and b"malformed-request" in got
    assert seen == []
    assert [d.reason for d in proxy.decisions] == ["malformed-request"]


@needs_bwrap
def test_http_proxy_port_uses_the_external_proxy_on_the_host(tmp_path: Path, work: Path,
                                                             proxy_env: Net,
                                                             audit_dir: Path) -> None:
    """srt's ``httpProxyPort``: the proxy service already on that host port does the
    filtering (its policy, its audit); SOCKS5, with no port given, is still ours."""
    m = secrets.token_hex(6)
    port = free_port()
    with parent_proxy(tmp_path, proxy_env, ["up.example.com"], f"127.0.0.1:{port}") as ext:
        s = _settings(tmp_path, work, {"allowedDomains": ["also.up.example.com"],
                                       "httpProxyPort": port})
        r = run_sandboxed(["sh", "-c",
                           f"curl -s -m 5 http://up.example.com:8080/e{m}; echo; "
                           f"curl -s -m 5 -x socks5h://127.0.0.1:1080 "
                           f"http://up.example.com:8080/s{m}; echo"], s, work, timeout=60)
        out = r.stdout.decode()
        assert f"upstream-ok /e{m}" in out and proxy_env.saw(f"/e{m}")
        assert not proxy_env.saw(f"/s{m}")  # our SOCKS5 decides: not in our allow list
        assert ("http", "up.example.com", True) in decisions(ext)
    ours = {(x["protocol"], x["host"]) for x in audit_records(audit_dir)
            if x.get("event") == "proxy.decision"}
    assert ours == {("socks5", "up.example.com")}
