"""Windows: the provisioning script read with a PowerShell parser, each cmdlet
call checked argument by argument against the plan and the cmdlets' real
parameter sets, the plan's firewall and ACL decisions checked as data.

The parser is tree-sitter-powershell (PyPI); it is a grammar, not PowerShell's
own parser: Debian has no PowerShell and the package registries reachable here
carry none, so the script is parsed but not run. No Windows host exists here.
"""

from __future__ import annotations

import ipaddress
import json
import re

import pytest

from agent_sandbox.inventory import HostFacts, User
from agent_sandbox.render import RenderError, render, windows
from agent_sandbox.spec.models import Spec

from .conftest import hosts_of
from .psast import Block, Script, Var

WIN_HOSTS = hosts_of("windows")
COMMON = {"erroraction", "whatif", "confirm", "verbose", "warningaction"}

# Parameters of the cmdlets the script calls, and which of them are switches and
# which are mandatory in the parameter set used. Source: Microsoft's module
# reference (learn.microsoft.com/powershell/module/: netsecurity,
# microsoft.powershell.localaccounts, microsoft.powershell.security,
# microsoft.powershell.management, microsoft.powershell.utility, microsoft.powershell.core).
# No package from PyPI or npm ships the metadata of these modules (NetSecurity
# and LocalAccounts exist only on Windows), so this table stands in for it.
CMDLETS: dict[str, tuple[set[str], set[str], set[str]]] = {
    # name: (parameters, switches, mandatory)
    "Get-LocalGroup": ({"name", "sid"}, set(), set()),
    "New-LocalGroup": ({"name", "description"}, set(), {"name"}),
    "Get-LocalUser": ({"name", "sid"}, set(), set()),
    "New-LocalUser": ({"name", "password", "nopassword", "description", "accountneverexpires",
                       "accountexpires", "passwordneverexpires", "usermaynotchangepassword",
                       "disabled", "fullname"},
                      {"nopassword", "accountneverexpires", "passwordneverexpires",
                       "usermaynotchangepassword", "disabled"}, {"name", "password"}),
    "Set-LocalUser": ({"name", "password", "description", "accountneverexpires",
                       "passwordneverexpires", "usermaychangepassword", "fullname"},
                      {"accountneverexpires"}, {"name"}),
    "Get-LocalGroupMember": ({"group", "member", "name", "sid"}, set(), set()),
    "Add-LocalGroupMember": ({"group", "member", "name", "sid"}, set(), {"member"}),
    "Get-NetFirewallRule": ({"name", "displayname", "group", "all"}, {"all"}, set()),
    "New-NetFirewallRule": ({"name", "displayname", "description", "group", "direction",
                             "action", "protocol", "remoteaddress", "remoteport", "localuser",
                             "profile", "enabled", "localaddress", "localport", "program"},
                            set(), {"displayname"}),
    "Remove-NetFirewallRule": ({"name", "displayname", "group"}, set(), set()),
    "Get-NetFirewallSecurityFilter": ({"associatednetfirewallrule", "all"}, {"all"}, set()),
    "Get-Acl": ({"path", "literalpath"}, set(), set()),
    "Set-Acl": ({"path", "literalpath", "aclobject"}, set(), {"aclobject"}),
    "Test-Path": ({"path", "literalpath", "pathtype"}, set(), set()),
    "New-Item": ({"path", "itemtype", "force", "name", "value"}, {"force"}, set()),
    "Split-Path": ({"path", "parent", "leaf"}, {"parent", "leaf"}, set()),
    "Get-ItemProperty": ({"path", "literalpath", "name"}, set(), set()),
    "New-ItemProperty": ({"path", "name", "propertytype", "value", "force"}, {"force"},
                         {"name"}),
    "ConvertTo-SecureString": ({"string", "asplaintext", "force"}, {"asplaintext", "force"},
                               {"string"}),
    "Remove-Variable": ({"name", "scope"}, set(), {"name"}),
    "Add-Type": ({"assemblyname", "typedefinition"}, set(), set()),
    "New-Object": ({"typename", "argumentlist"}, set(), set()),
    "Out-Null": (set(), set(), set()),
    "Where-Object": (set(), set(), set()),
    "Get-Variable": ({"name", "scope"}, set(), set()),
    "ConvertTo-Json": ({"compress", "depth", "inputobject"}, {"compress"}, set()),
    "Set-StrictMode": ({"version"}, set(), set()),
    "Get-NetFirewallAddressFilter": ({"associatednetfirewallrule", "all"}, {"all"}, set()),
    "Get-NetFirewallPortFilter": ({"associatednetfirewallrule", "all"}, {"all"}, set()),
    "Get-NetFirewallProfile": ({"name", "policystore", "all"}, {"all"}, set()),
    "Get-Content": ({"path", "literalpath", "raw", "encoding"}, {"raw"}, set()),
    "Set-Content": ({"path", "literalpath", "value", "encoding", "force", "nonewline"},
                    {"force", "nonewline"}, set()),
    "Remove-Item": ({"path", "literalpath", "force", "recurse"}, {"force", "recurse"}, set()),
    "Join-Path": ({"path", "childpath"}, set(), {"path", "childpath"}),
    "ConvertFrom-Json": ({"inputobject", "depth"}, set(), set()),
    "Get-ChildItem": ({"path", "literalpath", "recurse", "force", "file", "directory"},
                      {"recurse", "force", "file", "directory"}, set()),
    "ForEach-Object": (set(), set(), set()),
    "Remove-ItemProperty": ({"path", "literalpath", "name", "force"}, {"force"}, {"name"}),
    "Remove-LocalGroup": ({"name", "sid"}, set(), set()),
    # native programs: secedit (user rights) and the engine, srt-win
    "secedit.exe": (set(), set(), set()),
}
MUTATING = {"New-LocalUser", "Set-LocalUser", "New-LocalGroup", "Add-LocalGroupMember",
            "New-NetFirewallRule", "Remove-NetFirewallRule", "Set-Acl", "New-ItemProperty",
            "New-Item", "Set-Content", "Remove-ItemProperty", "Remove-LocalGroup",
            "Remove-Item"}
FILESYSTEM_RIGHTS = {"ReadData", "ListDirectory", "WriteData", "CreateFiles", "AppendData",
                     "CreateDirectories", "ReadExtendedAttributes", "WriteExtendedAttributes",
                     "ExecuteFile", "Traverse", "DeleteSubdirectoriesAndFiles", "ReadAttributes",
                     "WriteAttributes", "Delete", "ReadPermissions", "ChangePermissions",
                     "TakeOwnership", "Synchronize", "FullControl", "Read", "ReadAndExecute",
                     "Write", "Modify"}


def _script(fleet, host) -> tuple[Script, dict, dict]:
    facts = fleet.facts(host)
    arts = fleet.render_host(host)
    text = arts[windows.script_target(facts)].content
    plan = json.loads(arts[windows.plan_target(facts)].content)
    switches = {k: v[1] for k, v in CMDLETS.items()}
    return Script(text, switches), plan, arts


@pytest.mark.parametrize("host", WIN_HOSTS)
def test_script_parses(fleet, host):
    script, _, _ = _script(fleet, host)
    assert script.errors() == []
    assert {"invoke-change", "set-sandboxfirewallrule", "add-sandboxace",
            "assert-ownedaccount", "invoke-engine"} <= set(script.functions)


def test_parser_catches_broken_scripts():
    assert Script(b"if ($x { Write-Host 'a' ").errors()
    assert not Script(b"if ($x) { Write-Host 'a' }").errors()


@pytest.mark.parametrize("host", WIN_HOSTS)
def test_every_call_uses_real_parameters(fleet, host):
    script, plan, _ = _script(fleet, host)
    calls = script.calls()
    assert len(calls) > 50
    engine_calls = 0
    for call in calls:
        if call.name == "$ChangeBlock":  # & $ChangeBlock inside Invoke-Change
            continue
        if call.name == windows.ps_quote(plan["engine"]["exe"]):
            # the engine is called in one place, with the arguments it was given
            assert call.positional == [Var("@arguments")] and not call.params
            assert ("function", "Invoke-Engine") in script.enclosing(call.node)
            engine_calls += 1
            continue
        fn = script.functions.get(call.name.lower())
        if fn is not None:
            allowed = set(fn.params)
            mandatory = {p for p, a in fn.params.items() if a["mandatory"]}
        else:
            assert call.name in CMDLETS, f"unexpected command {call.name}"
            allowed, _, mandatory = CMDLETS[call.name]
        for p in call.params:
            assert p in allowed | COMMON, f"{call.name} has no parameter -{p}"
        if call.name == "Invoke-Change":
            assert len(call.positional) == 2 and isinstance(call.positional[1], Block)
            continue
        given = set(call.params)
        if Var("@params") in call.positional:  # splatted: the hashtable's keys
            (table,) = [h for h in script.hashtables() if "Direction" in h]
            given |= {k.lower() for k in table}
        missing = mandatory - given
        if call.name == "New-Object" and call.positional:
            missing -= {"typename"}
        assert not missing, f"{call.name} lacks {missing}"
        if "erroraction" in call.params:
            assert call.params["erroraction"] in (["SilentlyContinue"], ["Stop"])
    assert engine_calls == 1


@pytest.mark.parametrize("host", WIN_HOSTS)
def test_firewall_calls_match_the_plan_argument_by_argument(fleet, host):
    script, plan, _ = _script(fleet, host)
    calls = script.calls("Set-SandboxFirewallRule")
    assert len(calls) == len(plan["firewall"]) == 4
    for call, rule in zip(calls, plan["firewall"], strict=True):
        p = call.params
        assert p["name"] == [rule["name"]]
        assert p["displayname"] == [rule["display_name"]]
        assert p["action"] == [rule["action"]] and rule["action"] in ("Block", "Allow")
        assert p["protocol"] == [rule["protocol"]]
        assert p["remoteaddress"] == [rule["remote_address"]]
        assert p.get("remoteport", [[]]) == [rule["remote_port"]]
        assert p["fingerprint"] == [rule["fingerprint"]]
        assert p["localuser"] == [Var("sddl")], "scoped to the group's SID, resolved on the host"
    # the splatted New-NetFirewallRule: real parameters, outbound, scoped by LocalUser
    tables = [h for h in script.hashtables() if "Direction" in h]
    assert len(tables) == 1
    keys = {k.lower() for k in tables[0]}
    assert keys <= CMDLETS["New-NetFirewallRule"][0]
    assert tables[0]["Direction"] == "'Outbound'" and tables[0]["LocalUser"] == "$LocalUser"
    sddl = [c for c in script.calls("Get-SandboxGroupSddl")]
    assert sddl and sddl[0].params["name"] == [plan["group"]]
    assert "'D:(A;;CC;;;' + $group.SID.Value + ')'" in script.src.decode()


@pytest.mark.parametrize("host", WIN_HOSTS)
def test_acl_calls_match_the_plan_argument_by_argument(fleet, host):
    script, plan, _ = _script(fleet, host)
    calls = [c for c in script.calls("Add-SandboxAce")
             if ("function", "Protect-ExistingNames") not in script.enclosing(c.node)]
    assert len(calls) == len(plan["acl"]) > 0
    for call, ace in zip(calls, plan["acl"], strict=True):
        p = call.params
        assert p["path"] == [ace["path"]] and re.match(r"^[A-Z]:\\", ace["path"])
        assert p["identity"] == [plan["group"]]
        assert p["rights"] == [ace["rights"]]
        assert {r.strip() for r in ace["rights"].split(",")} <= FILESYSTEM_RIGHTS
        assert p["type"] == [ace["type"].capitalize()]
        assert ("ifexists" in p) == ace["if_exists"]
    # ACEs are added to the existing list, never replacing it
    body = script.functions["add-sandboxace"]
    text = script.src[body.node.start_byte:body.node.end_byte].decode()
    assert "AddAccessRule" in text
    # an existing ACE counts only when it is this group's, by SID, exactly
    assert "$ace.IdentityReference.Value -ceq $sid" in text and "-like" not in text
    assert "SetAccessRule" not in text and "RemoveAccessRule" not in text
    assert "SetAccessRuleProtection" not in text


@pytest.mark.parametrize("host", WIN_HOSTS)
def test_account_is_the_engines_never_adopted_and_denied_other_logons(fleet, host):
    script, plan, _ = _script(fleet, host)
    (group,) = script.calls("New-LocalGroup")
    assert group.params["name"] == [plan["group"]]
    # no password is ever set here: the engine creates the account and keeps its
    # credential, and an existing account is never re-passworded or adopted
    assert not script.calls("New-LocalUser") and not script.calls("Set-LocalUser")
    assert "ConvertTo-SecureString" not in script.src.decode()
    (member,) = script.calls("Add-LocalGroupMember")
    assert member.params == {"group": [plan["group"]], "member": [Var("sid")]}
    # every step that touches the account first refuses one it did not create
    fn = script.functions["assert-ownedaccount"]
    body = script.src[fn.node.start_byte:fn.node.end_byte].decode()
    assert "-cne (Get-OwnedAccountSid)" in body and "throw" in body
    sites = script.calls("Assert-OwnedAccount")
    assert len(sites) == 3  # Engine, Account, Uninstall
    # the marker is written only right after an install that created the account
    marks = [c for c in script.calls("New-ItemProperty")
             if c.params.get("name") == [plan["ownership"]["name"]]]
    assert len(marks) == 1
    assert marks[0].params["path"] == [plan["ownership"]["path"]]
    assert marks[0].params["value"] == ["$created.SID.Value"]
    text = script.src.decode()
    assert "if ($null -eq $before)" in text
    for right in ("SeDenyNetworkLogonRight", "SeDenyBatchLogonRight",
                  "SeDenyServiceLogonRight", "SeDenyRemoteInteractiveLogonRight"):
        assert right in plan["deny_logon_rights"] and f"'{right}'" in text
    hide = [c for c in script.calls("New-ItemProperty") if c.params.get("path") ==
            [plan["hidden_key"]]]
    assert len(hide) == 1 and hide[0].params["value"] == ["0"]
    assert hide[0].params["propertytype"] == ["DWord"]


@pytest.mark.parametrize("host", WIN_HOSTS)
def test_engine_is_srt_win_with_the_specs_account_and_ports(fleet, host):
    script, plan, _ = _script(fleet, host)
    spec = fleet.spec_for(host)
    eng = plan["engine"]
    lo, hi = spec.platforms.windows.proxy_port_range
    assert eng["kind"] == "srt-win" and eng["version"] == "0.0.78"
    assert eng["install_args"] == ["install", "--sublayer-guid", eng["sublayer_guid"],
                                   "--proxy-port-range", f"{lo}-{hi}", "--sandbox-user",
                                   spec.platforms.windows.account]
    text = script.src.decode()
    assert windows.ps_list(eng["install_args"]) in text
    # the fence step fails closed on a disabled profile, GPO ignoring local
    # rules, and a direct connection from the account (srt-win exit 3)
    for needle in ("Get-NetFirewallProfile -PolicyStore ActiveStore",
                   "AllowLocalFirewallRules.ToString() -ceq 'False'",
                   "$profile.Enabled.ToString() -cne 'True'", "if ($probe.Code -eq 3) { throw",
                   "if ($probe.Code -ne 0) { throw"):
        assert needle in text, needle


@pytest.mark.parametrize("host", WIN_HOSTS)
def test_state_folder_is_taken_over_with_a_fixed_acl(fleet, host):
    script, plan, _ = _script(fleet, host)
    text = script.src.decode()
    want = "O:BAG:BAD:PAI(A;OICI;FA;;;SY)(A;OICI;FA;;;BA)(A;OICI;0x1200a9;;;BU)"
    assert f"$wantSddl = '{want}'" in text
    assert "if ($haveSddl -cne $wantSddl)" in text  # owner and ACL compared exactly
    assert "SetOwner((New-Object System.Security.Principal.SecurityIdentifier('S-1-5-32-544')))" \
        in text
    assert plan["state_dir"] == "C:\\ProgramData\\agent-sandbox"


@pytest.mark.parametrize("host", WIN_HOSTS)
def test_firewall_drift_compares_every_property_case_sensitively(fleet, host):
    script, _, _ = _script(fleet, host)
    fn = script.functions["set-sandboxfirewallrule"]
    body = script.src[fn.node.start_byte:fn.node.end_byte].decode()
    for prop in ("Description", "DisplayName", "Enabled", "Direction", "Action", "Profile",
                 "LocalUser", "RemoteAddress", "Protocol", "RemotePort"):
        assert re.search(prop + r"[^\n]*-ceq", body), prop
    assert " -eq $description" not in body and "-like" not in body


@pytest.mark.parametrize("host", WIN_HOSTS)
def test_every_change_is_guarded_for_check_mode(fleet, host):
    script, _, _ = _script(fleet, host)
    text = script.src.decode()
    assert "[CmdletBinding(SupportsShouldProcess = $true)]" in text
    assert "if ($WhatIfPreference) { $CheckMode = $true }" in text
    guarded_functions = set()
    # functions whose every call site is inside an Invoke-Change block
    for name in script.functions:
        sites = script.calls(name)
        if sites and all(("block-of", "Invoke-Change") in script.enclosing(c.node)
                         for c in sites):
            guarded_functions.add(name)
    assert "set-sandboxfirewallrule" not in guarded_functions  # it guards inside
    # (the temporary export of the user rights, made and removed by the script itself,
    # is the one removal that runs in check mode)
    mutating = [c for c in script.calls() if c.name in MUTATING
                and c.params.get("literalpath") != [Var("export")]]
    mutating += [n for n in script.nodes("invokation_expression")
                 if re.search(rb"WriteAll(Text|Bytes)", script.src[n.start_byte:n.end_byte])]
    assert len(mutating) > 8
    for item in mutating:
        node = getattr(item, "node", item)
        scopes = script.enclosing(node)
        ok = ("block-of", "Invoke-Change") in scopes or any(
            kind == "function" and name.lower() in guarded_functions for kind, name in scopes)
        line = node.start_point[0] + 1
        assert ok, f"line {line}: a change outside Invoke-Change runs in check mode"
    # and Invoke-Change runs the block only outside check mode
    fn = script.functions["invoke-change"]
    assert "if (-not $CheckMode) { & $ChangeBlock }" in \
        script.src[fn.node.start_byte:fn.node.end_byte].decode()


@pytest.mark.parametrize("host", WIN_HOSTS)
def test_managed_settings_file_and_registry(fleet, host):
    script, plan, arts = _script(fleet, host)
    settings_file = arts["C:/Program Files/ClaudeCode/managed-settings.json"].content
    assert plan["managed_settings_file"] == "C:\\Program Files\\ClaudeCode\\managed-settings.json"
    text = script.src.decode()
    embedded = re.search(r"\$settings = @'\n(.*?)\n'@", text, re.S).group(1)
    assert (embedded + "\n").encode() == settings_file
    reg = plan["registry"]
    assert reg["path"] == "HKLM:\\SOFTWARE\\Policies\\ClaudeCode" and reg["name"] == "Settings"
    assert json.loads(reg["data"]) == json.loads(settings_file)
    policy = re.search(r"\$policy = @'\n(.*?)\n'@", text, re.S).group(1)
    assert policy == reg["data"]
    (prop,) = [c for c in script.calls("New-ItemProperty") if c.params["name"] == ["Settings"]]
    assert prop.params["path"] == [reg["path"]] and prop.params["name"] == ["Settings"]
    assert prop.params["propertytype"] == ["String"] and prop.params["value"] == [Var("policy")]


# ----------------------------------------------------------------- the plan


def _ranges(items):
    nets = []
    for item in items:
        if "-" in item:
            lo, hi = (ipaddress.ip_address(x) for x in item.split("-"))
            nets += list(ipaddress.summarize_address_range(lo, hi))
        else:
            nets.append(ipaddress.ip_network(item))
    return nets


def test_firewall_blocks_everything_but_loopback_to_the_proxy_ports():
    rules = windows.firewall_rules(Spec())
    remote = _ranges(rules[0]["remote_address"])
    v4 = [n for n in remote if n.version == 4]
    v6 = [n for n in remote if n.version == 6]
    assert sum(n.num_addresses for n in v4) == 2**32 - 2**24
    assert not any(n.overlaps(ipaddress.ip_network("127.0.0.0/8")) for n in v4)
    assert sum(n.num_addresses for n in v6) == 2**128 - 1
    assert not any(ipaddress.ip_address("::1") in n for n in v6)
    by_name = {r["name"]: r for r in rules}
    lo, hi = Spec().platforms.windows.proxy_port_range
    blocked = set()
    for part in by_name["agent-sandbox-block-loopback-tcp"]["remote_port"]:
        a, _, b = part.partition("-")
        blocked |= set(range(int(a), int(b or a) + 1))
    assert blocked | set(range(lo, hi + 1)) == set(range(1, 65536))
    assert not blocked & set(range(lo, hi + 1))
    assert by_name["agent-sandbox-allow-proxy"]["remote_port"] == [f"{lo}-{hi}"]
    assert all(r["action"] == "Block" for n, r in by_name.items() if "block" in n)


def test_port_range_edges():
    spec = Spec.model_validate({"platforms": {"windows": {"proxy_port_range": [1, 65535]}}})
    names = [r["name"] for r in windows.firewall_rules(spec)]
    assert "agent-sandbox-block-loopback-tcp" not in names
    spec = Spec.model_validate({"platforms": {"windows": {"proxy_port_range": [2, 65534]}}})
    tcp = next(r for r in windows.firewall_rules(spec) if r["name"].endswith("tcp"))
    assert tcp["remote_port"] == ["1", "65535"]


def test_acl_plan_maps_paths_and_says_what_it_skips():
    facts = HostFacts("w", "windows", (User("ann", "C:/Users/ann"),))
    spec = Spec.model_validate({"filesystem": {
        "allow_write": ["~/src", "D:/builds", "/tmp", "out/*.log"],
        "deny_read": ["~/.ssh", "**/.env", "**/*.pem"],
        "allow_read": ["~/.ssh/known_hosts"],
        "deny_write": ["D:/builds/release"],
    }})
    acl, skipped = windows.acl_entries(spec, facts)
    got = {(a["path"], a["rights"], a["type"]) for a in acl}
    assert ("C:\\Users\\ann\\src", "Modify", "allow") in got
    assert ("D:\\builds", "Modify", "allow") in got
    assert ("C:\\Users\\ann\\.ssh", "Read", "deny") in got
    assert ("C:\\Users\\ann\\.ssh\\known_hosts", "ReadAndExecute", "allow") in got
    assert ("C:\\Users\\ann\\src\\.env", "Read", "deny") in got
    assert ("D:\\builds\\release", "Write, Delete", "deny") in got
    assert ("C:\\Users\\ann\\src\\.git\\hooks", "Write, Delete", "deny") in got
    assert ("D:\\builds\\.claude", "Write, Delete", "deny") in got
    skipped_rules = {(s["section"], s["rule"]) for s in skipped}
    assert skipped_rules == {("allow_write", "/tmp"), ("allow_write", "out/*.log"),
                             ("deny_read", "**/*.pem")}
    roots = [a for a in acl if a["type"] == "allow" and a["rights"] == "Modify"]
    assert all(not a["if_exists"] for a in roots)
    assert all(a["if_exists"] for a in acl if a["type"] == "deny"
               and a["reason"] != "parent delete-child")
    # no root lets a protected child be deleted through the parent
    for root in ("C:\\Users\\ann\\src", "D:\\builds"):
        assert (root, "DeleteSubdirectoriesAndFiles", "deny") in got


def test_bad_names_and_strings_are_refused():
    facts = HostFacts("w", "windows", (User("ann", "C:/Users/ann"),))
    with pytest.raises(ValueError, match="not a valid local account"):
        Spec.model_validate({"platforms": {"windows": {"account": "a;b"}}})
    spec = Spec()
    spec.platforms.windows.account = "a;b"  # unvalidated: the renderer refuses too
    with pytest.raises(RenderError, match=r"platforms\.windows\.account"):
        windows.windows_plan(spec, facts)
    assert windows.ps_quote("it's") == "'it''s'"
    assert windows.ps_quote("a\u2019b") == "'a\u2019\u2019b'"
    with pytest.raises(RenderError):
        windows.here_string("x\n'@\nWrite-Host pwned")
    spec = Spec.model_validate({"filesystem": {"allow_write": ["~/it's here"]}})
    script = Script(windows.provision_script(spec, facts))
    assert script.errors() == []
    paths = [c.params["path"][0] for c in script.calls("Add-SandboxAce")]
    assert "C:\\Users\\ann\\it's here" in paths


def test_only_windows_hosts_get_windows_artifacts(fleet):
    for host in fleet.inventory:
        kinds = {a.kind for a in fleet.render_host(host).values()}
        assert ({"windows-plan", "powershell"} <= kinds) == (fleet.facts(host).os == "windows")


def test_rendering_is_deterministic():
    facts = HostFacts("w", "windows", (User("ann", "C:/Users/ann"),))
    a = render(Spec(), facts)
    b = render(Spec(), facts)
    assert {t: x.content for t, x in a.items()} == {t: x.content for t, x in b.items()}


def test_per_spec_acl_template_matches_direct_expansion():
    spec = Spec.model_validate({"filesystem": {
        "allow_write": ["~/src", "~", "D:/builds"], "deny_read": ["~/.ssh", "**/.env"],
        "allow_read": ["~/.ssh/known_hosts"], "deny_write": ["~/src/vendor"]}})
    users = (User("ann", "C:/Users/ann"), User("bob", "D:\\Home\\bob\\"))
    facts = HostFacts("w", "windows", users)
    fast, _ = windows.acl_entries(spec, facts)
    direct: dict = {}
    for u in users:
        for e in windows._user_acl(spec, u.home)[0]:
            direct.setdefault((e["path"].lower(), e["rights"], e["type"]), e)
    assert fast == list(direct.values())
    assert any(e["path"] == "D:\\Home\\bob\\src" for e in fast)
    # a rule that needs folding ('..') takes the direct path
    odd = Spec.model_validate({"filesystem": {"allow_write": ["~/../shared"]}})
    (entry, *_), _ = windows.acl_entries(odd, facts)
    assert entry["path"] == "C:\\Users\\shared"


@pytest.mark.parametrize("host", WIN_HOSTS)
def test_plan_artifact_is_the_plan(fleet, host):
    spec, facts = fleet.spec_for(host), fleet.facts(host)
    text = fleet.render_host(host)[windows.plan_target(facts)].content
    assert json.loads(text) == windows.windows_plan(spec, facts)
    assert text == (json.dumps(windows.windows_plan(spec, facts), sort_keys=True,
                               ensure_ascii=False) + "\n").encode()


@pytest.mark.parametrize("host", WIN_HOSTS)
def test_aces_the_spec_dropped_are_removed_and_uninstall_takes_everything_back(fleet, host):
    script, plan, _ = _script(fleet, host)
    text = script.src.decode()
    # every ACE the plan asks for is recorded; earlier ones not asked for are removed
    fn = script.functions["add-sandboxace"]
    assert "$script:WantedAces.Add($Type + '|' + $Rights + '|' + $Path)" in \
        script.src[fn.node.start_byte:fn.node.end_byte].decode()
    sync = script.functions["sync-sandboxacerecord"]
    body = script.src[sync.node.start_byte:sync.node.end_byte].decode()
    assert "if ($Wanted -ccontains $entry) { continue }" in body
    assert "Remove-SandboxAce -Path $parts[2]" in body
    assert len(script.calls("Sync-SandboxAceRecord")) == 2
    acl_step = text[text.index("if ($Steps -contains 'Acl')"):text.index("# --- Claude Code")]
    assert ("Sync-SandboxAceRecord -Wanted @($script:WantedAces) -Identity "
            + windows.ps_quote(plan["group"])) in acl_step
    rm = script.functions["remove-sandboxace"]
    body = script.src[rm.node.start_byte:rm.node.end_byte].decode()
    assert "$_.IdentityReference.Value -ceq $sid" in body  # by SID, exactly
    assert "-not $_.IsInherited" not in body and "GetAccessRules($true, $false" in body
    # uninstall: not a default step; takes back ACEs, rules, policy, rights, engine, group
    default = re.search(r"\[string\[\]\]\$Steps = @\(([^)]*)\)", text).group(1)
    assert "'Uninstall'" not in default
    block = text[text.index("if ($Steps -contains 'Uninstall')"):]
    for needle in ("Sync-SandboxAceRecord -Wanted @()", "Remove-NetFirewallRule",
                   windows.ps_list(plan["engine"]["uninstall_args"]), "Remove-LocalGroup",
                   "give back the logon rights", "$owned = Assert-OwnedAccount"):
        assert needle in block, needle


@pytest.mark.parametrize("host", WIN_HOSTS)
def test_existing_protected_names_at_any_depth_get_the_deny(fleet, host):
    script, plan, _ = _script(fleet, host)
    from agent_sandbox import protected

    names = plan["protected"]["names"]
    assert ".claude\\" in names and ".mcp.json" in names and ".vscode\\" in names
    assert len(names) == len(protected.ANY_DEPTH)
    assert plan["protected"]["git"] == ["config", "config.worktree", "hooks\\", "commondir"]
    walks = script.calls("Protect-ExistingNames")
    assert sorted(w.params["root"][0] for w in walks) == plan["roots"]
    assert all(w.params["identity"] == [plan["group"]] for w in walks)
    fn = script.functions["protect-existingnames"]
    body = script.src[fn.node.start_byte:fn.node.end_byte].decode()
    assert "Get-ChildItem -LiteralPath $Root -Recurse -Force -ErrorAction Stop" in body
    # NTFS names are compared without regard to case (.CLAUDE is .claude)
    assert ".EndsWith('\\' + $bare, [System.StringComparison]::OrdinalIgnoreCase)" in body
    inner = [c for c in script.calls("Add-SandboxAce")
             if ("function", "Protect-ExistingNames") in script.enclosing(c.node)]
    assert len(inner) == 3  # names, Python's start-up patterns, inside git folders
    assert all(c.params["rights"] == ["Write, Delete"] and c.params["type"] == ["Deny"]
               for c in inner)
    assert "site-packages\\*.pth" in plan["protected"]["patterns"]
    assert len(plan["protected"]["patterns"]) == len(protected.PYTHON_STARTUP)
    assert "$relative -like $pattern -or $relative -like ('*\\' + $pattern)" in body
