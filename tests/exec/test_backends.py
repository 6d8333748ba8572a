"""The srt and gVisor backends behind the same settings."""

from __future__ import annotations

import secrets
import shlex
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest
from conftest import SRT, HostListeners, Net, audit_records, write_settings

from agent_sandbox.runtime.backends.gvisor import gvisor_container_options
from agent_sandbox.runtime.containers.podman import gvisor_containers_conf
from agent_sandbox.runtime.failures import TIMED_OUT, SandboxStartError
from agent_sandbox.runtime.run import run_sandboxed
from agent_sandbox.runtime.settings import parse

REPO = Path(__file__).resolve().parents[2]


def test_gvisor_mounts_follow_the_bwrap_plan(tmp_path: Path) -> None:
    from agent_sandbox.runtime.bwrap import fsview
    from agent_sandbox.runtime.bwrap import plan as bw

    w = tmp_path / "w"
    (w / "locked").mkdir(parents=True)
    (w / ".env").write_text("x")
    s = parse({"filesystem": {"allowWrite": [str(w)], "denyWrite": [str(w / "locked")],
                              "denyRead": ["**/.env"]}})
    plan = bw.plan(s, home="/home/u", cwd=str(tmp_path), fs=fsview.RealFs())
    opts = gvisor_container_options(["true"], plan, str(tmp_path))
    m = {x["Target"]: x for x in opts["mounts"]}
    assert m[str(w)]["ReadOnly"] is False
    assert m[str(w / "locked")]["ReadOnly"] is True
    assert m[str(w / ".vscode")]["ReadOnly"] is True  # protected placeholder
    assert str(w / ".git") not in m  # git init works inside; the sweep judges it
    assert m[str(w / ".env")]["Source"] == "/dev/null"
    assert m[str(tmp_path)]["ReadOnly"] is True  # the working directory, read-only
    targets = [x["Target"] for x in opts["mounts"]]
    assert len(targets) == len(set(targets))
    assert opts["network_mode"] == "none" and opts["read_only"] is True
    assert opts["cap_drop"] == ["ALL"] and opts["runtime"] == "runsc"


def test_gvisor_containers_conf_is_ours_alone(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The service's containers.conf names runsc (network fixed) as the only runtime
    and reads nothing from the environment: a file a sandbox planted and named in
    CONTAINERS_CONF (conmon_path, hooks) or CONTAINERS_CONF_OVERRIDE is never used."""
    from agent_sandbox.runtime.containers.service import _conf_text, expected, service_env

    conf = gvisor_containers_conf("/x/runsc-nonet", "runsc-nonet")
    assert conf.count("[engine]") == 1 and "runc" not in conf.replace("runsc", "")
    assert 'runtime = "runsc-nonet"' in conf and 'runsc-nonet = ["/x/runsc-nonet"]' in conf
    assert "default_ulimits = []" in conf
    assert 'runtime = "runsc"' in gvisor_containers_conf("/w")  # what inspect reports
    planted = tmp_path / "containers.conf"
    planted.write_text('[engine]\nconmon_path = ["/tmp/evil"]\nhooks_dir = ["/tmp/h"]\n')
    monkeypatch.setenv("CONTAINERS_CONF", str(planted))
    monkeypatch.setenv("CONTAINERS_CONF_OVERRIDE", str(planted))
    monkeypatch.setenv("CONTAINERS_STORAGE_CONF", str(planted))
    if shutil.which("runsc") and shutil.which("podman"):
        exp, _ = expected("none")
        text = _conf_text(exp, "/private")
        assert "evil" not in text and "hooks_dir" not in text
    env = service_env("/private/containers.conf")
    assert env["CONTAINERS_CONF"] == "/private/containers.conf"
    assert not {k for k in env if k.startswith("CONTAINERS_") and k != "CONTAINERS_CONF"}


def test_missing_srt_is_a_start_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_SANDBOX_SRT", str(tmp_path / "nope"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SandboxStartError, match="srt is not installed"):
        run_sandboxed(["true"], {"filesystem": {}}, tmp_path, backend="srt")


@pytest.mark.slow
@pytest.mark.skipif(not SRT.exists(), reason="srt is not installed (make setup)")
def test_srt_backend_gets_the_same_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                            ) -> None:
    monkeypatch.setenv("AGENT_SANDBOX_SRT", str(SRT))
    work, secret = tmp_path / "w", tmp_path / "s"
    work.mkdir()
    secret.mkdir()
    (secret / "k").write_text("TOPSECRET")
    s = write_settings(tmp_path / "s.json", {
        "network": {"allowedDomains": ["example.com"], "deniedDomains": []},
        "filesystem": {"denyRead": [str(secret)], "allowWrite": [str(work)], "denyWrite": []}})
    locks = work / "locks"  # the lock and plan folder, inside the writable root here
    monkeypatch.setenv("AGENT_SANDBOX_LOCK_DIR", str(locks))
    (locks / "plans").mkdir(parents=True)
    r = run_sandboxed(["sh", "-c", f"cat {secret}/k; echo hi > {work}/f; "
                       f"echo no > {tmp_path}/g; echo evil > {locks}/plans/x; exit 5"], s, work,
                      backend="srt")
    assert r.backend == "srt" and r.returncode == 5
    assert b"TOPSECRET" not in r.stdout
    assert (work / "f").exists() and not (tmp_path / "g").exists()
    assert not (locks / "plans" / "x").exists()  # no plan planted for the native launcher


@pytest.mark.slow
def test_gvisor_backend_isolates_and_passes_status(tmp_path: Path, gvisor_env: None,
                                                   host_listeners: HostListeners) -> None:
    work = tmp_path / "w"
    work.mkdir()
    outside = tmp_path / "outside.txt"
    token = secrets.token_hex(8)
    outside.write_text(token)
    before = host_listeners.tcp_host.hits if host_listeners.tcp_host else 0
    host = host_listeners.tcp_host.address[0] if host_listeners.tcp_host else "127.0.0.1"
    port = host_listeners.tcp_host.port if host_listeners.tcp_host else 9
    s = write_settings(tmp_path / "s.json", {"filesystem": {"allowWrite": [str(work)]}})
    script = (f"dmesg | head -1; cat {outside} 2>&1; echo hi > {work}/f; "
              f"echo no > /etc/x 2>&1; mkdir -p {work}/.git/hooks 2>&1; "
              f"echo evil > {work}/.mcp.json 2>&1; "
              f"timeout 3 bash -c 'echo x > /dev/tcp/{host}/{port}' 2>&1; exit 6")
    r = run_sandboxed(["sh", "-c", script], s, work, backend="gvisor", timeout=120)
    assert r.backend == "gvisor" and r.returncode == 6, r.stderr
    assert b"gVisor" in r.stdout
    assert token.encode() not in r.stdout
    assert (work / "f").read_text() == "hi\n"
    # placeholders gone, nothing protected created (an empty .git/hooks is no repository)
    assert sorted(p.name for p in work.iterdir()) in (["f"], [".git", "f"])
    assert not (work / ".mcp.json").exists() and not any((work / ".git").rglob("*/*"))
    assert (host_listeners.tcp_host.hits if host_listeners.tcp_host else 0) == before


@pytest.mark.slow
def test_gvisor_backend_reaches_allowed_domains_through_the_proxy(
        tmp_path: Path, gvisor_env: None, proxy_env: Net, audit_dir: Path) -> None:
    """The gVisor container gets the same network policy as bwrap: only the proxy,
    on its own loopback (judged from the host: what the upstream saw, the audit)."""
    work = tmp_path / "w"
    work.mkdir()
    m = secrets.token_hex(6)
    s = write_settings(tmp_path / "s.json", {
        "network": {"allowedDomains": ["up.example.com"], "deniedDomains": ["bad.example.com"]},
        "filesystem": {"allowWrite": [str(work)]}})
    client = textwrap.dedent(f"""
        import socket, urllib.error, urllib.request
        print(urllib.request.urlopen("http://up.example.com:8080/g{m}", timeout=10).read())
        try:
            urllib.request.urlopen("http://bad.example.com:8080/b{m}", timeout=10)
        except urllib.error.HTTPError as e:
            print("denied", e.code, e.headers["X-Proxy-Error"])
        for ip in ("{proxy_env.up_ip}", "{proxy_env.host_ip}", "1.1.1.1"):
            try:
                socket.create_connection((ip, 8080), 3).sendall(b"GET /r{m} HTTP/1.0\\r\\n\\r\\n")
                print("raw reached", ip)
            except OSError as e:
                print("raw refused", ip, e.errno)
    """)
    r = run_sandboxed(["sh", "-c", f"python3 -c {shlex.quote(client)} && "
                       f"curl -s -m 10 -x socks5h://127.0.0.1:1080 http://up.example.com:8080/k{m}"],
                      s, work, backend="gvisor", timeout=120)
    out = r.stdout.decode()
    assert r.returncode == 0, (out, r.stderr)
    assert f"upstream-ok /g{m}" in out and proxy_env.saw(f"/g{m}")
    assert f"upstream-ok /k{m}" in out and proxy_env.saw(f"/k{m}")  # SOCKS5 too
    assert "denied 403 blocked-by-denylist" in out and not proxy_env.saw(f"b{m}")
    assert "raw reached" not in out and not proxy_env.saw(f"r{m}")
    recs = [x for x in audit_records(audit_dir) if x.get("event") == "proxy.decision"]
    assert {(x["protocol"], x["host"], x["allowed"]) for x in recs} == {
        ("http", "up.example.com", True), ("socks5", "up.example.com", True),
        ("http", "bad.example.com", False)}
    assert all(x["session"].startswith("gvisor-") for x in recs)


@pytest.mark.slow
def test_gvisor_backend_timeout(tmp_path: Path, gvisor_env: None) -> None:
    s = write_settings(tmp_path / "s.json", {"filesystem": {}})
    r = run_sandboxed(["sleep", "60"], s, tmp_path, backend="gvisor", timeout=3)
    assert r.timed_out and r.returncode == TIMED_OUT


@pytest.mark.slow
def test_a_killed_gvisor_run_is_ended_and_swept_by_the_next_start(tmp_path: Path,
                                                                    gvisor_env: None) -> None:
    """The container outlives a killed caller (it runs under the podman service).
    Prepared: a gVisor run whose command writes protected names after a pause; its
    caller is killed first. Fired: the next start, another run elsewhere. Judged on
    the host: that start ended the container and did the owed sweep, so no protected
    name the command wrote is left armed, then or later."""
    import signal
    import sys
    import time

    work, other = tmp_path / "w", tmp_path / "o"
    work.mkdir()
    other.mkdir()
    s = write_settings(tmp_path / "s.json", {"filesystem": {"allowWrite": [str(work)]}})
    so = write_settings(tmp_path / "so.json", {"filesystem": {"allowWrite": [str(other)]}})
    script = ("echo x > started; sleep 3; mkdir -p sub; echo 'echo planted' > sub/.envrc; "
              "sleep 2; echo 'echo planted' > sub/.bashrc")
    caller = subprocess.Popen([sys.executable, "-m", "agent_sandbox", "exec", "--backend",
                               "gvisor", "--settings", str(s), "--", "sh", "-c", script],
                              cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(600):
        if (work / "started").exists():
            break
        time.sleep(0.05)
    assert (work / "started").exists()
    caller.send_signal(signal.SIGKILL)
    caller.wait(30)
    time.sleep(3.5)  # the command has written .envrc by now
    assert run_sandboxed(["true"], so, other).returncode == 0  # the next start
    time.sleep(2.5)  # and would have written .bashrc, had its container lived on
    armed = [p.name for p in (work / "sub").glob("*")] if (work / "sub").exists() else []
    assert ".envrc" not in armed and ".bashrc" not in armed, armed


@pytest.mark.slow
def test_gvisor_backend_keeps_the_tools_on_path_read_only(tmp_path: Path, gvisor_env: None,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """A folder of the caller's PATH inside a writable root is the runtime's protected
    set in gVisor as in bwrap. Prepared: a gVisor run plants ``git`` there and appends
    to a tool. Fired: the user's next ``git`` on the host. Judged on the host."""
    work = tmp_path / "w"
    tools = work / "tools"
    tools.mkdir(parents=True)
    (tools / "mytool").write_text("#!/bin/sh\necho real\n")
    (tools / "mytool").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}:/usr/bin:/bin")
    s = write_settings(tmp_path / "s.json", {"filesystem": {"allowWrite": [str(work)]}})
    script = ("printf '#!/bin/sh\\necho planted\\n' > tools/git; chmod +x tools/git; "
              "echo 'echo hijacked' >> tools/mytool; true")
    run_sandboxed(["sh", "-c", script], s, work, backend="gvisor", timeout=120)
    assert not (tools / "git").exists()
    assert (tools / "mytool").read_text() == "#!/bin/sh\necho real\n"


@pytest.mark.slow
def test_gvisor_backend_hides_denied_reads_below_a_read_only_working_folder(
        tmp_path: Path, gvisor_env: None) -> None:
    """The working folder outside every writable root comes in read-only, with what the
    plan hides below it hidden too. Judged on the host: a copy into the writable root
    holds the readable file (the control) and never the denied one."""
    cwd, work = tmp_path / "c", tmp_path / "w"
    cwd.mkdir()
    work.mkdir()
    token = secrets.token_hex(8)
    (cwd / "secret.txt").write_text(token)
    (cwd / "keys").mkdir()
    (cwd / "keys" / "id").write_text(token)
    (cwd / "ok.txt").write_text("fine")
    s = write_settings(tmp_path / "s.json", {"filesystem": {
        "allowWrite": [str(work)], "denyRead": [str(cwd / "secret.txt"), str(cwd / "keys")]}})
    script = (f"cat secret.txt keys/id > {work}/copy 2>/dev/null; cat ok.txt > {work}/ok; "
              "true")
    run_sandboxed(["sh", "-c", script], s, cwd, backend="gvisor", timeout=120)
    assert (work / "ok").read_text() == "fine"
    assert token not in ((work / "copy").read_text() if (work / "copy").exists() else "")


@pytest.mark.slow
@pytest.mark.skipif(not SRT.exists(), reason="srt is not installed (make setup)")
def test_srt_backend_timeout_takes_the_sandbox_down(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    monkeypatch.setenv("AGENT_SANDBOX_SRT", str(SRT))
    m = secrets.randbelow(9000) + 1000
    work = tmp_path / "w"
    work.mkdir()
    s = write_settings(tmp_path / "s.json", {
        "network": {"allowedDomains": [], "deniedDomains": []},
        "filesystem": {"denyRead": [], "allowWrite": [str(work)], "denyWrite": []}})
    r = run_sandboxed(["sh", "-c", f"sleep 8{m} & sleep 9{m}"], s, work, backend="srt",
                      timeout=3)
    assert r.timed_out and r.returncode == TIMED_OUT
    time.sleep(0.5)
    alive = [d for d in Path("/proc").iterdir() if d.name.isdigit()
             and f"{m}".encode() in _cmdline(d)]
    assert alive == []


def _cmdline(d: Path) -> bytes:
    try:
        return (d / "cmdline").read_bytes()
    except OSError:
        return b""


@pytest.mark.slow
@pytest.mark.skipif(not SRT.exists(), reason="srt is not installed (make setup)")
def test_rendered_settings_are_accepted_by_srt_and_by_us(tmp_path: Path) -> None:
    """The document the renderer writes is a valid srt config, and ours reads it too."""
    import json

    from agent_sandbox.render.srt import srt_settings
    from agent_sandbox.runtime.settings import load
    from agent_sandbox.spec.models import Spec

    spec = Spec.model_validate({
        "version": 1,
        "filesystem": {"deny_read": ["~/.ssh", "**/.env"], "allow_read": ["~/.ssh/known_hosts"],
                       "allow_write": [str(tmp_path)], "deny_write": ["**/secrets/**"]},
        "network": {"allowed_domains": ["github.com", "*.github.com"],
                    "denied_domains": ["gist.github.com"]},
    })
    f = tmp_path / "rendered.json"
    f.write_text(json.dumps(srt_settings(spec, str(tmp_path))))
    r = subprocess.run([str(SRT), "-s", str(f), "-c", "true"], cwd=tmp_path,
                       capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr.decode()[-500:]
    ours = load(str(f))
    assert ours.network.denied_domains == ("gist.github.com",)
    assert run_sandboxed(["true"], ours, tmp_path).returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(not SRT.exists(), reason="srt is not installed (make setup)")
def test_srt_backend_disarms_a_new_repository(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """srt lets a command create .git/hooks where no repository existed; the srt
    backend quarantines it afterwards (the escape suite shows srt alone does not)."""
    monkeypatch.setenv("AGENT_SANDBOX_SRT", str(SRT))
    work = tmp_path / "w"
    work.mkdir()
    s = write_settings(tmp_path / "s.json", {
        "network": {"allowedDomains": [], "deniedDomains": []},
        "filesystem": {"denyRead": [], "allowWrite": [str(work)], "denyWrite": []}})
    r = run_sandboxed(["sh", "-c", "git init -q . && echo evil > .git/hooks/pre-commit"], s,
                      work, backend="srt")
    assert not (work / ".git").exists()
    assert any(p.name.startswith(".git.sandbox-quarantine") for p in work.iterdir())
    assert b"protected path" in r.stderr
