"""macOS: Seatbelt profiles read as s-expressions and evaluated rule by rule,
the LaunchDaemon and the .mobileconfig read with plistlib, golden files.

No macOS host exists here, so ``sandbox-exec`` itself is not run: the profile is
checked by evaluating it with SBPL's own rule (last match wins) against the
spec's path semantics in ``agent_sandbox.spec.paths``.
"""

from __future__ import annotations

import base64
import json
import os
import plistlib
import posixpath

import pytest

from agent_sandbox.inventory import HostFacts, User
from agent_sandbox.render import RenderError, macos, render, seatbelt
from agent_sandbox.spec import paths
from agent_sandbox.spec.models import Spec

from .conftest import GOLDEN, hosts_of
from .sbpl import Profile, Query, Sym, parse

MAC_HOSTS = hosts_of("macos")
CWD = "/Users/erin/src/app"


def _private(p: str) -> str:
    for link in ("/tmp", "/var", "/etc"):
        if p == link or p.startswith(link + "/"):
            return "/private" + p
    return p


def _write_allowed(p: str, allow: list[str], deny: list[str], home: str) -> bool:
    """The spec's write rule, with every deny covering its own name (``x/**`` covers ``x``)."""
    names = [r[:-3] if r.endswith("/**") else r
             for r in [*deny, *seatbelt.protected_rules(home)]]
    return paths.write_allowed(p, allow, names, mandatory=False)


def _profile(spec: Spec, home: str) -> Profile:
    return Profile(seatbelt.seatbelt_profile(spec, home), {"CWD": CWD})


def _expanded(rules: list[str], home: str) -> list[str]:
    return [paths.expand(r, home=home, cwd=CWD) for r in rules]


def _sample_paths(spec: Spec, home: str) -> list[str]:
    """Paths around every rule: the path, a child, a sibling, glob hits and misses."""
    fs = spec.filesystem
    out = {home, f"{home}/notes.txt", "/usr/bin/git", "/etc/passwd", "/tmp/x/y", "/private/var/z",
           "/var/lib/runner/work/job/out.txt", "/srv/src/app/main.py", "/opt/other"}
    rules = [*fs.deny_read, *fs.allow_read, *fs.allow_write, *fs.deny_write,
             *seatbelt.protected_rules(home)]
    for rule in rules:
        exp = paths.expand(rule, home=home, cwd=CWD)
        if exp.startswith("**"):
            tail = exp.replace("**/", "").replace("/**", "").replace("*", "x")
            for base in (f"{home}/src/app", f"{home}/work", "/tmp/w", home):
                out |= {f"{base}/{tail}", f"{base}/{tail}/inner", f"{base}/{tail}.bak",
                        f"{base}/sub/{tail}"}
            continue
        lit = exp.replace("**", "a/b").replace("*", "x").replace("?", "q")
        out |= {lit, f"{lit}/child", f"{lit}/deep/er/file", lit + "-sibling",
                posixpath.dirname(lit) or "/"}
    return sorted(p for p in out if p.startswith("/"))


# ----------------------------------------------------------------- syntax


@pytest.mark.parametrize("host", MAC_HOSTS)
def test_profiles_parse_as_s_expressions(fleet, host):
    facts = fleet.facts(host)
    arts = fleet.render_host(host)
    assert facts.users
    for user in facts.users:
        art = arts[macos.seatbelt_target(facts, user)]
        assert art.kind == "seatbelt"
        forms = parse(art.content.decode())
        assert forms[0] == [Sym("version"), 1]
        assert forms[1] == [Sym("deny"), Sym("default")], "deny by default, first"
        for form in forms:
            assert isinstance(form, list) and form[0] in (Sym("version"), Sym("allow"),
                                                          Sym("deny"))


def test_reader_rejects_broken_profiles():
    from .sbpl import SbplSyntaxError

    for bad in ['(allow file-read* (literal "/a")', '(allow "x" ))', '(deny file-read* #"abc)']:
        with pytest.raises(SbplSyntaxError):
            parse(bad)


# --------------------------------------------------------- rule classes


@pytest.mark.parametrize("host", MAC_HOSTS)
def test_reads_follow_srt_semantics(fleet, host):
    spec, facts = fleet.spec_for(host), fleet.facts(host)
    for user in facts.users:
        prof = _profile(spec, user.home)
        deny = _expanded(spec.filesystem.deny_read, user.home)
        allow = _expanded(spec.filesystem.allow_read, user.home)
        checked = 0
        for p in _sample_paths(spec, user.home):
            want = "allow" if paths.read_allowed(p, deny, allow) else "deny"
            got = prof.decide(Query("file-read-data", path=_private(p)))
            assert got == want, f"read {p}: profile says {got}, spec says {want}"
            checked += 1
        assert checked > 50
        # the carve-out and the deny both really occur
        assert prof.decide(Query("file-read-data", path=f"{user.home}/.ssh/id_ed25519")) == "deny"
        assert prof.decide(Query("file-read-data",
                                 path=f"{user.home}/.ssh/known_hosts")) == "allow"


@pytest.mark.parametrize("host", MAC_HOSTS)
def test_writes_follow_srt_semantics_and_protected_set(fleet, host):
    spec, facts = fleet.spec_for(host), fleet.facts(host)
    for user in facts.users:
        prof = _profile(spec, user.home)
        allow = _expanded(spec.filesystem.allow_write, user.home)
        deny = _expanded(spec.filesystem.deny_write, user.home)
        for p in _sample_paths(spec, user.home):
            want = "allow" if _write_allowed(p, allow, deny, user.home) else "deny"
            got = prof.decide(Query("file-write-data", path=_private(p)))
            assert got == want, f"write {p}: profile says {got}, spec says {want}"
            # create is never allowed where a write is not (it is also denied on
            # protected names' parents, the roots and the home: tested below)
            if want == "deny":
                assert prof.decide(Query("file-write-create", path=_private(p))) == "deny", p
        repo = f"{user.home}/src/app"
        assert prof.decide(Query("file-write-data", path=f"{repo}/main.py")) == "allow"
        for protected in (".git/hooks/pre-commit", ".claude/settings.json", ".sandbox/x",
                          ".mcp.json", ".git/config", ".env"):
            assert prof.decide(Query("file-write-data", path=f"{repo}/{protected}")) == "deny"
        assert prof.decide(Query("file-write-data", path=f"{user.home}/.zshrc")) == "deny"


@pytest.mark.parametrize("host", MAC_HOSTS)
def test_moves_cannot_carry_a_denied_path_away(fleet, host):
    spec, facts = fleet.spec_for(host), fleet.facts(host)
    for user in facts.users:
        prof = _profile(spec, user.home)
        home = user.home
        # the denied path, what is below it, and every directory above it
        for p in (f"{home}/.ssh", f"{home}/.ssh/id_rsa", home, posixpath.dirname(home),
                  f"{home}/.config", f"{home}/src/app/.git", f"{home}/src/app/.git/hooks",
                  f"{home}/src/app/.env", f"{home}/src/app/.claude"):
            assert prof.decide(Query("file-write-unlink", path=_private(p))) == "deny", p
        # ordinary files in a writable root can still be removed and renamed
        for p in (f"{home}/src/app/build.log", f"{home}/work/tmp", "/tmp/scratch"):
            assert prof.decide(Query("file-write-unlink", path=_private(p))) == "allow", p


@pytest.mark.parametrize("host", MAC_HOSTS)
def test_network_only_reaches_the_proxy(fleet, host):
    spec, facts = fleet.spec_for(host), fleet.facts(host)
    port = spec.platforms.macos.proxy_port
    prof = _profile(spec, facts.users[0].home)
    assert prof.decide(Query("network-outbound", remote=f"localhost:{port}")) == "allow"
    for remote in ("localhost:22", "localhost:8080", "*:443", "localhost:" + str(port + 1)):
        assert prof.decide(Query("network-outbound", remote=remote)) == "deny", remote
    assert prof.decide(Query("network-bind", local="localhost:8000")) == "deny"
    assert prof.decide(Query("network-outbound", unix_socket="/var/run/docker.sock")) == "deny"


def test_network_options_open_exactly_what_they_say():
    spec = Spec.model_validate({"network": {"allow_local_binding": True,
                                            "allow_unix_sockets": ["/var/run/app.sock"],
                                            "socks_proxy_port": 1080}})
    prof = _profile(spec, "/Users/x")
    assert prof.decide(Query("network-bind", local="localhost:8000")) == "allow"
    assert prof.decide(Query("network-outbound", remote="localhost:1080")) == "allow"
    assert prof.decide(Query("network-outbound",
                             unix_socket="/private/var/run/app.sock")) == "allow"
    assert prof.decide(Query("network-outbound",
                             unix_socket="/private/var/run/docker.sock")) == "deny"


@pytest.mark.parametrize("host", MAC_HOSTS)
def test_mach_lookup_allowlist(fleet, host):
    spec, facts = fleet.spec_for(host), fleet.facts(host)
    prof = _profile(spec, facts.users[0].home)
    for name in ("com.apple.trustd.agent", "com.apple.system.opendirectoryd.libinfo",
                 "com.apple.system.logger"):
        assert prof.decide(Query("mach-lookup", name=name)) == "allow", name
    for name in ("com.apple.pasteboard.1", "com.apple.windowserver.active",
                 "com.apple.coreservices.appleevents"):
        assert prof.decide(Query("mach-lookup", name=name)) == "deny", name


def test_trustd_can_be_removed_and_names_are_checked():
    spec = Spec.model_validate({"platforms": {"macos": {"allow_mach_lookup": []}}})
    prof = _profile(spec, "/Users/x")
    assert prof.decide(Query("mach-lookup", name="com.apple.trustd.agent")) == "deny"
    with pytest.raises(ValueError, match="mach service name"):
        Spec.model_validate(
            {"platforms": {"macos": {"allow_mach_lookup": ['x") (allow default']}}})
    bad = Spec()
    bad.platforms.macos.allow_mach_lookup = ['x") (allow default']
    with pytest.raises(RenderError, match="mach service name"):
        seatbelt.seatbelt_profile(bad, "/Users/x")


def test_default_deny_and_processes():
    prof = _profile(Spec(), "/Users/x")
    assert prof.decide(Query("process-exec", path="/usr/bin/git")) == "allow"
    assert prof.decide(Query("signal", same_sandbox=True)) == "allow"
    assert prof.decide(Query("signal", same_sandbox=False)) == "deny"
    for op in ("iokit-open", "system-socket", "process-info-pidinfo", "file-write-data"):
        assert prof.decide(Query(op, path="/Users/x/a")) == "deny", op


def test_private_links_relative_rules_and_globs_fail_closed():
    spec = Spec.model_validate({"filesystem": {
        "allow_write": ["/tmp", "build", "gen/*.out"],
        "deny_read": ["secrets/*.key", "/etc/ssl/private"],
    }})
    prof = _profile(spec, "/Users/x")
    # /tmp is /private/tmp to Seatbelt
    assert prof.decide(Query("file-write-data", path="/private/tmp/a")) == "allow"
    assert prof.decide(Query("file-read-data", path="/private/etc/ssl/private/k")) == "deny"
    # a relative literal is anchored at -D CWD=...
    assert prof.decide(Query("file-write-data", path=f"{CWD}/build/o.o")) == "allow"
    assert prof.decide(Query("file-write-data", path="/Users/x/other/build/o.o")) == "deny"
    # a relative allow glob is dropped (allows less) ...
    assert prof.decide(Query("file-write-data", path=f"{CWD}/gen/a.out")) == "deny"
    # ... a relative deny glob matches at any depth (denies more)
    assert prof.decide(Query("file-read-data", path=f"{CWD}/secrets/a.key")) == "deny"
    assert prof.decide(Query("file-read-data", path="/opt/x/secrets/a.key")) == "deny"
    with pytest.raises(KeyError):
        Profile(seatbelt.seatbelt_profile(spec, "/Users/x")).decide(
            Query("file-write-data", path="/a"))


def test_unquotable_paths_are_refused():
    # the spec refuses such paths too; the renderer does not rely on it
    spec = Spec()
    spec.filesystem.deny_read = ['/Users/x/a") (allow default']
    with pytest.raises(RenderError, match="double quote"):
        seatbelt.seatbelt_profile(spec, "/Users/x")


# ------------------------------------------------------------- golden files


def _golden(name: str, data: bytes) -> None:
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN") == "1" or not path.exists():
        if os.environ.get("CI") and not path.exists():
            pytest.fail(f"golden file {path} is missing")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    assert data == path.read_bytes(), f"{name} differs from its golden file " \
                                      "(UPDATE_GOLDEN=1 to accept a deliberate change)"


def test_golden_files():
    from agent_sandbox.render import cluster
    from agent_sandbox.spec.loader import load_layer, load_stack

    spec = load_stack([load_layer(str(GOLDEN / "spec.yml"))])
    facts = HostFacts("golden-mac", "macos", (User("erin", "/Users/erin"),),
                      python="/opt/agent-sandbox/venv/bin/python3")
    _golden("erin.sb", seatbelt.seatbelt_profile(spec, "/Users/erin").encode())
    _golden("com.agent-sandbox.proxy.plist", macos.launch_daemon(spec, facts))
    for art in cluster.render(spec, facts):
        _golden("cluster/" + art.target.rsplit("/cluster/", 1)[1], art.content)


# ------------------------------------------------------- plist and mobileconfig


@pytest.mark.parametrize("host", MAC_HOSTS)
def test_launch_daemon_plist(fleet, host):
    spec, facts = fleet.spec_for(host), fleet.facts(host)
    doc = plistlib.loads(fleet.render_host(host)[macos.LAUNCHD_PLIST].content)
    assert doc["Label"] == "com.agent-sandbox.proxy"
    argv = doc["ProgramArguments"]
    assert argv[0] == facts.python and os.path.isabs(argv[0])
    assert argv[1:4] == ["-I", "-m", "agent_sandbox.runtime.proxy"]
    assert argv[argv.index("--http") + 1] == f"127.0.0.1:{spec.platforms.macos.proxy_port}"
    assert argv[argv.index("--settings") + 1] in fleet.render_host(host)
    assert doc["RunAtLoad"] is True and doc["KeepAlive"] is True
    assert doc["UserName"] != "root"


@pytest.mark.parametrize("host", MAC_HOSTS)
def test_mobileconfig_carries_the_managed_settings(fleet, host):
    facts = fleet.facts(host)
    arts = fleet.render_host(host)
    doc = plistlib.loads(arts[macos.mobileconfig_target(facts)].content)
    assert doc["PayloadType"] == "Configuration"
    assert doc["PayloadScope"] == "System"
    payloads = {p["PayloadType"]: p for p in doc["PayloadContent"]}
    assert set(payloads) == {"com.anthropic.claudecode", "com.openai.codex"}
    uuids = [doc["PayloadUUID"]] + [p["PayloadUUID"] for p in doc["PayloadContent"]]
    assert len(set(uuids)) == len(uuids)
    # Claude Code: the same settings as the file-based managed-settings.json
    claude = dict(payloads["com.anthropic.claudecode"])
    for key in [k for k in claude if k.startswith("Payload")]:
        del claude[key]
    file_settings = json.loads(
        arts["/Library/Application Support/ClaudeCode/managed-settings.json"].content)
    assert claude == file_settings
    assert claude["allowManagedHooksOnly"] is True
    # Codex: requirements.toml, base64, the same bytes as the file-based one
    req = base64.b64decode(payloads["com.openai.codex"]["requirements_toml_base64"])
    assert req == arts["/etc/codex/requirements.toml"].content


def test_mobileconfig_is_stable_and_follows_the_spec():
    facts = HostFacts("m1", "macos", (User("a", "/Users/a"),))
    spec = Spec.model_validate({"agents": {"claude": {}, "codex": {}}})
    assert macos.mobileconfig(spec, facts) == macos.mobileconfig(spec, facts)
    other = HostFacts("m2", "macos", (User("a", "/Users/a"),))
    assert plistlib.loads(macos.mobileconfig(spec, facts))["PayloadUUID"] != \
        plistlib.loads(macos.mobileconfig(spec, other))["PayloadUUID"]
    only_claude = Spec.model_validate({"agents": {"claude": {}}})
    doc = plistlib.loads(macos.mobileconfig(only_claude, facts))
    assert [p["PayloadType"] for p in doc["PayloadContent"]] == ["com.anthropic.claudecode"]
    no_mdm = Spec.model_validate({"platforms": {"macos": {"mdm_profile": False}}})
    assert macos.mobileconfig_target(facts) not in render(no_mdm, facts)


def test_only_macos_hosts_get_macos_artifacts(fleet):
    for host in fleet.inventory:
        kinds = {a.kind for a in fleet.render_host(host).values()}
        is_mac = fleet.facts(host).os == "macos"
        assert ({"seatbelt", "launchd", "mobileconfig"} <= kinds) == is_mac, host
        assert not is_mac or "seatbelt" in kinds


def test_strings_in_profile_are_escaped():
    text = seatbelt.seatbelt_profile(Spec.model_validate(
        {"filesystem": {"deny_read": ["/Users/x/back\\slash"]}}), "/Users/x")
    parse(text)
    prof = Profile(text, {"CWD": CWD})
    assert prof.decide(Query("file-read-data", path="/Users/x/back\\slash/k")) == "deny"
    assert prof.decide(Query("file-read-data", path="/Users/x/backslash/k")) == "allow"
    assert prof.decide(Query("file-read-data", path="/Users/x/back/slash/k")) == "allow"


def test_launch_daemon_command_runs_the_real_proxy(fleet, tmp_path):
    """The LaunchDaemon's command line, run here (interpreter, files and port swapped
    for local ones): the proxy starts, refuses a denied domain and lets nothing else
    than loopback clients in."""
    import socket
    import subprocess
    import sys

    facts = fleet.facts("dev-mac-01")
    arts = fleet.render_host("dev-mac-01")
    argv = plistlib.loads(arts[macos.LAUNCHD_PLIST].content)["ProgramArguments"]
    settings = tmp_path / "proxy-settings.json"
    settings.write_bytes(arts[macos.proxy_settings_target(facts)].content)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [sys.executable, *argv[1:]]
    argv[argv.index("--settings") + 1] = str(settings)
    argv[argv.index("--http") + 1] = f"127.0.0.1:{port}"
    argv[argv.index("--audit-dir") + 1] = str(tmp_path / "audit")
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
            c.sendall(b"CONNECT metadata.google.internal:443 HTTP/1.1\r\n"
                      b"Host: metadata.google.internal:443\r\n\r\n")
            reply = c.recv(4096).decode(errors="replace")
        assert reply.startswith("HTTP/1.1 403"), reply
    finally:
        proc.terminate()
        # on SIGTERM the service waits for its audit writer, then signs a checkpoint
        # and syncs the log: seconds on a disk other runs keep busy (launchd, like
        # systemd, gives a stopping daemon far longer)
        proc.wait(60)


def test_golden_spec_semantics():
    """Reads and writes of the golden spec (relative rules, /etc, two carve-outs)."""
    from agent_sandbox.spec.loader import load_layer, load_stack

    spec = load_stack([load_layer(str(GOLDEN / "spec.yml"))])
    home = "/Users/erin"
    prof = _profile(spec, home)
    rd = _expanded(spec.filesystem.deny_read, home)
    ra = _expanded(spec.filesystem.allow_read, home)
    wa = _expanded(spec.filesystem.allow_write, home)
    wd = _expanded(spec.filesystem.deny_write, home)
    for p in _sample_paths(spec, home):
        if paths.is_glob(p) or not p.startswith("/"):
            continue
        if any(paths.covers(r, p) for r in rd if "secrets/*.key" in r):
            continue  # relative deny glob: matched at any depth on purpose (tested above)
        want_r = "allow" if paths.read_allowed(p, rd, ra) else "deny"
        assert prof.decide(Query("file-read-data", path=_private(p))) == want_r, p
        want_w = "allow" if _write_allowed(p, wa, wd, home) else "deny"
        assert prof.decide(Query("file-write-data", path=_private(p))) == want_w, p


# ------------------------------------------------ the classes srt held us to

REPO_DIR = CWD


@pytest.mark.parametrize("base", [REPO_DIR, f"{REPO_DIR}/sub/pkg", "/tmp/w"])
def test_protected_names_cannot_be_planted(base):
    """A protected name that does not exist yet cannot be created (file, folder,
    symlink, git file), in any case spelling, nor can any folder on its way."""
    spec = Spec.model_validate({"filesystem": {"allow_write": [REPO_DIR, "/tmp"]}})
    prof = _profile(spec, "/Users/erin")
    names = [".claude", ".codex", ".cursor", ".gemini", ".vscode", ".idea", ".sandbox",
             ".git", ".git/hooks", ".git/config", ".config", ".config/git", ".mcp.json",
             ".zshrc", ".CLAUDE", ".Git/Hooks", ".VSCode", ".windsurf", ".envrc", ".husky",
             ".git/worktrees/w/commondir", ".agents",
             # spellings case-insensitive APFS folds to a protected name (Unicode folding)
             ".\u017fandbox", ".con\ufb01g/git", ".git/hoo\u212as", ".git/con\ufb01g",
             ".gitcon\ufb01g"]
    for name in names:
        p = _private(f"{base}/{name}")
        for vnode in ("REGULAR-FILE", "DIRECTORY", "SYMLINK"):
            got = prof.decide(Query("file-write-create", path=p, vnode=vnode))
            assert got == "deny", (name, vnode)
        assert prof.decide(Query("file-write-data", path=p)) == "deny" or name in (
            ".git", ".config"), name
        assert prof.decide(Query("file-write-unlink", path=p)) == "deny", name
    # home-only names (agent_sandbox.protected.HOME_ONLY), with the home writable
    home_w = _profile(Spec.model_validate({"filesystem": {"allow_write": ["~"]}}), "/Users/erin")
    for name in (".claude.json", ".ssh", ".local/bin", ".config/agent-sandbox", ".ssh/rc"):
        got = home_w.decide(Query("file-write-create", path=f"/Users/erin/{name}",
                                  vnode="SYMLINK"))
        assert got == "deny", name
    assert home_w.decide(Query("file-write-create", path="/Users/erin/notes.txt")) == "allow"
    # control: ordinary names are created, written and removed
    for name in ("src", "main.py", ".github", ".gitignore", "config", ".env.example"):
        p = _private(f"{base}/{name}")
        for op in ("file-write-create", "file-write-data", "file-write-unlink"):
            assert prof.decide(Query(op, path=p)) == "allow", (name, op)


def test_absent_parents_of_a_denied_path_cannot_be_planted():
    spec = Spec.model_validate({"filesystem": {
        "allow_write": [REPO_DIR], "deny_write": [f"{REPO_DIR}/config/prod/secrets.yml"]}})
    prof = _profile(spec, "/Users/erin")
    for p in ("config", "config/prod", "config/prod/secrets.yml", "Config", "CONFIG/Prod"):
        assert prof.decide(Query("file-write-create", path=f"{REPO_DIR}/{p}",
                                 vnode="SYMLINK")) == "deny", p
    assert prof.decide(Query("file-write-create", path=f"{REPO_DIR}/config/dev.yml")) == "allow"
    # the roots, the working directory and the home cannot be renamed away
    for p in (REPO_DIR, "/Users/erin", "/Users/erin/src"):
        assert prof.decide(Query("file-write-unlink", path=p)) == "deny", p


def test_a_glob_read_deny_beats_a_longer_allow_read():
    spec = Spec.model_validate({"filesystem": {
        "deny_read": ["**/.env", "~/.aws", "/Users/erin/**/*.pem"],
        "allow_read": [REPO_DIR, "~/.aws/config", "/Users/erin/certs/ca.pem"],
        "allow_write": [REPO_DIR]}})
    prof = _profile(spec, "/Users/erin")
    for p in (f"{REPO_DIR}/.env", f"{REPO_DIR}/sub/.env", f"{REPO_DIR}/.ENV",
              f"{REPO_DIR}/key.pem", "/Users/erin/.aws/credentials"):
        assert prof.decide(Query("file-read-data", path=p)) == "deny", p
    for p in (f"{REPO_DIR}/main.py", "/Users/erin/.aws/config", "/Users/erin/certs/ca.pem"):
        assert prof.decide(Query("file-read-data", path=p)) == "allow", p


def test_rm_and_mv_work_in_a_reallowed_repository_under_a_home_wide_deny():
    spec = Spec.model_validate({"filesystem": {
        "deny_read": ["~", "**/.env"], "allow_read": [REPO_DIR],
        "allow_write": [REPO_DIR, "/tmp"]}})
    prof = _profile(spec, "/Users/erin")
    for p in (f"{REPO_DIR}/build.log", f"{REPO_DIR}/sub/old.py", "/private/tmp/scratch"):
        assert prof.decide(Query("file-write-unlink", path=p)) == "allow", p
        assert prof.decide(Query("file-write-create", path=p)) == "allow", p
    # what stays denied: read-denied files inside it, and the home outside it
    for p in (f"{REPO_DIR}/.env", "/Users/erin/notes.txt", "/Users/erin", REPO_DIR):
        assert prof.decide(Query("file-write-unlink", path=p)) == "deny", p
    assert prof.decide(Query("file-read-metadata", path="/Users/erin", vnode="DIRECTORY")) \
        == "allow", "realpath must be able to walk through the denied home"
    assert prof.decide(Query("file-read-data", path="/Users/erin", vnode="DIRECTORY")) == "deny"


def test_sysctl_pty_mach_ipc_and_unix_sockets():
    base = _profile(Spec(), "/Users/x")
    for name in ("kern.procargs2", "kern.procargs", "kern.proc.all", "kern.boottime"):
        assert base.decide(Query("sysctl-read", name=name)) == "deny", name
    for name in ("hw.ncpu", "hw.memsize", "kern.osversion", "hw.optional.arm.FEAT_AES",
                 "kern.proc.pid.123"):
        assert base.decide(Query("sysctl-read", name=name)) == "allow", name
    assert base.decide(Query("pseudo-tty")) == "deny"
    assert base.decide(Query("file-ioctl", path="/dev/ttys003")) == "deny"
    pty = _profile(Spec.model_validate({"platforms": {"macos": {"allow_pty": True}}}), "/Users/x")
    assert pty.decide(Query("pseudo-tty")) == "allow"
    assert pty.decide(Query("file-ioctl", path="/dev/ptmx")) == "allow"
    for name in ("com.apple.cfprefsd.daemon", "com.apple.cfprefsd.agent",
                 "com.apple.diagnosticd", "com.apple.analyticsd"):
        assert base.decide(Query("mach-lookup", name=name)) == "deny", name
    assert base.decide(Query("user-preference-read")) == "allow"
    # multiprocessing's semaphores and shared memory; nobody else's
    for op in ("ipc-posix-sem-create", "ipc-posix-sem-open", "ipc-posix-shm-write-create"):
        assert base.decide(Query(op, name="/mp-x1y2")) == "allow", op
        assert base.decide(Query(op, name="/psm_ab12")) == "allow", op
        assert base.decide(Query(op, name="/com.other.app.shm")) == "deny", op
    # AF_UNIX only when a unix socket is allowed, and then only that path
    assert base.decide(Query("system-socket", domain="AF_UNIX")) == "deny"
    socks = _profile(Spec.model_validate({"network": {
        "allow_unix_sockets": ["/var/run/app.sock"]}}), "/Users/x")
    assert socks.decide(Query("system-socket", domain="AF_UNIX")) == "allow"
    assert socks.decide(Query("system-socket", domain="AF_INET")) == "deny"
    assert socks.decide(Query("network-outbound",
                              unix_socket="/private/var/run/app.sock")) == "allow"
    assert socks.decide(Query("network-outbound",
                              unix_socket="/private/var/run/docker.sock")) == "deny"


def test_resolved_forms_of_linked_denied_paths_are_denied():
    spec = Spec.model_validate({"filesystem": {"deny_read": ["~/.ssh"],
                                               "deny_write": ["~/deploy/keys"],
                                               "allow_write": ["~"]}})
    home = "/Users/x"
    denied = seatbelt.denied_paths(spec, home)
    assert denied == {"read": ["/Users/x/.ssh"], "write": ["/Users/x/deploy/keys"]}
    resolved = {"/Users/x/.ssh": "/Volumes/Keys/ssh", "/Users/x/deploy/keys": "/opt/keys"}
    text = seatbelt.seatbelt_profile(spec, home)
    plain = Profile(text, {"CWD": CWD})
    linked = Profile(text + seatbelt.resolved_denies(denied, resolved), {"CWD": CWD})
    # control: without the resolved forms, the link's target is open
    assert plain.decide(Query("file-read-data", path="/Volumes/Keys/ssh/id_rsa")) == "allow"
    assert linked.decide(Query("file-read-data", path="/Volumes/Keys/ssh/id_rsa")) == "deny"
    assert linked.decide(Query("file-write-unlink", path="/Volumes/Keys")) == "deny"
    assert plain.decide(Query("file-write-data", path="/Users/x/notes")) == "allow"
    assert linked.decide(Query("file-write-data", path="/Users/x/notes")) == "allow"
    with pytest.raises(RenderError):
        seatbelt.resolved_denies(denied, {"/Users/x/.ssh": "relative/path"})


def test_resolver_script_resolves_real_links(tmp_path):
    """The role's resolver (files/resolve_links.py), run here on real links."""
    import json
    import subprocess
    import sys

    from .conftest import REPO

    (tmp_path / "Volumes" / "k").mkdir(parents=True)
    (tmp_path / "Users" / "x").mkdir(parents=True)
    (tmp_path / "Users" / "x" / ".ssh").symlink_to(tmp_path / "Volumes" / "k")
    (tmp_path / "Users" / "x" / "cfg").symlink_to("../../Volumes")
    denied = {"read": ["/Users/x/.ssh", "/Users/x/cfg/k/deep", "/Users/x/plain"], "write": []}
    script = (REPO / "roles" / "sandbox_macos" / "files" / "resolve_links.py").read_text()
    out = subprocess.run([sys.executable, "-I", "-c", script, str(tmp_path)],
                         input=json.dumps(denied), capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == {"/Users/x/.ssh": "/Volumes/k",
                                      "/Users/x/cfg/k/deep": "/Volumes/k/deep"}
