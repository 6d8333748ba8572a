"""srt's current settings format, key by key: ports on domain entries, resolved
addresses, deny reasons, credentials, search depth, and the keys only srt
implements. Pure checks first; then real bwrap, the real proxy and a real
upstream in a network namespace, judged from the host (what the upstream saw,
what the audit holds, what a file still contains)."""

from __future__ import annotations

import ipaddress
import json
import os
import secrets
import subprocess
from pathlib import Path

import pytest
from conftest import PY, Net, audit_records, needs_bwrap, write_settings

from agent_sandbox.runtime.bwrap import argv as bwargv
from agent_sandbox.runtime.bwrap import fsview
from agent_sandbox.runtime.bwrap import plan as bw
from agent_sandbox.runtime.failures import InvalidSettingsError
from agent_sandbox.runtime.proxy import ProxyConfig, decide_name, range_refusal
from agent_sandbox.runtime.run import run_sandboxed
from agent_sandbox.runtime.settings import SettingsError, parse, require_enforceable
from agent_sandbox.spec.domains import (
    DomainError,
    host_allowed,
    split_port,
    validate_port_pattern,
)

# --- pure: patterns with ports ------------------------------------------------


@pytest.mark.parametrize("pattern,split", [
    ("api.example.com:443", ("api.example.com", 443)),
    ("api.example.com", ("api.example.com", None)),
    ("*.npmjs.org:8443", ("*.npmjs.org", 8443)),
    ("*:22", ("*", 22)),
    ("[::1]:443", ("[::1]", 443)),
    ("[2001:db8::1]", ("[2001:db8::1]", None)),
    ("2001:db8::1:443", ("2001:db8::1:443", None)),  # unbracketed: never a port
    ("evil.com:443.example.com", ("evil.com:443.example.com", None)),
    ("a.com:0", ("a.com:0", None)),
    ("a.com:080", ("a.com:080", None)),
    ("a.com:65536", ("a.com:65536", None)),
])
def test_split_port_follows_srt(pattern: str, split: tuple[str, int | None]) -> None:
    assert split_port(pattern) == split


@pytest.mark.parametrize("pattern,allow,canon", [
    ("API.Example.COM.:443", True, "api.example.com:443"),
    ("*.NPMJS.org:8443", True, "*.npmjs.org:8443"),
    ("[::ffff:127.0.0.1]:80", True, "127.0.0.1:80"),
    ("0x7f000001:8080", True, "127.0.0.1:8080"),
    ("[2001:db8::1]:443", True, "[2001:db8::1]:443"),
    ("*", False, "*"),
    ("*:22", False, "*:22"),
])
def test_port_patterns_are_canonical(pattern: str, allow: bool, canon: str) -> None:
    assert validate_port_pattern(pattern, allow_list=allow) == canon


@pytest.mark.parametrize("pattern,allow,fragment", [
    ("*:443", True, "would allow every domain"),
    ("example.com:0", True, "port after ':'"),
    ("example.com:99999", False, "port after ':'"),
    ("evil.com:443.example.com", True, "port after ':'"),
    ("https://example.com:443", True, "no scheme"),
    ("*.com:443", True, "too broad"),
])
def test_bad_port_patterns_are_refused(pattern: str, allow: bool, fragment: str) -> None:
    with pytest.raises(DomainError, match=fragment):
        validate_port_pattern(pattern, allow_list=allow)


def test_an_entry_with_a_port_counts_for_that_port_only() -> None:
    allowed = ["github.com:443", "*.npmjs.org", "[2001:db8::1]:8443"]
    assert host_allowed("github.com", allowed, [], 443) == (True, "allowed")
    assert host_allowed("github.com", allowed, [], 22) == (False, "blocked-by-allowlist")
    assert host_allowed("registry.npmjs.org", allowed, [], 1234)[0]
    assert host_allowed("2001:db8::1", allowed, [], 8443)[0]
    assert not host_allowed("2001:db8::1", allowed, [], 443)[0]
    # deny entries with a port, and a bare "*" deny-all
    assert host_allowed("github.com", ["github.com"], ["*:22"], 22) == (False,
                                                                        "blocked-by-denylist")
    assert host_allowed("github.com", ["github.com"], ["*:22"], 443)[0]
    assert not host_allowed("github.com", ["github.com"], ["*"], 443)[0]


# --- pure: the settings document ---------------------------------------------

SRT_DOC = {
    "network": {
        "allowedDomains": ["github.com:443", "*.npmjs.org", "10.1.2.3:8080"],
        "deniedDomains": ["*:22", "10.9.9.9"],
        "deniedDomainReasons": {"*:22": "SSH is blocked; use an https remote",
                                "not-listed.example": "never fires"},
        "deniedResolvedAddresses": ["10.0.0.0/8", "fc00::/7", "192.168.1.10"],
        "strictAllowlist": True,
        "allowMachLookup": ["com.example.*"],
    },
    "filesystem": {"denyRead": ["~/.ssh"], "allowWrite": ["."], "denyWrite": [],
                   "allowGitConfig": True},
    "credentials": {"files": [{"path": "~/.aws/credentials", "mode": "mask",
                               "extract": "key=(\\S+)"}],
                    "envVars": [{"name": "GITHUB_TOKEN", "mode": "deny"},
                                {"name": "NPM_TOKEN", "mode": "mask"}],
                    "allowPlaintextInject": True},  # srt masks only through TLS otherwise
    "mandatoryDenySearchDepth": 8,
    "ignoreViolations": {"*": ["/tmp"]},
    "enableWeakerNestedSandbox": False,
}


def test_current_srt_document_is_read_key_by_key() -> None:
    s = parse(SRT_DOC)
    n = s.network
    assert n.allowed_domains == ("github.com:443", "*.npmjs.org", "10.1.2.3:8080")
    assert n.denied_domains == ("*:22", "10.9.9.9")
    assert n.denied_addresses == ("10.0.0.0/8", "fc00::/7", "192.168.1.10/32")
    assert n.denied_reasons == (("*:22", "SSH is blocked; use an https remote"),)
    assert s.credential_files == ("~/.aws/credentials",)
    assert s.credential_env == ("GITHUB_TOKEN", "NPM_TOKEN")
    assert s.search_depth == 8 and s.srt_only == ()
    require_enforceable(s, "bwrap")  # nothing here needs srt itself


def test_to_srt_keeps_every_key_it_does_not_parse() -> None:
    s = parse(SRT_DOC)
    doc = s.to_srt()
    for key in ("credentials", "mandatoryDenySearchDepth", "ignoreViolations",
                "enableWeakerNestedSandbox"):
        assert doc[key] == SRT_DOC[key]
    for key in ("deniedDomainReasons", "deniedResolvedAddresses", "strictAllowlist",
                "allowMachLookup"):
        assert doc["network"][key] == SRT_DOC["network"][key]  # type: ignore[index]
    assert doc["filesystem"]["allowGitConfig"] is True
    assert parse(doc) == parse(json.loads(json.dumps(doc)))  # a fixed point
    assert parse(doc).network == s.network


@pytest.mark.parametrize("doc,fragment", [
    ({"credentials": {"file": []}}, "unknown key 'file'"),
    ({"credentials": {"files": [{"path": "~/.npmrc", "mode": "hide"}]}},
     "files[0].mode: expected 'deny' or 'mask'"),
    ({"credentials": {"files": [{"mode": "deny"}]}}, "files[0].path"),
    ({"credentials": {"envVars": [{"name": "1TOKEN", "mode": "deny"}]}},
     "'1TOKEN' is not a variable name"),
    ({"credentials": {"envVars": [{"name": "A-B", "mode": "deny"}]}}, "not a variable name"),
    ({"credentials": {"files": [{"path": "~user/x", "mode": "deny"}]}}, "only '~'"),
    ({"credentials": []}, "credentials: expected an object"),
    ({"network": {"deniedResolvedAddresses": ["10.0.0.0/33"]}}, "not an IP address or CIDR"),
    ({"network": {"deniedResolvedAddresses": ["[::1]"]}}, "IPv6 without brackets"),
    ({"network": {"deniedDomainReasons": {"*": ""}}}, "non-empty reasons"),
    ({"network": {"strictAllowlist": "yes"}}, "strictAllowlist: expected true or false"),
    ({"mandatoryDenySearchDepth": 0}, "whole number 1-10"),
    ({"mandatoryDenySearchDepth": True}, "whole number 1-10"),
    ({"filesystem": {"disabled": "yes"}}, "disabled: expected true or false"),
    ({"network": {"allowedDomains": ["github.com:22a"]}}, "port after ':'"),
])
def test_bad_srt_keys_are_refused_by_name(doc: dict, fragment: str) -> None:
    with pytest.raises(SettingsError) as err:
        parse(doc)
    assert fragment in str(err.value)


@pytest.mark.parametrize("doc,key", [
    ({"network": {"tlsTerminate": {}}}, "network.tlsTerminate"),
    ({"network": {"tlsTerminate": {"excludeDomains": ["a.example.com"]}}},
     "network.tlsTerminate"),
    ({"filesystem": {"disabled": True}}, "filesystem.disabled"),
])
def test_what_only_srt_does_is_refused_by_the_other_backends(doc: dict, key: str) -> None:
    s = parse(doc)
    assert s.srt_only == (key,)
    require_enforceable(s, "srt")  # srt itself gets the file as it is
    assert key.split(".")[1] in json.dumps(s.to_srt())
    for backend in ("bwrap", "gvisor"):
        with pytest.raises(SettingsError, match=f"{key}: only the srt backend"):
            require_enforceable(s, backend)
    assert parse({"filesystem": {"disabled": False}}).srt_only == ()


def test_resolved_address_ranges_and_literal_exemptions() -> None:
    s = parse(SRT_DOC)
    cfg = ProxyConfig.from_settings(s.network)
    ip = ipaddress.ip_address
    assert range_refusal(ip("10.20.30.40"), 443, cfg) == "denied-range 10.0.0.0/8"
    assert range_refusal(ip("::ffff:10.20.30.40"), 443, cfg) == "denied-range 10.0.0.0/8"
    assert range_refusal(ip("fd12::1"), 443, cfg) == "denied-range fc00::/7"
    assert range_refusal(ip("192.168.1.10"), 443, cfg) == "denied-range 192.168.1.10/32"
    assert range_refusal(ip("192.168.1.11"), 443, cfg) is None
    assert range_refusal(ip("93.184.216.34"), 443, cfg) is None
    # an address the allow list names itself, on its port only
    assert range_refusal(ip("10.1.2.3"), 8080, cfg) is None
    assert range_refusal(ip("10.1.2.3"), 443, cfg) == "denied-range 10.0.0.0/8"
    # an IP literal in the deny list refuses names resolving to it as well
    only_literal = ProxyConfig.from_settings(parse(
        {"network": {"allowedDomains": ["a.example.com"], "deniedDomains": ["10.9.9.9:443"]}}
    ).network)
    assert range_refusal(ip("10.9.9.9"), 443, only_literal) == "denied-range 10.9.9.9/32"
    assert range_refusal(ip("10.9.9.9"), 80, only_literal) is None


def test_deny_reason_names_the_entry_that_denied() -> None:
    n = parse(SRT_DOC).network
    d = decide_name("github.com", 22, n.allowed_domains, n.denied_domains,
                    dict(n.denied_reasons))
    assert (d.allowed, d.reason, d.detail) == (False, "blocked-by-denylist",
                                               "SSH is blocked; use an https remote")
    d = decide_name("10.9.9.9", 443, n.allowed_domains, n.denied_domains,
                    dict(n.denied_reasons))
    assert (d.reason, d.detail) == ("blocked-by-denylist", "")
    d = decide_name("github.com", 443, n.allowed_domains, n.denied_domains,
                    dict(n.denied_reasons))
    assert d.allowed and d.detail == ""


def test_credentials_are_hidden_and_unset_in_the_plan(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".aws").mkdir(parents=True)
    (home / ".aws" / "credentials").write_text("key=AKIA...\n")
    (home / "work").mkdir()
    s = parse({"filesystem": {"denyRead": [str(home)], "allowRead": [str(home / ".aws")],
                              "allowWrite": [str(home / "work")]},
               "credentials": {"files": [{"path": "~/.aws", "mode": "deny"}],
                               "envVars": [{"name": "GITHUB_TOKEN", "mode": "mask"}],
                               "allowPlaintextInject": True}})
    p = bw.plan(s, home=str(home), cwd=str(home / "work"), fs=fsview.RealFs())
    ops = {(m.op, m.path) for m in p.mounts}
    assert ("hide", str(home / ".aws")) in ops
    assert ("show", str(home / ".aws")) not in ops  # allowRead does not open a credential
    argv = bwargv.build_argv(p, ["true"], cwd=str(home / "work"))
    assert argv[argv.index("--unsetenv") + 1] == "GITHUB_TOKEN"
    assert argv.index("--unsetenv") < argv.index("--")


# --- real sandboxes ----------------------------------------------------------


def _settings(tmp_path: Path, work: Path, network: dict, **extra: object) -> Path:
    return write_settings(tmp_path / "s.json", {
        "network": network, "filesystem": {"denyRead": [], "allowWrite": [str(work)],
                                           "denyWrite": []}, **extra})


@needs_bwrap
def test_ports_on_entries_decide_per_port(tmp_path: Path, work: Path, proxy_env: Net,
                                          audit_dir: Path) -> None:
    m = secrets.token_hex(6)
    s = _settings(tmp_path, work, {
        "allowedDomains": ["up.example.com:8080", "also.up.example.com"],
        "deniedDomains": ["*:2222"],
        "deniedDomainReasons": {"*:2222": "the raw port is closed to agents"}})
    r = run_sandboxed(["sh", "-c",
                       f"curl -s -m 5 http://up.example.com:8080/p{m}; echo; "
                       f"curl -si -m 5 http://up.example.com:2222/q{m}; echo; "
                       f"curl -si -m 5 -p http://also.up.example.com:2222/r{m}; echo; "
                       f"curl -s -m 5 -x socks5h://127.0.0.1:1080 http://up.example.com:2222/"
                       f"s{m}; echo socks=$?"], s, work, timeout=60)
    out = r.stdout.decode()
    assert f"upstream-ok /p{m}" in out and proxy_env.saw(f"/p{m}")
    # port 2222: not in the allow entry for up.example.com, denied for everyone
    assert "X-Proxy-Error: blocked-by-denylist" in out
    assert "Blocked by agent-sandbox: blocked-by-denylist: the raw port is closed" in out
    assert "socks=97" in out
    for k in "qrs":
        assert not proxy_env.saw(f"{k}{m}")
    recs = [x for x in audit_records(audit_dir) if x.get("event") == "proxy.decision"]
    assert {(x["host"], x["port"], x["allowed"]) for x in recs} >= {
        ("up.example.com", 8080, True), ("up.example.com", 2222, False),
        ("also.up.example.com", 2222, False)}
    assert any(x.get("detail") == "the raw port is closed to agents" for x in recs)


@needs_bwrap
def test_resolved_address_ranges_are_refused(tmp_path: Path, work: Path, proxy_env: Net,
                                             audit_dir: Path) -> None:
    m = secrets.token_hex(6)
    net = str(ipaddress.ip_network(f"{proxy_env.up_ip}/24", strict=False))
    s = _settings(tmp_path, work, {"allowedDomains": ["up.example.com", "also.up.example.com"],
                                   "deniedResolvedAddresses": [net]})
    r = run_sandboxed(["sh", "-c", f"curl -si -m 5 http://up.example.com:8080/a{m}"], s, work,
                      timeout=60)
    assert b"X-Proxy-Error: blocked-by-address: denied-range " + net.encode() in r.stdout
    assert not proxy_env.saw(f"a{m}")
    # the allow list naming the address itself (and its port) lets it through
    s = _settings(tmp_path, work, {
        "allowedDomains": ["up.example.com", f"{proxy_env.up_ip}:8080"],
        "deniedResolvedAddresses": [net]})
    r = run_sandboxed(["sh", "-c", f"curl -s -m 5 http://up.example.com:8080/b{m}; echo; "
                       f"curl -si -m 5 -p http://up.example.com:2222/c{m}"], s, work,
                      timeout=60)
    assert f"upstream-ok /b{m}".encode() in r.stdout and proxy_env.saw(f"/b{m}")
    assert b"denied-range" in r.stdout and not proxy_env.saw(f"c{m}")
    # an IP literal in the deny list refuses every name that resolves to it
    s = _settings(tmp_path, work, {"allowedDomains": ["up.example.com"],
                                   "deniedDomains": [proxy_env.up_ip]})
    r = run_sandboxed(["sh", "-c", f"curl -si -m 5 http://up.example.com:8080/d{m}"], s, work,
                      timeout=60)
    assert b"denied-range" in r.stdout and not proxy_env.saw(f"d{m}")


@needs_bwrap
def test_credential_files_and_variables_never_reach_the_command(
        tmp_path: Path, work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    (home / ".aws").mkdir(parents=True)
    (home / ".aws" / "credentials").write_text("aws_secret_access_key=TOPSECRET\n")
    (work / ".npmrc").write_text("//registry.npmjs.org/:_authToken=NPMSECRET\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_TOPSECRET")
    monkeypatch.setenv("NPM_TOKEN", "npm_TOPSECRET")
    monkeypatch.setenv("KEEP_ME", "kept")
    s = _settings(tmp_path, work, {"allowedDomains": []}, credentials={
        "files": [{"path": "~/.aws/credentials", "mode": "mask"},
                  {"path": str(work / ".npmrc"), "mode": "deny"}],
        "envVars": [{"name": "GITHUB_TOKEN", "mode": "deny"},
                    {"name": "NPM_TOKEN", "mode": "mask"}], "allowPlaintextInject": True})
    r = run_sandboxed(["sh", "-c", "env; cat ~/.aws/credentials .npmrc; "
                       f"{PY} -c \"print(open('.npmrc').read())\"; "
                       "echo overwrite > .npmrc; echo rc=$?"], s, work, timeout=60)
    out = r.stdout + r.stderr
    assert b"TOPSECRET" not in out and b"NPMSECRET" not in out
    assert b"KEEP_ME=kept" in r.stdout
    # the file on the host is as it was: hidden means neither read nor replaced
    assert (work / ".npmrc").read_text() == "//registry.npmjs.org/:_authToken=NPMSECRET\n"


@needs_bwrap
def test_deeper_search_depth_protects_deeper_repositories(tmp_path: Path, work: Path) -> None:
    deep = work / "a" / "b" / "c" / "d" / "e" / "f"
    subprocess.run(["git", "init", "-q", str(deep)], check=True)
    hook = deep / ".git" / "hooks" / "pre-commit"
    s = _settings(tmp_path, work, {"allowedDomains": []}, mandatoryDenySearchDepth=8)
    r = run_sandboxed(["sh", "-c", f"echo evil > {hook}; echo rc=$?; "
                       f"git -C {deep} config core.fsmonitor evil; echo cfg=$?"], s, work,
                      timeout=60)
    assert not hook.exists()  # read-only while the command ran, nothing to sweep after
    assert b"rc=0" not in r.stdout and b"cfg=0" not in r.stdout
    assert "fsmonitor" not in (deep / ".git" / "config").read_text()
    assert not any(p.name.startswith(".git.sandbox-quarantine") for p in deep.iterdir())


def test_cli_refuses_srt_only_keys_with_a_remedy(tmp_path: Path, work: Path) -> None:
    s = _settings(tmp_path, work, {"allowedDomains": [], "tlsTerminate": {}})
    r = subprocess.run([PY, "-m", "agent_sandbox", "exec", "--settings", str(s), "--", "sh",
                        "-c", "touch ran"], cwd=work, capture_output=True, timeout=60,
                       env=dict(os.environ, AGENT_SANDBOX_NO_PLAN_CACHE="1"))
    assert r.returncode == 125
    assert b"network.tlsTerminate: only the srt backend implements this" in r.stderr
    assert b"--backend srt" in r.stderr
    assert not (work / "ran").exists()
    with pytest.raises(InvalidSettingsError, match="tlsTerminate"):
        run_sandboxed(["true"], s, work)
