"""The Windows host's run-time side (``agent_sandbox.windows_host``) with a fake
host that records every call. This is not a Windows run: no Windows host exists
here. The fake answers as srt-win's documented JSON and exit codes do (the
shapes its own package parses: ``dist/sandbox/windows-sandbox-utils.js``)."""

from __future__ import annotations

import json

import pytest

from agent_sandbox import windows_host as wh
from agent_sandbox.fleet import FleetRenderer
from agent_sandbox.render import windows

from .conftest import EXAMPLE_FLEET


def _engine() -> dict:
    fr = FleetRenderer.from_path(str(EXAMPLE_FLEET))
    host = next(h for h in fr.inventory if fr.facts(h).os == "windows")
    return json.loads(fr.render_host(host)[windows.plan_target(fr.facts(host))].content)["engine"]


class FakeHost:
    def __init__(self, *, profiles=None, status=None, verify_code=0, listener=51000):
        self.calls: list[tuple] = []
        self.profiles = profiles if profiles is not None else [
            {"Name": n, "Enabled": True, "AllowLocalFirewallRules": 2}
            for n in ("Domain", "Private", "Public")]
        self.status = status or {
            "user": {"user": {"exists": True, "sid": "S-1-5-21-1-2-3-1001",
                              "hidden_from_logon": True, "group_exists": True},
                     "cred_present": True},
            "wfp": {"state": "installed", "filters": 6, "port_range": [60080, 60089]}}
        self.verify_code = verify_code
        self.listener = listener

    def srt_win(self, exe, args, stdin=None):
        self.calls.append(("srt_win", exe, tuple(args)))
        if args[0] == "status":
            return wh.Ran(0, json.dumps(self.status))
        if args[:2] == ["wfp", "verify"]:
            return wh.Ran(self.verify_code, json.dumps({"target": args[-1]}), "probe")
        return wh.Ran(1, "", "unexpected")

    def powershell(self, script):
        self.calls.append(("powershell", script))
        return wh.Ran(0, json.dumps(self.profiles))

    def loopback_listener(self, avoid):
        self.calls.append(("listen", avoid))
        return self.listener


def _by(checks):
    return {c.name: c for c in checks}


def test_a_healthy_host_passes_every_check_and_the_calls_are_recorded():
    eng = _engine()
    host = FakeHost()
    checks = _by(wh.check(host, eng))
    assert all(c.ok for c in checks.values()), checks
    assert set(checks) == {"firewall_enabled", "firewall_local_rules", "engine_account",
                           "wfp_filters", "wfp_fence"}
    assert host.calls == [
        ("powershell", wh.FIREWALL_PROFILES_PS),
        ("srt_win", eng["exe"], ("status", "--sublayer-guid", eng["sublayer_guid"])),
        ("listen", tuple(eng["proxy_port_range"])),
        ("srt_win", eng["exe"], ("wfp", "verify", "--target", "127.0.0.1:51000")),
    ]


@pytest.mark.parametrize("change, failing", [
    (dict(profiles=[{"Name": "Public", "Enabled": False, "AllowLocalFirewallRules": 2}]),
     "firewall_enabled"),
    (dict(profiles=[{"Name": "Domain", "Enabled": True, "AllowLocalFirewallRules": 0}]),
     "firewall_local_rules"),
    (dict(verify_code=3), "wfp_fence"),
    (dict(verify_code=7), "wfp_fence"),
    (dict(status={"user": {"user": {"exists": True, "hidden_from_logon": True},
                           "cred_present": True},
                  "wfp": {"state": "installed", "port_range": [1, 65535]}}), "wfp_filters"),
    (dict(status={"user": {"user": {"exists": True, "hidden_from_logon": False},
                           "cred_present": False}, "wfp": {"state": "absent"}}),
     "engine_account"),
])
def test_each_failure_is_reported(change, failing):
    checks = _by(wh.check(FakeHost(**change), _engine()))
    assert not checks[failing].ok, checks[failing]
    others = [c for n, c in checks.items() if n != failing and n != "wfp_filters"]
    if failing != "engine_account":
        assert all(c.ok for c in others), others


def test_an_error_is_a_failure_never_a_pass():
    class Broken(FakeHost):
        def powershell(self, script):
            return wh.Ran(1, "", "Get-NetFirewallProfile : access denied")

        def srt_win(self, exe, args, stdin=None):
            return wh.Ran(0, "not json")

    checks = _by(wh.check(Broken(), _engine()))
    assert not checks["firewall"].ok and "access denied" in checks["firewall"].detail
    assert not checks["engine"].ok and "no JSON" in checks["engine"].detail


def test_exec_argv_runs_the_command_as_the_sandbox_account():
    eng = _engine()
    argv = wh.exec_argv(eng, 'git status && echo "x"', env={"HTTPS_PROXY": "http://127.0.0.1:60080"},
                        deny_write=["C:\\Users\\ann\\src\\.claude\\"])
    assert argv[:3] == [eng["exe"], "exec", "--quiet"]
    assert argv[argv.index("--deny-write") + 1] == "C:\\Users\\ann\\src\\.claude\\"
    assert "HTTPS_PROXY=http://127.0.0.1:60080" in argv
    sep = argv.index("--")
    assert argv[sep + 1:] == ["C:\\Windows\\System32\\cmd.exe", "/d", "/s", "/c",
                              'git status && echo "x"']
    with pytest.raises(ValueError):
        wh.exec_argv(eng, "a\x00b", env={})
    with pytest.raises(ValueError):
        wh.exec_argv(eng, "x", env={"A=B": "c"})


def test_every_session_denies_the_protected_names_at_the_top_of_each_folder():
    fr = FleetRenderer.from_path(str(EXAMPLE_FLEET))
    host = next(h for h in fr.inventory if fr.facts(h).os == "windows")
    plan = json.loads(fr.render_host(host)[windows.plan_target(fr.facts(host))].content)
    denies = wh.protected_denies(plan["protected"], ["C:\\Users\\ann\\src\\",
                                                      "D:\\work"])
    for want in ("C:\\Users\\ann\\src\\.claude\\", "C:\\Users\\ann\\src\\.mcp.json",
                 "C:\\Users\\ann\\src\\.git\\hooks\\", "C:\\Users\\ann\\src\\.git\\config",
                 "D:\\work\\.vscode\\", "D:\\work\\.git\\commondir"):
        assert want in denies, want
    argv = wh.exec_argv(_engine(), "dir", env={}, deny_write=denies)
    assert argv.count("--deny-write") == len(denies)


def test_verify_reads_the_installed_plan_and_fails_without_one(tmp_path):
    plan = tmp_path / "plan.json"
    missing = wh.verify(str(plan), FakeHost())
    assert [c.name for c in missing] == ["plan"] and not missing[0].ok
    plan.write_text(json.dumps({"engine": _engine()}))
    host = FakeHost()
    checks = wh.verify(str(plan), host)
    assert checks and all(c.ok for c in checks) and host.calls
    # the plan path is where the Windows render installs it
    fr = FleetRenderer.from_path(str(EXAMPLE_FLEET))
    win = next(h for h in fr.inventory if fr.facts(h).os == "windows")
    assert windows.plan_target(fr.facts(win)).replace("/", "\\") == wh.PLAN_PATH
