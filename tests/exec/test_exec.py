"""``sandbox exec`` end to end with real bubblewrap, real sockets, real processes."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import (
    PY,
    REPO,
    Net,
    audit_records,
    kill_marked,
    marked,
    needs_bwrap,
    running,
    wait_for_file,
    wait_gone,
    write_settings,
)

from agent_sandbox.runtime.failures import SANDBOX_FAILED, TIMED_OUT, SandboxStartError
from agent_sandbox.runtime.host import diagnose_userns
from agent_sandbox.runtime.run import run_sandboxed

pytestmark = needs_bwrap
SANDBOX = [PY, "-m", "agent_sandbox"]



@pytest.fixture
def settings(tmp_path: Path, work: Path) -> Path:
    return write_settings(tmp_path / "s.json", {
        "network": {"allowedDomains": ["up.example.com"], "deniedDomains": ["bad.example.com"]},
        "filesystem": {"denyRead": [str(tmp_path / "secret")], "allowWrite": [str(work)]},
    })


def cli(settings: Path, *cmd: str, cwd: Path, **kw: object) -> subprocess.CompletedProcess:
    return subprocess.run([*SANDBOX, "exec", "--settings", str(settings), "--", *cmd],
                          cwd=cwd, capture_output=True, timeout=60, **kw)  # type: ignore[call-overload]


def test_exit_status_and_streams_pass_through(settings: Path, work: Path) -> None:
    r = cli(settings, "sh", "-c", "read x; echo out:$x; echo err >&2; exit 7", cwd=work,
            input=b"hello\n")
    assert r.returncode == 7
    assert r.stdout == b"out:hello\n"
    assert r.stderr == b"err\n"


def test_api_returns_completed_run(settings: Path, work: Path) -> None:
    r = run_sandboxed(["sh", "-c", "pwd; echo e >&2; exit 3"], settings, work)
    assert (r.returncode, r.stdout, r.stderr) == (3, f"{work}\n".encode(), b"e\n")
    assert r.duration > 0 and not r.timed_out


def test_signal_is_forwarded(settings: Path, work: Path) -> None:
    script = ("trap 'echo term > sig; exit 42' TERM; echo ready > ready; "
              "while :; do sleep 0.05; done")
    p = subprocess.Popen([*SANDBOX, "exec", "--settings", str(settings), "--", "sh", "-c",
                          script], cwd=work)
    wait_for_file(work / "ready")
    p.send_signal(signal.SIGTERM)
    assert p.wait(20) == 42
    assert (work / "sig").read_text() == "term\n"


@pytest.mark.parametrize("taker", ["main-thread", "proxy-thread"])
def test_signal_taken_by_a_proxy_thread_is_forwarded(settings: Path, work: Path,
                                                    taker: str) -> None:
    """The kernel hands a process's SIGTERM to any of its threads; once the command
    has used the network, ``sandbox exec`` serves its proxy from threads. A SIGTERM
    one of them takes (``tgkill``) still reaches the command at once: the main
    thread used to stay in its wait until the command ended by itself."""
    import ctypes

    script = ("curl -s -m 5 -o /dev/null http://up.example.com/ || true; "
              "trap 'echo term > sig; exit 42' TERM; echo ready > ready; "
              "while :; do sleep 0.05; done")
    p = subprocess.Popen([*SANDBOX, "exec", "--settings", str(settings), "--", "sh", "-c",
                          script], cwd=work)
    try:
        wait_for_file(work / "ready")
        others = [int(t) for t in os.listdir(f"/proc/{p.pid}/task") if int(t) != p.pid]
        assert others, "the proxy serves from threads of this process"
        target = p.pid if taker == "main-thread" else others[0]
        tgkill = ctypes.CDLL(None, use_errno=True).tgkill
        assert tgkill(p.pid, target, signal.SIGTERM) == 0, ctypes.get_errno()
        assert p.wait(10) == 42
        assert (work / "sig").read_text() == "term\n"
    finally:
        p.kill()
        p.wait()




def test_every_process_ends_with_the_command(settings: Path, work: Path) -> None:
    m = f"{secrets.randbelow(9000) + 1000}"
    control = subprocess.Popen(["sleep", f"3{m}"])
    try:
        deadline = time.monotonic() + 5  # a just-started process may not show its args yet
        while control.pid not in marked(f"sleep 3{m}"):
            assert time.monotonic() < deadline, "the process search misses a running sleep"
            time.sleep(0.01)
    finally:
        control.kill()
        control.wait()
    r = cli(settings, "sh", "-c", f"sleep 4{m} & setsid sleep 5{m} & echo started", cwd=work)
    assert r.returncode == 0
    wait_gone(f"sleep 4{m}", "a background process outlived the command")
    wait_gone(f"sleep 5{m}", "a setsid process outlived the command")


def test_killing_sandbox_exec_kills_the_sandbox(settings: Path, work: Path) -> None:
    m = f"{secrets.randbelow(9000) + 1000}"
    p = subprocess.Popen([*SANDBOX, "exec", "--settings", str(settings), "--", "sh", "-c",
                          f"echo x > ready; sleep 6{m}"], cwd=work)
    deadline = time.monotonic() + 20
    while not running(f"sleep 6{m}"):  # the command itself, not our own argv
        assert time.monotonic() < deadline
        time.sleep(0.02)
    p.kill()
    p.wait()
    wait_gone(f"sleep 6{m}", "the sandboxed process outlived sandbox exec")


def test_timeout_kills_everything(settings: Path, work: Path) -> None:
    m = f"{secrets.randbelow(9000) + 1000}"  # no other test's sleep can match
    started = time.monotonic()
    r = run_sandboxed(["sh", "-c", f"sleep 30{m} & sleep 31{m}"], settings, work, timeout=0.5)
    assert r.timed_out and r.returncode == TIMED_OUT
    assert time.monotonic() - started < 10
    wait_gone(f"sleep 30{m}", "a background process outlived the timeout")
    wait_gone(f"sleep 31{m}", "the command outlived the timeout")


@pytest.mark.parametrize("args,status,fragment", [
    (["--settings", "/nonexistent.json", "--", "true"], SANDBOX_FAILED, "cannot read settings"),
    (["--bogus", "--", "true"], 2, "unknown option"),
    (["--settings", "x.json"], 2, "no command"),
    (["--backend", "docker", "--", "true"], 2, "--backend must be"),
])
def test_usage_and_settings_errors(args: list[str], status: int, fragment: str,
                                   tmp_path: Path) -> None:
    r = subprocess.run([*SANDBOX, "exec", *args], cwd=tmp_path, capture_output=True, timeout=30)
    assert r.returncode == status
    assert fragment in r.stderr.decode()
    assert b"Traceback" not in r.stderr


def test_invalid_settings_never_run_the_command(tmp_path: Path) -> None:
    bad = write_settings(tmp_path / "bad.json", {"network": {"allowedDomains": ["*"]}})
    r = subprocess.run([*SANDBOX, "exec", "--settings", str(bad), "--", "touch",
                        str(tmp_path / "ran")], capture_output=True, timeout=30)
    assert r.returncode == SANDBOX_FAILED
    assert not (tmp_path / "ran").exists()
    assert b"would allow every domain" in r.stderr


def test_a_glob_that_cannot_compile_is_a_settings_error(tmp_path: Path) -> None:
    bad = write_settings(tmp_path / "bad.json", {
        "network": {"allowedDomains": [], "deniedDomains": []},
        "filesystem": {"denyRead": ["/a/[?-/]"], "allowWrite": [str(tmp_path)]}})
    r = subprocess.run([*SANDBOX, "exec", "--settings", str(bad), "--", "touch",
                        str(tmp_path / "ran")], capture_output=True, timeout=30)
    assert r.returncode == SANDBOX_FAILED
    assert not (tmp_path / "ran").exists()
    assert b"filesystem.denyRead: '/a/[?-/]' is not a valid glob" in r.stderr
    assert b"internal error" not in r.stderr


def test_no_default_settings_fails_clearly(tmp_path: Path) -> None:
    if Path("/etc/agent-sandbox/srt-settings.json").exists():
        pytest.skip("this host has system settings")
    env = dict(os.environ, HOME=str(tmp_path))
    r = subprocess.run([*SANDBOX, "exec", "--", "touch", str(tmp_path / "ran")], env=env,
                       capture_output=True, timeout=30)
    assert r.returncode == SANDBOX_FAILED
    assert b"--settings FILE" in r.stderr
    assert not (tmp_path / "ran").exists()


def test_default_user_settings_are_used(tmp_path: Path, work: Path) -> None:
    if Path("/etc/agent-sandbox/srt-settings.json").exists():
        pytest.skip("this host has system settings")
    write_settings(tmp_path / ".srt-settings.json", {"filesystem": {"allowWrite": [str(work)]}})
    env = dict(os.environ, HOME=str(tmp_path))
    r = subprocess.run([*SANDBOX, "exec", "--", "sh", "-c", "echo y > f; echo z > ../g"],
                       cwd=work, env=env, capture_output=True, timeout=30)
    assert r.returncode != 0
    assert (work / "f").read_text() == "y\n" and not (tmp_path / "g").exists()


def test_bwrap_failure_is_125_with_cause_and_never_unsandboxed(tmp_path: Path, settings: Path,
                                                                work: Path) -> None:
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\n"
                    "exit 1\n")
    fake.chmod(0o755)
    env = dict(os.environ, AGENT_SANDBOX_BWRAP=str(fake))
    r = subprocess.run([*SANDBOX, "exec", "--settings", str(settings), "--", "touch",
                        str(work / "ran")], env=env, capture_output=True, timeout=30)
    assert r.returncode == SANDBOX_FAILED
    assert b"could not start" in r.stderr and b"No permissions" in r.stderr
    assert not (work / "ran").exists()


def test_bwrap_failure_in_a_captured_run_quotes_bwrap(tmp_path: Path, settings: Path,
                                                      work: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # a detached runner has no terminal: what bwrap said is in the error itself
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: Can'\\''t find source path /x: \033[2J' >&2\n"
                    "exit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("AGENT_SANDBOX_BWRAP", str(fake))
    with pytest.raises(SandboxStartError) as err:
        run_sandboxed(["touch", str(work / "ran")], str(settings), cwd=work, capture=True)
    assert "bwrap said: bwrap: Can't find source path /x" in str(err.value)
    assert "\033" not in str(err.value)  # shown escaped, never as a terminal control
    assert not (work / "ran").exists()


def test_apparmor_diagnosis_names_the_profile() -> None:
    procfs = {"/proc/sys/kernel/apparmor_restrict_unprivileged_userns": "1"}
    msg = diagnose_userns(procfs.get)
    assert "AppArmor" in msg and "/etc/apparmor.d/agent-sandbox-bwrap" in msg
    assert "apparmor_parser -r" in msg
    assert "unprivileged_userns_clone" in diagnose_userns(
        {"/proc/sys/kernel/unprivileged_userns_clone": "0"}.get)
    assert diagnose_userns({}.get) == ""


def test_bad_cwd_is_refused(settings: Path) -> None:
    with pytest.raises(SandboxStartError):
        run_sandboxed(["true"], settings, "/nonexistent-dir")


def test_no_name_is_left_in_the_tree_during_or_after_the_run(settings: Path, work: Path) -> None:
    """No placeholder: a protected name that does not exist is refused when a call
    would create it (runtime.broker), so nothing of the sandbox's is in the tree."""
    r = run_sandboxed(["sh", "-c", "ls -A; echo x > .bashrc; ls -A"], settings, work)
    assert r.stdout == b"" and b"Read-only file system" in r.stderr
    assert sorted(os.listdir(work)) == []


def test_placeholders_survive_while_another_sandbox_runs(settings: Path, work: Path) -> None:
    long = subprocess.Popen([*SANDBOX, "exec", "--settings", str(settings), "--", "sh", "-c",
                             "echo x > ready; sleep 3; echo evil > .bashrc; echo rc=$?"],
                            cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wait_for_file(work / "ready")
    assert run_sandboxed(["true"], settings, work).returncode == 0  # ends first
    out, _ = long.communicate(timeout=30)
    assert b"rc=0" not in out
    assert not (work / ".bashrc").exists()


def test_agent_skills_cannot_be_planted_for_a_later_agent(settings: Path, work: Path) -> None:
    # .agents/skills is where Codex and other agents load skills (instructions and the
    # scripts they name) from: written in one run, read by the next unsandboxed agent
    plant = ("mkdir -p .agents/skills/evil; echo pwned > .agents/skills/evil/SKILL.md; "
             "mkdir -p sub/.agents/skills/evil; echo pwned > sub/.agents/skills/evil/SKILL.md")
    run_sandboxed(["sh", "-c", plant], settings, work)
    run_sandboxed(["sh", "-c", "ls -R . > /dev/null"], settings, work)  # the next run
    # no folder by that name anywhere: the top one was a read-only placeholder, the
    # deeper one was refused when the command made it (runtime.broker)
    assert [p for p in work.rglob(".agents")] == []
    assert (work / "sub").is_dir() and list((work / "sub").iterdir()) == []


def test_deep_new_repository_takes_no_hook(settings: Path, work: Path) -> None:
    """A repository a run makes is the run's, but a hook never reaches it: refused
    when written (the user's git may run there before the run ends)."""
    r = run_sandboxed(["sh", "-c", "mkdir -p a/b && cd a/b && git init -q . && "
                       "echo evil > .git/hooks/pre-commit"], settings, work)
    assert r.returncode != 0 and b"is a hook" in r.stderr, r.stderr
    assert (work / "a/b/.git/HEAD").exists()
    assert not (work / "a/b/.git/hooks/pre-commit").exists()


def test_deep_git_file_is_quarantined(settings: Path, work: Path) -> None:
    """A ``.git`` file a run makes (pointing anywhere) is disarmed after the run."""
    r = run_sandboxed(["sh", "-c", "mkdir -p a/b && echo 'gitdir: /elsewhere' > a/b/.git"],
                      settings, work)
    assert r.returncode == 0
    assert not (work / "a" / "b" / ".git").exists()
    assert next(p.name for p in (work / "a" / "b").iterdir()).startswith(".git.sandbox-quarantine")
    assert b"protected path" in r.stderr


def test_pre_existing_deep_repository_is_left_alone(settings: Path, work: Path) -> None:
    subprocess.run(["git", "init", "-q", str(work / "x" / "y")], check=True)
    r = run_sandboxed(["sh", "-c", "echo ok > x/y/file; echo evil > x/y/.git/hooks/pre-commit"],
                      settings, work)
    assert (work / "x" / "y" / ".git").is_dir()
    assert not (work / "x" / "y" / ".git" / "hooks" / "pre-commit").exists()
    assert (work / "x" / "y" / "file").read_text() == "ok\n"
    assert r.returncode != 0


# -- network ---------------------------------------------------------------------


def test_proxy_variables_are_set(settings: Path, work: Path) -> None:
    r = run_sandboxed(["env"], settings, work)
    env = dict(line.split("=", 1) for line in r.stdout.decode().splitlines() if "=" in line)
    for k in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        assert env[k] == env[k.lower()]
    assert env["HTTP_PROXY"] == "http://127.0.0.1:3128"
    assert "ProxyCommand" in env["GIT_SSH_COMMAND"]


def test_allowed_http_and_socks_reach_upstream_and_are_audited(
        settings: Path, work: Path, proxy_env: Net, audit_dir: Path) -> None:
    m = secrets.token_hex(6)
    r = run_sandboxed(["sh", "-c",
                       f"curl -s -m 5 http://up.example.com:8080/h{m}; echo; "
                       f"curl -s -m 5 -x socks5h://127.0.0.1:1080 http://UP.example.com.:8080/s{m}"],
                      settings, work)
    assert f"upstream-ok /h{m}".encode() in r.stdout
    assert f"upstream-ok /s{m}".encode() in r.stdout
    assert proxy_env.saw(f"/h{m}") and proxy_env.saw(f"/s{m}")
    recs = [x for x in audit_records(audit_dir) if x.get("event") == "proxy.decision"]
    kinds = {(x["protocol"], x["allowed"], x["host"]) for x in recs}
    assert ("http", True, "up.example.com") in kinds
    assert ("socks5", True, "up.example.com") in kinds


def test_denied_http_is_403_with_reason_and_socks_not_allowed(
        settings: Path, work: Path, proxy_env: Net, audit_dir: Path) -> None:
    m = secrets.token_hex(6)
    r = run_sandboxed(["sh", "-c",
                       f"curl -si -m 5 http://bad.example.com:8080/{m}; "
                       f"curl -si -m 5 -p https://other.test/{m}; "
                       f"curl -s -m 5 -x socks5h://127.0.0.1:1080 http://other.test/{m}; "
                       "echo socks=$?"], settings, work)
    out = r.stdout.decode()
    assert "403 Forbidden" in out
    assert "X-Proxy-Error: blocked-by-denylist" in out
    assert "X-Proxy-Error: blocked-by-allowlist" in out
    assert "socks=97" in out  # curl: the SOCKS5 server refused (reply 0x02)
    assert not proxy_env.saw(m)
    denied = {(x["host"], x["reason"]) for x in audit_records(audit_dir)
              if x.get("event") == "proxy.decision" and not x["allowed"]}
    assert ("bad.example.com", "blocked-by-denylist") in denied
    assert ("other.test", "blocked-by-allowlist") in denied


def test_https_connect_tunnel_reaches_allowed_host(settings: Path, work: Path,
                                                    proxy_env: Net) -> None:
    m = secrets.token_hex(6)
    r = run_sandboxed(["sh", "-c", f"curl -s -m 5 -p http://up.example.com:8080/c{m}"],
                      settings, work)
    assert f"upstream-ok /c{m}".encode() in r.stdout


def test_rebinding_to_loopback_is_refused_with_reason(tmp_path: Path, work: Path,
                                                      proxy_env: Net) -> None:
    s = write_settings(tmp_path / "r.json", {"network": {"allowedDomains": [
        "rebind.example.com", "meta.example.com", "self.example.com"]}})
    r = run_sandboxed(["sh", "-c", "for h in rebind meta self; do curl -si -m 5 "
                       "http://$h.example.com:8080/ | grep X-Proxy-Error; done"], s, work)
    out = r.stdout.decode()
    assert "blocked-by-address: loopback" in out
    assert "blocked-by-address: metadata" in out
    assert "blocked-by-address: host-address" in out


@pytest.fixture
def git_server(net: Net, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A real OpenSSH server in the upstream namespace serving a bare repository
    (key authentication only, its own host key, config and authorized keys)."""
    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    if not os.path.exists(sshd):
        pytest.fail("sshd is needed (scripts/bootstrap.sh installs openssh-server)")
    d = tmp_path / "sshd"
    d.mkdir()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / "host")],
                   check=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / "client")],
                   check=True)
    (d / "authorized_keys").write_text((d / "client.pub").read_text())
    repo = tmp_path / "repo.git"
    src = tmp_path / "src"
    marker = secrets.token_hex(8)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q", "-b", "main", str(src)], check=True)
    (src / "README").write_text(f"served over ssh {marker}\n")
    subprocess.run([*git, "-C", str(src), "add", "README"], check=True)
    subprocess.run([*git, "-C", str(src), "commit", "-q", "-m", "first"], check=True)
    subprocess.run(["git", "clone", "-q", "--bare", str(src), str(repo)], check=True)
    (d / "sshd_config").write_text(
        f"Port 2022\nListenAddress {net.up_ip}\nHostKey {d / 'host'}\n"
        f"AuthorizedKeysFile {d / 'authorized_keys'}\nPidFile {d / 'pid'}\n"
        "UsePAM no\nStrictModes no\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\n")
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation folder
    proc = subprocess.Popen(["ip", "netns", "exec", net.ns, sshd, "-D", "-e", "-f",
                             str(d / "sshd_config")], stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        while not (d / "pid").exists():
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else b""
            assert time.monotonic() < deadline, "sshd did not start"
            time.sleep(0.02)
        yield marker, repo
    finally:
        proc.kill()
        proc.wait()


def test_git_clone_over_ssh_through_the_proxy(settings: Path, work: Path, proxy_env: Net,
                                              git_server: tuple[str, Path],
                                              tmp_path: Path) -> None:
    """A whole clone from a real sshd: the sandbox's ssh reaches the allowed host
    only through the proxy (ProxyCommand in GIT_SSH_COMMAND), and the bytes arrive."""
    marker, repo = git_server
    key = work / "id"
    key.write_bytes((tmp_path / "sshd" / "client").read_bytes())
    key.chmod(0o600)
    r = run_sandboxed(["sh", "-c", "GIT_SSH_COMMAND=\"$GIT_SSH_COMMAND -i ./id -o BatchMode=yes "
                       "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null "
                       "-o ConnectTimeout=5\" "
                       f"git clone -q ssh://root@up.example.com:2022{repo} out && cat out/README"],
                      settings, work, timeout=60)
    assert r.returncode == 0, r.stderr.decode()[-800:]
    assert f"served over ssh {marker}".encode() in r.stdout
    assert (work / "out" / "README").read_text() == f"served over ssh {marker}\n"
    # and not around it: the same clone without the proxy cannot reach the server
    r = run_sandboxed(["sh", "-c", "ssh -i ./id -o BatchMode=yes -o StrictHostKeyChecking=no "
                       "-o UserKnownHostsFile=/dev/null -o ConnectTimeout=3 -p 2022 "
                       f"root@{proxy_env.up_ip} true"], settings, work, timeout=60)
    assert r.returncode != 0


def test_git_over_ssh_goes_through_the_proxy(settings: Path, work: Path, proxy_env: Net) -> None:
    run_sandboxed(["sh", "-c", "GIT_SSH_COMMAND=\"$GIT_SSH_COMMAND -o BatchMode=yes "
                   "-o StrictHostKeyChecking=no -o ConnectTimeout=5\" "
                   "git ls-remote ssh://git@up.example.com:2222/repo.git"], settings, work,
                  timeout=30)
    assert any(line.startswith("RAW SSH-2.0-OpenSSH") for line in proxy_env.upstream_lines())


def test_spec_renders_to_the_same_settings(tmp_path: Path, work: Path) -> None:
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "k").write_text("TOPSECRET")
    spec = tmp_path / "spec.yml"
    spec.write_text(f"version: 1\nfilesystem:\n  deny_read: [\"{secret}\"]\n"
                    f"  allow_write: [\"{work}\"]\nnetwork:\n  allowed_domains: [example.com]\n")
    r = subprocess.run([*SANDBOX, "exec", "--spec", str(spec), "--", "sh", "-c",
                        f"cat {secret}/k; echo w > {work}/f; echo x > {tmp_path}/g"],
                       cwd=work, capture_output=True, timeout=60)
    assert b"TOPSECRET" not in r.stdout
    assert (work / "f").exists() and not (tmp_path / "g").exists()


@pytest.fixture
def open_dir() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="agent-sandbox-nb-"))
    d.chmod(0o777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def other_user_env() -> dict[str, str]:
    """This environment without the state and lock folders other tests chose for
    this user: the other user keeps its state under its own home."""
    return {k: v for k, v in os.environ.items()
            if k not in ("AGENT_SANDBOX_STATE_DIR", "AGENT_SANDBOX_LOCK_DIR")}


def package_env(open_dir: Path) -> dict[str, str]:
    """For a command run as another user: when this checkout sits in a folder only
    its owner can enter (a 0700 home or mktemp -d), a readable copy of the package
    on PYTHONPATH (``sandbox exec`` needs nothing else beyond the standard library)."""
    here = Path(__file__).resolve().parents[2]
    if all(d.stat().st_mode & 0o001 for d in [here, *here.parents]):
        return {}
    copy = open_dir / "pkg"
    shutil.copytree(here / "src" / "agent_sandbox", copy / "agent_sandbox",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for p in [copy, *copy.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    return {"PYTHONPATH": str(copy)}


def test_unprivileged_user_gets_the_same_sandbox(open_dir: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("switching to an unprivileged user needs root")
    d = open_dir
    (d / "w").mkdir(mode=0o777)
    (d / "w").chmod(0o777)
    s = write_settings(d / "s.json", {"network": {"allowedDomains": ["example.com"]},
                                      "filesystem": {"allowWrite": [str(d / "w")]}})
    s.chmod(0o644)
    env = dict(other_user_env(), HOME=str(d), AGENT_SANDBOX_AUDIT_DIR=str(d / "audit"),
               **package_env(d))
    d = d / "w"
    r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                        *SANDBOX, "exec", "--settings", str(s), "--", "sh", "-c",
                        "id -u; echo hi > f; echo no > /tmp/nb-escape-$$; "
                        "curl -s -m 5 -o /dev/null -w '%{http_code}' http://other.test/"],
                       cwd=d, env=env, capture_output=True, timeout=60)
    assert r.stdout.decode().split()[:2] == ["65534", "403"], r.stderr
    assert (d / "f").read_text() == "hi\n"
    recs = audit_records(d.parent / "audit")
    assert any(x.get("host") == "other.test" and not x["allowed"] for x in recs)


def test_unprivileged_ports_open_however_late(open_dir: Path) -> None:
    """An unprivileged bwrap moves its init into a nested user namespace once its
    mounts are made: the proxy ports are opened through the user namespace that owns
    the sandbox's network namespace, not the one init is in by then (here they are
    opened 0.3 s late, long after bwrap's setup; joining init's failed with EPERM)."""
    if os.geteuid() != 0:
        pytest.skip("switching to an unprivileged user needs root")
    d = open_dir
    (d / "w").mkdir(mode=0o777)
    (d / "w").chmod(0o777)
    s = write_settings(d / "s.json", {"network": {"allowedDomains": ["example.com"]},
                                      "filesystem": {"allowWrite": [str(d / "w")]}})
    s.chmod(0o644)
    env = dict(other_user_env(), HOME=str(d), AGENT_SANDBOX_AUDIT_DIR=str(d / "audit"),
               **package_env(d))
    late = ("import sys, time\n"
            "from agent_sandbox.runtime.bwrap import netns\n"
            "real = netns.open_listeners\n"
            "def late(*a, **k):\n    time.sleep(0.3)\n    return real(*a, **k)\n"
            "netns.open_listeners = late\n"
            "from agent_sandbox.cli.exec_main import main\n"
            "sys.exit(main(sys.argv[1:]))\n")
    r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                        PY, "-c", late, "--settings", str(s), "--", "id", "-u"],
                       cwd=d / "w", env=env, capture_output=True, timeout=60)
    assert (r.returncode, r.stdout.split()) == (0, [b"65534"]), r.stderr


def test_settings_file_is_srt_compatible(tmp_path: Path, work: Path) -> None:
    """A file using every srt key (and srt-only keys) runs unchanged."""
    s = write_settings(tmp_path / "srt.json", {
        "network": {"allowedDomains": ["example.com"], "deniedDomains": [],
                    "allowLocalBinding": True, "allowAllUnixSockets": False},
        "filesystem": {"denyRead": ["~/.ssh"], "allowRead": [], "allowWrite": [str(work)],
                       "denyWrite": []},
        "ignoreViolations": {}, "enableWeakerNestedSandbox": False,
    })
    assert run_sandboxed(["true"], s, work).returncode == 0
    json.loads(s.read_text())  # unchanged on disk
    assert REPO.exists()


SYSCALL_PROBE = r'''
import ctypes, errno, fcntl, os, socket
libc = ctypes.CDLL(None, use_errno=True)
def sc(*args):
    r = libc.syscall(*args)
    return 0 if r >= 0 else ctypes.get_errno()
def sock(fam, typ):
    try:
        socket.socket(fam, typ).close(); return 0
    except OSError as e:
        return e.errno
out = {
    "unix": sock(socket.AF_UNIX, socket.SOCK_STREAM),
    "udp": sock(socket.AF_INET, socket.SOCK_DGRAM),
    "udp6": sock(socket.AF_INET6, socket.SOCK_DGRAM),
    "raw": sock(socket.AF_INET, socket.SOCK_RAW),
    "netlink": sock(socket.AF_NETLINK, socket.SOCK_RAW),
    "tcp": sock(socket.AF_INET, socket.SOCK_STREAM),
    "socketpair": 0 if socket.socketpair() else 1,
    "vsock": sock(40, socket.SOCK_STREAM),
    "alg": sock(38, socket.SOCK_SEQPACKET),
    "io_uring_setup": sc(425, 1, ctypes.create_string_buffer(120)),
    "unshare_user": sc(272, 0x10000000),
    "clone3": sc(435, 0, 0),
    "mount": sc(165, b"none", b"/tmp", b"tmpfs", 0, 0),
    "ptrace": sc(101, 16, 1, 0, 0),
}
try:
    socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM); out["unix_dgram_pair"] = 0
except OSError as e:
    out["unix_dgram_pair"] = e.errno
try:  # Rust's process spawning makes one (cargo, rustc calling the linker)
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
    out["unix_seqpacket_pair"] = 0
except OSError as e:
    out["unix_seqpacket_pair"] = e.errno
try:
    fcntl.ioctl(0, 0x5412, b"x"); out["tiocsti"] = 0
except OSError as e:
    out["tiocsti"] = e.errno
for name, call in (("setxattr", lambda: os.setxattr(".", "user.agent-sandbox.made", b"1")),
                   ("lsetxattr", lambda: os.setxattr(".", "user.x", b"1",
                                                     follow_symlinks=False))):
    try:
        call(); out[name] = 0
    except OSError as e:
        out[name] = e.errno
print(out)
'''


def test_seccomp_filter_is_live(settings: Path, work: Path) -> None:
    """The errnos only the filter gives (EAFNOSUPPORT for unix, EPERM for TIOCSTI on
    /dev/null where the kernel says ENOTTY, ENOSYS for clone3)."""
    r = run_sandboxed([PY, "-I", "-c", SYSCALL_PROBE], settings, work, stdin=b"")
    got = eval(r.stdout.decode())  # a dict literal printed by the probe
    assert got["unix"] == 97 and got["netlink"] == 97
    assert got["vsock"] == 97 and got["alg"] == 97  # an allowlist of families
    assert got["unix_dgram_pair"] == 1  # sendto() could point it at any socket path
    assert got["unix_seqpacket_pair"] == 0  # connected for good, as a stream pair
    assert got["udp"] == got["udp6"] == got["raw"] == 1
    assert got["tcp"] == 0 and got["socketpair"] == 0
    assert got["io_uring_setup"] == 1 and got["unshare_user"] == 1 and got["mount"] == 1
    assert got["clone3"] == 38
    assert got["ptrace"] == 1
    assert got["tiocsti"] == 1
    assert got["setxattr"] == got["lsetxattr"] == 95  # the broker's mark is not the command's


def test_allowed_unix_socket_by_path(tmp_path: Path, work: Path) -> None:
    import socket as _s

    sock_dir = tmp_path / "run"
    sock_dir.mkdir()
    allowed, other = str(sock_dir / "ok.sock"), str(sock_dir / "no.sock")
    servers = []
    for path in (allowed, other):
        s = _s.socket(_s.AF_UNIX)
        s.bind(path)
        s.listen(4)
        servers.append(s)
    cfg = write_settings(tmp_path / "u.json", {
        "network": {"allowUnixSockets": [allowed]},
        "filesystem": {"allowWrite": [str(work)]}})
    probe = ("import socket,sys\nfor p in sys.argv[1:]:\n s=socket.socket(socket.AF_UNIX)\n"
             " try:\n  s.connect(p); print('ok', p)\n except OSError as e: print('no', p, e.errno)")
    try:
        r = run_sandboxed([PY, "-I", "-c", probe, allowed, other], cfg, work)
    finally:
        for s in servers:
            s.close()
    lines = r.stdout.decode().splitlines()
    assert f"ok {allowed}" in lines
    assert not any(line.startswith(f"ok {other}") for line in lines)


def test_writable_root_the_user_cannot_write_still_runs(open_dir: Path) -> None:
    """RunRecord that this user cannot create are skipped (the command cannot
    create those names either), instead of failing the run."""
    if os.geteuid() != 0:
        pytest.skip("needs root to switch users")
    ro = open_dir / "ro"
    ro.mkdir()
    ro.chmod(0o755)  # root-owned: not writable by nobody
    s = write_settings(open_dir / "s.json", {"filesystem": {"allowWrite": [str(ro)]}})
    s.chmod(0o644)
    env = dict(other_user_env(), HOME=str(open_dir), AGENT_SANDBOX_AUDIT_DIR=str(open_dir / "a"),
               **package_env(open_dir))
    r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                        *SANDBOX, "exec", "--settings", str(s), "--", "sh", "-c",
                        f"echo ran; echo x > {ro}/.bashrc"], cwd=open_dir, env=env,
                       capture_output=True, timeout=60)
    assert r.stdout == b"ran\n", r.stderr
    assert r.returncode != 0 and not (ro / ".bashrc").exists()


def test_descriptors_of_the_caller_do_not_leak_in(settings: Path, work: Path,
                                                  tmp_path: Path) -> None:
    secret = tmp_path / "secret-fd"
    secret.write_text("FD-SECRET")
    fd = os.open(secret, os.O_RDONLY)
    try:
        r = subprocess.run([*SANDBOX, "exec", "--settings", str(settings), "--", "sh", "-c",
                            f"cat <&{fd}; ls /proc/self/fd"], cwd=work, pass_fds=(fd,),
                           capture_output=True, timeout=60)
    finally:
        os.close(fd)
    assert b"FD-SECRET" not in r.stdout
    assert str(fd).encode() not in r.stdout.split()


def test_the_command_holds_only_its_standard_streams(settings: Path, work: Path) -> None:
    """bwrap's descriptors (seccomp, info, block, gate, ready) are renumbered to
    single digits in its process, so the start gate runs under /bin/sh; neither
    they nor the originals they were moved from reach the command."""
    r = cli(settings, "sh", "-c", "ls /proc/self/fd; echo; tr '\\0' ' ' < /proc/1/cmdline",
            cwd=work)
    fds, _, init = r.stdout.decode().partition("\n\n")
    assert r.returncode == 0, r.stderr.decode()
    assert sorted(fds.split()) == ["0", "1", "2", "3"]  # 3: ls's own listing
    assert " -- /bin/sh -p -c echo ready >&7;" in init


def test_spec_inventory_with_host_layers(tmp_path: Path, work: Path) -> None:
    """--spec INVENTORY --host NAME applies the layered spec of that host."""
    inv = tmp_path / "inv"
    (inv / "sandbox" / "hosts").mkdir(parents=True)
    (inv / "hosts.yml").write_text("all:\n  hosts:\n    h1: {}\n    h2: {}\n")
    (inv / "sandbox" / "fleet.yml").write_text(
        f"version: 1\nfilesystem:\n  allow_write: [\"{work}\", \"{tmp_path}\"]\n")
    (inv / "sandbox" / "hosts" / "h1.yml").write_text(
        f"version: 1\nfilesystem:\n  deny_write: [\"{tmp_path}/locked\"]\n")
    (tmp_path / "locked").mkdir()
    script = f"echo a > {tmp_path}/locked/x; echo b > {work}/y"
    r1 = subprocess.run([*SANDBOX, "exec", "--spec", str(inv), "--host", "h1", "--", "sh",
                         "-c", script], cwd=work, capture_output=True, timeout=60)
    assert not (tmp_path / "locked" / "x").exists(), r1.stderr
    assert (work / "y").exists()
    r2 = subprocess.run([*SANDBOX, "exec", "--spec", str(inv), "--host", "h2", "--", "sh",
                         "-c", script], cwd=work, capture_output=True, timeout=60)
    assert (tmp_path / "locked" / "x").exists(), r2.stderr
    r3 = subprocess.run([*SANDBOX, "exec", "--spec", str(inv), "--", "true"], cwd=work,
                        capture_output=True, timeout=60)
    assert r3.returncode == SANDBOX_FAILED and b"--host" in r3.stderr


def test_writable_root_inside_a_denied_read(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "proj").mkdir(parents=True)
    (home / ".ssh").mkdir()
    (home / ".ssh" / "id").write_text("KEY-SECRET")
    (home / ".gitconfig").write_text("[user]\n")
    s = write_settings(tmp_path / "s.json", {"filesystem": {
        "denyRead": [str(home)], "allowRead": [str(home / ".gitconfig")],
        "allowWrite": [str(home / "proj")]}})
    r = run_sandboxed(["sh", "-c", f"echo hi > f; cat {home}/.ssh/id; cat {home}/.gitconfig; "
                       f"touch {home}/new"], s, home / "proj")
    assert (home / "proj" / "f").read_text() == "hi\n"
    assert b"KEY-SECRET" not in r.stdout and b"[user]" in r.stdout
    assert not (home / "new").exists()


def test_fast_path_imports_stay_light(settings: Path, work: Path) -> None:
    """Cold start: ``sandbox exec -- true`` loads none of the heavy modules."""
    code = ("import sys; from agent_sandbox.cli.entry import main; "
            "sys.exit(main(['exec', '--settings', sys.argv[1], '--', 'true']))")
    r = subprocess.run([PY, "-X", "importtime", "-c", code, str(settings)], cwd=work,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    loaded = {line.rsplit("|", 1)[-1].strip() for line in r.stderr.splitlines()
              if line.startswith("import time:")}
    # ctypes (and the struct it loads) is the one exception: seccomp(2), which gives
    # the broker its listener (runtime.broker.notify), has no wrapper in os
    heavy = {"typer", "pydantic", "re", "json", "typing", "enum", "subprocess", "socket",
             "asyncio", "dataclasses", "ipaddress", "threading", "functools",
             "collections"}
    assert not heavy & loaded, sorted(heavy & loaded)


def test_api_reports_bad_settings_as_a_start_error(tmp_path: Path) -> None:
    from agent_sandbox.runtime.settings import SettingsError

    bad = write_settings(tmp_path / "bad.json", {"network": {"allowedDomains": ["*"]}})
    with pytest.raises(SandboxStartError) as err:
        run_sandboxed(["touch", str(tmp_path / "ran")], bad, tmp_path)
    assert isinstance(err.value, SettingsError)
    assert "would allow every domain" in str(err.value)
    assert not (tmp_path / "ran").exists()


def _deep(work: Path) -> Path:
    d = work / "a" / "b" / "c" / "d" / "e" / "f"  # deeper than the mounts reach
    d.mkdir(parents=True)
    return d


def test_writes_into_a_deep_existing_repository_are_disarmed(settings: Path, work: Path) -> None:
    d = _deep(work)
    subprocess.run(["git", "init", "-q", str(d)], check=True)
    config = (d / ".git" / "config").read_text()
    time.sleep(0.1)
    script = ("echo evil > .git/hooks/pre-commit; git status -s >/dev/null; "
              "echo '[core] fsmonitor = evil' >> .git/config; echo ok > file")
    r = run_sandboxed(["sh", "-c", script], settings, d)
    assert not (d / ".git" / "hooks" / "pre-commit").exists()
    assert (d / ".git" / "objects").is_dir() and (d / "file").read_text() == "ok\n"
    assert not (d / ".git" / "config").exists() or (d / ".git" / "config").read_text() == config
    # the deep repository's metadata is read-only in the run: nothing to disarm after
    assert b"Read-only file system" in r.stderr


def test_moving_an_old_directory_into_place_does_not_hide_a_hook(settings: Path,
                                                                  work: Path) -> None:
    d = _deep(work)
    (d / "old").mkdir()
    (d / "old" / "README").write_text("old content")
    os.utime(d / "old" / "README", (0, 0))
    time.sleep(0.1)
    run_sandboxed(["sh", "-c", "mkdir x && mv old x/.git && mkdir -p x/.git/hooks && "
                   "echo evil > x/.git/hooks/pre-commit"], settings, d)
    assert not (d / "x" / ".git" / "hooks" / "pre-commit").exists()


def test_untouched_deep_repository_is_left_alone(settings: Path, work: Path) -> None:
    d = _deep(work)
    subprocess.run(["git", "init", "-q", str(d)], check=True)
    (d / "f").write_text("x")
    time.sleep(0.1)
    r = run_sandboxed(["sh", "-c", "git add f && git -c user.email=a@b -c user.name=a "
                       "commit -qm m && git log --oneline | wc -l"], settings, d)
    assert r.stdout.strip() == b"1", r.stderr
    assert b"protected path" not in r.stderr
    assert sorted(p.name for p in (d / ".git").iterdir() if "quarantine" in p.name) == []


def test_unwritable_audit_refuses_egress_without_crashing(settings: Path, work: Path,
                                                          proxy_env: Net, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    monkeypatch.setenv("AGENT_SANDBOX_AUDIT_DIR", str(blocker / "audit"))
    m = secrets.token_hex(6)
    r = subprocess.run([*SANDBOX, "exec", "--settings", str(settings), "--", "sh", "-c",
                        f"curl -si -m 5 http://up.example.com:8080/{m} | head -2"],
                       cwd=work, capture_output=True, timeout=60)
    assert b"403" in r.stdout and b"audit-unavailable" in r.stdout
    assert b"audit log is unavailable" in r.stderr and b"Traceback" not in r.stderr
    assert not proxy_env.saw(m)


def test_git_second_config_location_is_read_only(tmp_path: Path, work: Path) -> None:
    """``~/.config/git/config`` runs code as surely as ``~/.gitconfig``: an existing
    one stays read-only even when the home folder itself is writable."""
    cfg = work / ".config" / "git" / "config"
    cfg.parent.mkdir(parents=True)
    cfg.write_text("[user]\n\tname = original\n")
    s = write_settings(tmp_path / "home.json", {
        "network": {"allowedDomains": [], "deniedDomains": []},
        "filesystem": {"denyRead": [], "allowWrite": [str(work)]},
    })
    r = run_sandboxed(["sh", "-c", "echo '[core]\n\tpager = evil' >> .config/git/config; "
                                   "touch .config/git/attributes; echo done"], s, work)
    assert b"done" in r.stdout
    assert cfg.read_text() == "[user]\n\tname = original\n"  # judged from the host
    assert not (work / ".config" / "git" / "attributes").exists()


def test_killed_during_startup_never_runs_the_command(settings: Path, work: Path) -> None:
    """SIGKILL `sandbox exec` at many points of its start (before bwrap runs,
    between bwrap's start and its parent-death signals, before the command is
    released): the command must never run on without its supervisor (no proxy,
    nobody to end it). The start gate holds it until the live caller says "go"."""
    m = f"{secrets.randbelow(9000) + 1000}"
    for i in range(40):
        p = subprocess.Popen([*SANDBOX, "exec", "--settings", str(settings), "--", "sh", "-c",
                              f"sleep 7{m}{i:02d}"], cwd=work, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        time.sleep(0.002 * i)  # 0 to 78 ms: sweeps the whole start sequence
        p.kill()
        p.wait()
    try:
        deadline = time.monotonic() + 5
        while running(f"sleep 7{m}") or running(f"sh -c sleep 7{m}"):
            assert time.monotonic() < deadline, (
                f"commands running without their supervisor: {running(f'sleep 7{m}')}")
            time.sleep(0.05)
        time.sleep(1)  # nothing held back starts later either
        assert running(f"sleep 7{m}") == [] and running(f"sh -c sleep 7{m}") == []
        # a bwrap left blocked in its own set-up is reaped by the next run to finish
        r = subprocess.run([*SANDBOX, "exec", "--settings", str(settings), "--", "true"],
                           cwd=work, env=dict(os.environ, AGENT_SANDBOX_REAP_EVERY="0"),
                           timeout=60)
        assert r.returncode == 0
        wait_gone(f"sleep 7{m}")
    finally:
        kill_marked(f"sleep 7{m}")


def test_reaping_leaves_live_sandboxes_alone(settings: Path, work: Path) -> None:
    from agent_sandbox.contract import lock_dir
    from agent_sandbox.runtime.bwrap.reaper import reap_stuck
    from agent_sandbox.runtime.host import home_dir

    m = f"{secrets.randbelow(9000) + 1000}"
    p = subprocess.Popen([*SANDBOX, "exec", "--settings", str(settings), "--", "sh", "-c",
                          f"echo up > up; sleep 6{m}"], cwd=work)
    try:
        wait_for_file(work / "up")
        assert reap_stuck(lock_dir(home_dir()), every=0) == 0
        assert running(f"sleep 6{m}") and p.poll() is None
    finally:
        p.kill()
        p.wait()


def test_proxy_and_sweep_share_one_audit_writer(settings: Path, work: Path, proxy_env: Net,
                                                audit_dir: Path) -> None:
    """A run that both connected and planted a deep hook records both in one intact
    chain: the sweep writes through the proxy's audit writer, not a second one."""
    from agent_sandbox.audit.verifier import verify

    m = secrets.token_hex(6)
    r = run_sandboxed(["sh", "-c", f"curl -s -m 5 http://up.example.com:8080/q{m}; "
                       "mkdir -p a/b && echo 'gitdir: /elsewhere' > a/b/.git"], settings, work)
    assert f"upstream-ok /q{m}".encode() in r.stdout
    kinds = [x.get("event_kind") or x.get("event") for x in audit_records(audit_dir)]
    assert "quarantine" in kinds and "proxy.decision" in kinds
    assert verify(audit_dir).ok


TMP_PROBE = ("import os, tempfile; d = tempfile.gettempdir(); print(d); "
             "open(os.path.join(d, '.bashrc'), 'w').write('x'); "
             "os.makedirs(os.path.join(d, 'r', '.git', 'hooks')); "
             "open(os.path.join(d, 'r', '.git', 'hooks', 'pre-commit'), 'w').write('x')")


def test_a_run_with_no_temporary_folder_gets_its_own(settings: Path, work: Path) -> None:
    """With no ``TMPDIR`` and ``/tmp`` not writable, Python's ``tempfile`` would fall
    back to the working folder (``pip install -e .`` of a flat project then takes
    its build folder for a package). The run gets a folder of its own instead,
    where nothing is protected (no host tool meets it), removed when it ends; a
    ``TMPDIR`` the caller gives is kept."""
    env = {k: v for k, v in os.environ.items() if k != "TMPDIR"}
    r = run_sandboxed([PY, "-I", "-c", TMP_PROBE], settings, work, env=env)
    assert r.returncode == 0, r.stderr
    used = r.stdout.decode().strip()
    assert used.startswith("/tmp/agent-sandbox-tmp-") and not os.path.exists(used)
    assert not list(work.iterdir()) and b"protected" not in r.stderr
    r = run_sandboxed([PY, "-I", "-c", "import tempfile; print(tempfile.gettempdir())"],
                      settings, work, env={**env, "TMPDIR": str(work)})
    assert r.stdout.decode().strip() == str(work)
