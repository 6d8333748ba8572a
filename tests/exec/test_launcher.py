"""The native ``sandbox`` launcher: plans replayed only while every input still holds.

The launcher is built from its source (the ``launcher`` fixture in conftest).
``AGENT_SANDBOX_TRACE=1`` makes it say whether it replayed a plan or why not;
every test checks that, so a test about the replay path cannot silently pass
on the Python path instead.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import (
    REPLAYED,
    Net,
    audit_records,
    decisions,
    free_port,
    kill_marked,
    needs_bwrap,
    parent_proxy,
    running,
    wait_for_file,
    wait_gone,
    write_settings,
)

pytestmark = needs_bwrap


@pytest.fixture
def locks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "locks"
    monkeypatch.setenv("AGENT_SANDBOX_LOCK_DIR", str(d))
    monkeypatch.setenv("AGENT_SANDBOX_TRACE", "1")
    return d



@pytest.fixture
def settings(tmp_path: Path, work: Path) -> Path:
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "key").write_text("TOPSECRET\n")
    return write_settings(tmp_path / "s.json", {
        "network": {"allowedDomains": ["up.example.com"], "deniedDomains": ["bad.example.com"]},
        "filesystem": {"denyRead": [str(tmp_path / "secret"), "**/.env", str(tmp_path / "alias")],
                       "allowWrite": [str(work)]},
    })


def run(launcher: Path, settings: Path, *cmd: str, cwd: Path,
        **kw: object) -> subprocess.CompletedProcess:
    return subprocess.run([str(launcher), "exec", "--settings", str(settings), "--", *cmd],
                          cwd=cwd, capture_output=True, timeout=60, **kw)  # type: ignore[call-overload]


def warm(launcher: Path, settings: Path, cwd: Path) -> None:
    """One run on the Python path, which writes the plan the next run replays."""
    r = run(launcher, settings, "true", cwd=cwd)
    assert r.returncode == 0, r.stderr.decode()
    assert REPLAYED not in r.stderr


def test_second_run_replays_with_streams_and_status(launcher: Path, locks: Path,
                                                    settings: Path, work: Path) -> None:
    first = run(launcher, settings, "sh", "-c", "read x; echo out:$x; echo err >&2; exit 7",
                cwd=work, input=b"hello\n")
    assert b"plan not replayed: no plan" in first.stderr
    second = run(launcher, settings, "sh", "-c", "read x; echo out:$x; echo err >&2; exit 7",
                 cwd=work, input=b"hello\n")
    assert REPLAYED in second.stderr
    for r in (first, second):
        assert r.returncode == 7
        assert r.stdout == b"out:hello\n"
        assert r.stderr.endswith(b"err\n")
    # the same sandbox: denied reads hidden, protected names read-only, no placeholders left
    r = run(launcher, settings, "sh", "-c",
            f"cat {settings.parent}/secret/key; echo x > .bashrc; echo y > ../outside",
            cwd=work)
    assert REPLAYED in r.stderr
    assert b"TOPSECRET" not in r.stdout
    assert not (work / ".bashrc").exists()
    assert not (settings.parent / "outside").exists()
    assert sorted(p.name for p in work.iterdir()) == []


def test_a_new_denied_file_is_seen(launcher: Path, locks: Path, settings: Path,
                                   work: Path) -> None:
    """The plan hid every .env that existed; a new one must not be readable."""
    warm(launcher, settings, work)
    (work / "deep" / "er").mkdir(parents=True)
    (work / "deep" / "er" / ".env").write_text("API_KEY=leak\n")
    r = run(launcher, settings, "cat", "deep/er/.env", cwd=work)
    assert REPLAYED not in r.stderr
    assert b"leak" not in r.stdout
    r = run(launcher, settings, "cat", "deep/er/.env", cwd=work)
    assert REPLAYED in r.stderr
    assert b"leak" not in r.stdout


@pytest.mark.parametrize("change", ["settings", "symlink", "env", "cwd"])
def test_changed_inputs_are_not_replayed(launcher: Path, locks: Path, settings: Path,
                                         work: Path, tmp_path: Path, change: str,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "elsewhere").mkdir()
    (work / "link").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "private").mkdir()
    (tmp_path / "private" / "f").write_text("PRIVATE\n")
    (tmp_path / "alias").symlink_to(tmp_path / "elsewhere")  # denied: what it points to
    warm(launcher, settings, work)
    cwd = work
    if change == "settings":  # same size, one more writable folder
        text = settings.read_text().replace('"allowWrite": [', f'"allowWrite": ["{tmp_path}/sub",')
        settings.write_text(text)
    elif change == "symlink":  # the denied link now points at another folder
        (tmp_path / "alias").unlink()
        (tmp_path / "alias").symlink_to(tmp_path / "private")
    elif change == "env":
        monkeypatch.setenv("AGENT_SANDBOX_AUDIT_DIR", str(tmp_path / "other-audit"))
    else:
        cwd = work / "link"
    r = run(launcher, settings, "cat", f"{tmp_path}/private/f", cwd=cwd)
    assert b"plan not replayed" in r.stderr
    assert (b"PRIVATE" in r.stdout) == (change != "symlink")


def test_plan_files_it_cannot_trust_are_ignored(launcher: Path, locks: Path, settings: Path,
                                                work: Path) -> None:
    warm(launcher, settings, work)
    (plan,) = (locks / "plans").iterdir()
    plan.chmod(0o666)
    r = run(launcher, settings, "true", cwd=work)
    assert b"plan not replayed: no plan file" in r.stderr  # refused: writable by others
    # a truncated or altered plan is refused too (the Python run rewrote it)
    (plan,) = (locks / "plans").iterdir()
    data = plan.read_bytes()
    plan.write_bytes(data[:-20])
    r = run(launcher, settings, "true", cwd=work)
    assert REPLAYED not in r.stderr and r.returncode == 0
    # a link to a plan file elsewhere, or a plan folder others may write, is refused
    (plan,) = (locks / "plans").iterdir()
    copy = locks.parent / "copy"
    copy.write_bytes(plan.read_bytes())
    copy.chmod(0o600)
    plan.unlink()
    plan.symlink_to(copy)
    r = run(launcher, settings, "true", cwd=work)
    assert b"plan not replayed: no plan file" in r.stderr
    (locks / "plans").chmod(0o777)
    r = run(launcher, settings, "true", cwd=work)
    assert b"plan not replayed: no plan folder" in r.stderr


def test_the_plan_folder_is_read_only_inside(launcher: Path, settings: Path, work: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Even when it lies inside a writable root, no sandbox can plant a plan."""
    monkeypatch.setenv("AGENT_SANDBOX_LOCK_DIR", str(work / "locks"))
    monkeypatch.setenv("AGENT_SANDBOX_TRACE", "1")
    for _ in range(2):  # the runtime's own folder is never walked: the second run replays
        r = run(launcher, settings, "sh", "-c",
                "echo evil > locks/plans/x; mv locks gone; rm -rf locks; true", cwd=work)
    assert REPLAYED in r.stderr
    assert sorted(p.name for p in (work / "locks" / "plans").iterdir()) != ["x"]
    assert not (work / "locks" / "plans" / "x").exists()
    assert not (work / "gone").exists()


def test_signal_is_forwarded(launcher: Path, locks: Path, settings: Path, work: Path) -> None:
    warm(launcher, settings, work)
    script = ("trap 'echo term > sig; exit 42' TERM; echo ready > ready; "
              "while :; do sleep 0.05; done")
    p = subprocess.Popen([str(launcher), "exec", "--settings", str(settings), "--", "sh", "-c",
                          script], cwd=work, stderr=subprocess.PIPE)
    wait_for_file(work / "ready")
    p.send_signal(signal.SIGTERM)
    assert p.wait(20) == 42
    assert p.stderr is not None and REPLAYED in p.stderr.read()
    assert (work / "sig").read_text() == "term\n"


def test_killed_launcher_takes_the_sandbox_with_it(launcher: Path, locks: Path,
                                                   settings: Path, work: Path) -> None:
    warm(launcher, settings, work)
    m = f"{secrets.randbelow(9000) + 1000}"
    p = subprocess.Popen([str(launcher), "exec", "--settings", str(settings), "--", "sh", "-c",
                          f"sleep 7{m} & sleep 8{m}"], cwd=work)
    deadline = time.monotonic() + 20
    while not running(f"sleep 8{m}"):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    p.kill()
    p.wait()
    deadline = time.monotonic() + 10
    while running(f"sleep 7{m}") or running(f"sleep 8{m}"):
        assert time.monotonic() < deadline, "a sandboxed process outlived the launcher"
        time.sleep(0.05)



def test_deep_new_repository_is_quarantined(launcher: Path, locks: Path, settings: Path,
                                            work: Path, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_SANDBOX_AUDIT_DIR", str(tmp_path / "audit"))
    warm(launcher, settings, work)
    r = run(launcher, settings, "sh", "-c", "mkdir -p a/b/c/d/e/f && cd a/b/c/d/e/f && "
            "git init -q . && echo evil > .git/hooks/pre-commit", cwd=work)
    assert REPLAYED in r.stderr
    deep = work / "a" / "b" / "c" / "d" / "e" / "f"
    assert not (deep / ".git").exists()
    assert next(p.name for p in deep.iterdir()).startswith(".git.sandbox-quarantine")
    assert b"protected path" in r.stderr
    assert any(x.get("event_kind") == "quarantine" for x in audit_records(tmp_path / "audit"))


def test_proxy_started_on_first_connection(launcher: Path, locks: Path, settings: Path,
                                           work: Path, proxy_env: Net, audit_dir: Path) -> None:
    warm(launcher, settings, work)
    m = secrets.token_hex(6)
    r = run(launcher, settings, "sh", "-c",
            f"curl -s -m 5 http://up.example.com:8080/h{m}; echo; "
            f"curl -s -m 5 -x socks5h://127.0.0.1:1080 http://UP.example.com.:8080/s{m}; echo; "
            f"curl -si -m 5 http://bad.example.com:8080/{m}", cwd=work)
    assert REPLAYED in r.stderr
    out = r.stdout.decode()
    assert out.startswith(f"upstream-ok /h{m}")  # nothing of the proxy's own on stdout
    assert f"upstream-ok /h{m}" in out and f"upstream-ok /s{m}" in out
    assert "X-Proxy-Error: blocked-by-denylist" in out
    assert proxy_env.saw(f"/h{m}") and not proxy_env.saw(f"/{m} ")
    kinds = {(x["protocol"], x["allowed"], x["host"]) for x in audit_records(audit_dir)
             if x.get("event") == "proxy.decision"}
    assert ("http", True, "up.example.com") in kinds
    assert ("socks5", True, "up.example.com") in kinds
    assert ("http", False, "bad.example.com") in kinds


def test_other_subcommands_reach_python(launcher: Path, locks: Path) -> None:
    r = subprocess.run([str(launcher), "validate", "--help"], capture_output=True, timeout=60)
    assert r.returncode == 0 and b"Usage" in r.stdout
    r = subprocess.run([str(launcher), "exec", "--timeout", "5", "--settings", "/nonexistent",
                        "--", "true"], capture_output=True, timeout=60)
    assert r.returncode == 125 and b"/nonexistent" in r.stderr
    env = dict(os.environ, AGENT_SANDBOX_NO_PLAN_CACHE="1")
    r = subprocess.run([str(launcher), "exec", "--", "true"], capture_output=True, env=env,
                       timeout=60)
    assert REPLAYED not in r.stderr


@pytest.mark.parametrize("word,ran", [(b"go\n", True), (b"", False), (b"no\n", False),
                                      (b"gogo\n", False)])
def test_gate_runs_the_command_only_on_go(launcher: Path, tmp_path: Path, word: bytes,
                                          ran: bool) -> None:
    """The launcher's ``__gate`` mode: "ready" first, then the command only on "go"."""
    ready_r, ready_w = os.pipe()
    gate_r, gate_w = os.pipe()
    p = subprocess.Popen([str(launcher), "__gate", str(ready_w), str(gate_r), "--", "sh", "-c",
                          "echo ran > out"], cwd=tmp_path, pass_fds=(ready_w, gate_r))
    os.close(ready_w)
    os.close(gate_r)
    assert os.read(ready_r, 16) == b"ready\n"
    os.write(gate_w, word)
    os.close(gate_w)
    rc = p.wait(20)
    assert (tmp_path / "out").exists() == ran
    assert rc == (0 if ran else 125)


def test_file_placeholders_share_one_empty_file(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from agent_sandbox.runtime.exec import Placeholders

    monkeypatch.setenv("AGENT_SANDBOX_LOCK_DIR", str(tmp_path / "locks"))
    items = [(str(tmp_path / n), "f") for n in (".bashrc", ".profile", ".zshrc")]
    items.append((str(tmp_path / ".git"), "d"))
    ph = Placeholders()
    with ph:
        assert ph.create(items) == set()
    inodes = {(tmp_path / n).stat().st_ino for n in (".bashrc", ".profile", ".zshrc")}
    assert len(inodes) == 1 and (tmp_path / ".git").is_dir()
    ph.cleanup()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["locks"]


def test_old_plan_files_are_pruned(tmp_path: Path) -> None:
    import time as _time

    from agent_sandbox.runtime.plancache import prune

    for i in range(10):
        f = tmp_path / f"{i:016x}"
        f.write_text("x")
        os.utime(f, (_time.time() - 100 + i, _time.time() - 100 + i))
    prune(str(tmp_path), keep=4)
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{i:016x}" for i in range(6, 10)]


def test_killed_launcher_never_runs_the_command_and_leaves_nothing(
        launcher: Path, locks: Path, settings: Path, work: Path) -> None:
    """SIGKILL the launcher all through its start: no command runs unsupervised, and
    a bwrap left blocked in its own set-up is reaped by the next run to finish."""
    warm(launcher, settings, work)
    m = f"{secrets.randbelow(9000) + 1000}"
    try:
        for i in range(40):
            p = subprocess.Popen([str(launcher), "exec", "--settings", str(settings), "--",
                                  "sh", "-c", f"sleep 5{m}{i:02d}"], cwd=work,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(0.0004 * i)  # 0 to 16 ms: the launcher's whole start sequence
            p.kill()
            p.wait()
        time.sleep(1)
        assert running(f"sleep 5{m}") == [] and running(f"sh -c sleep 5{m}") == []
        # the killed runs may have left placeholders: runs plan afresh and clean up
        # (not reaping yet) until the plan holds again; then one replays, and reaps
        for _ in range(3):
            r = run(launcher, settings, "true", cwd=work,
                    env=dict(os.environ, AGENT_SANDBOX_REAP_EVERY="100000"))
            assert r.returncode == 0
            if REPLAYED in r.stderr:
                break
        r = run(launcher, settings, "true", cwd=work,
                env=dict(os.environ, AGENT_SANDBOX_REAP_EVERY="0"))
        assert r.returncode == 0 and REPLAYED in r.stderr
        wait_gone(f"sleep 5{m}")
    finally:
        kill_marked(f"sleep 5{m}")



def test_the_command_gets_default_signal_dispositions(launcher: Path, locks: Path,
                                                       settings: Path, work: Path) -> None:
    """The launcher ignores SIGPIPE for itself; the command must not inherit that."""
    warm(launcher, settings, work)
    r = run(launcher, settings, "sh", "-c",
            "grep SigIgn /proc/self/status; yes | head -n 1", cwd=work)
    assert REPLAYED in r.stderr
    ignored = int(r.stdout.split()[1], 16)
    assert not ignored & (1 << (13 - 1))  # SIGPIPE
    assert r.stdout.endswith(b"y\n")


def test_unprivileged_user_replays_too(launcher: Path, tmp_path: Path) -> None:
    """As a user without privileges the proxy ports are opened by a child that joins
    the sandbox's user namespace first; the replay must do the same."""
    if os.geteuid() != 0:
        pytest.skip("switching to an unprivileged user needs root")
    import shutil
    import sys
    import tempfile

    import agent_sandbox

    def usable(python: str) -> bool:
        check = 'exec "$0" -c "import agent_sandbox.runtime.proxy"'
        probe = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                                "/bin/sh", "-c", check, python], capture_output=True, timeout=60)
        return probe.returncode == 0

    d = Path(tempfile.mkdtemp(prefix="agent-sandbox-nb-"))
    try:
        d.chmod(0o777)
        (d / "bin").mkdir()
        # the launcher runs Python (first run, proxy) without privileges: the interpreter
        # must be reachable for that user; when this one lives in root's home, a venv of
        # the system's python3 that finds this package stands in
        python = sys.executable
        if not usable(python):
            system = "/usr/bin/python3"
            if not os.path.exists(system):
                pytest.skip("no interpreter an unprivileged user can run")
            subprocess.run([system, "-m", "venv", "--without-pip", str(d / "venv")], check=True)
            (site,) = (d / "venv" / "lib").glob("python3*/site-packages")
            (site / "agent_sandbox.pth").write_text(
                str(Path(agent_sandbox.__file__).resolve().parents[1]) + "\n")
            subprocess.run(["chmod", "-R", "a+rX", str(d / "venv")], check=True)
            python = str(d / "venv" / "bin" / "python")
            if not usable(python):
                pytest.skip("this package cannot be read by an unprivileged user here")
        shutil.copy2(launcher, d / "bin" / "sandbox")
        (d / "bin" / "sandbox-py").write_text(
            f"#!{python}\nimport sys\nfrom agent_sandbox.cli.entry import main\n"
            "sys.exit(main())\n")
        (d / "bin" / "sandbox-py").chmod(0o755)
        (d / "bin").chmod(0o755)
        work = d / "work"
        work.mkdir()
        work.chmod(0o777)
        s = write_settings(d / "s.json", {"network": {"allowedDomains": ["example.com"]},
                                          "filesystem": {"allowWrite": [str(work)]}})
        s.chmod(0o644)
        env = dict(os.environ, HOME=str(work), AGENT_SANDBOX_AUDIT_DIR=str(work / "audit"),
                   AGENT_SANDBOX_TRACE="1")
        env.pop("AGENT_SANDBOX_LOCK_DIR", None)
        argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                str(d / "bin" / "sandbox"), "exec", "--settings", str(s), "--", "sh", "-c",
                "id -u; echo hi > f; curl -s -m 5 -o /dev/null -w '%{http_code}' "
                "http://other.test/"]
        for _ in range(3):  # the first run writes f and audit/: the second plans again
            r = subprocess.run(argv, cwd=work, env=env, capture_output=True, timeout=60)
        assert REPLAYED in r.stderr, r.stderr
        assert r.stdout.decode().split()[:2] == ["65534", "403"], r.stderr
        assert (work / "f").read_text() == "hi\n"
        recs = audit_records(work / "audit")
        assert any(x.get("host") == "other.test" and not x["allowed"] for x in recs)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_the_runtime_itself_is_read_only_inside(launcher: Path, locks: Path, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Even with the installation inside a writable root, the sandboxed command cannot
    replace the launcher, the interpreter's files or the package."""
    import sys

    import agent_sandbox

    package = Path(agent_sandbox.__file__).parent
    prefix = Path(sys.prefix)
    # the folder that holds both is writable: the installation lies inside it
    common = Path(os.path.commonpath([package, prefix]))
    s = write_settings(tmp_path / "wide.json", {"filesystem": {"allowWrite": [str(common)]}})
    script = (f"touch {prefix}/bin/x-probe; echo prefix=$?; touch {package}/x-probe; "
              f"echo package=$?; touch {common}/x-probe-$$ && echo root=$? && "
              f"rm {common}/x-probe-$$")
    for _ in range(2):  # planned, then replayed
        r = run(launcher, s, "sh", "-c", script, cwd=tmp_path)
        out = r.stdout.decode()
        assert "root=0" in out, (out, r.stderr)
        assert "prefix=0" not in out and "package=0" not in out
        assert not (prefix / "bin" / "x-probe").exists()
        assert not (package / "x-probe").exists()
    assert REPLAYED in r.stderr


def test_default_settings_are_replayed_too(launcher: Path, locks: Path, settings: Path,
                                           work: Path, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Without --settings: the user's ~/.srt-settings.json (when the host has none)."""
    if Path("/etc/agent-sandbox/srt-settings.json").exists():
        pytest.skip("this host has system settings, which win over the user's")
    home = tmp_path / "home"
    home.mkdir()
    (home / ".srt-settings.json").write_text(settings.read_text())
    monkeypatch.setenv("HOME", str(home))
    argv = [str(launcher), "exec", "--", "sh", "-c", f"cat {tmp_path}/secret/key; echo ok"]
    for _ in range(2):
        r = subprocess.run(argv, cwd=work, capture_output=True, timeout=60)
        assert r.stdout == b"ok\n", r.stderr
    assert REPLAYED in r.stderr


@pytest.mark.parametrize("path", ["launcher", "python"])
def test_a_killed_runs_sweep_is_done_by_the_next_run(
        launcher: Path, locks: Path, settings: Path, work: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    """A supervisor killed before its sweep (SIGKILL, the OOM killer) must not leave a
    hook the command planted deep in a repository: the next run to finish disarms it."""
    monkeypatch.setenv("AGENT_SANDBOX_AUDIT_DIR", str(tmp_path / "audit"))
    import sys

    warm(launcher, settings, work)
    head = [str(launcher)] if path == "launcher" else [sys.executable, "-m", "agent_sandbox"]
    deep = work / "a" / "b" / "c" / "d" / "e" / "f"
    p = subprocess.Popen([*head, "exec", "--settings", str(settings), "--", "sh", "-c",
                          f"mkdir -p {deep} && cd {deep} && git init -q . && "
                          "echo evil > .git/hooks/pre-commit && touch ../planted && sleep 60"],
                         cwd=work, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 20
    while not (deep.parent / "planted").exists():
        assert time.monotonic() < deadline and p.poll() is None
        time.sleep(0.02)
    p.kill()
    err = p.communicate()[1]
    assert path == "python" or REPLAYED in err
    assert (deep / ".git" / "hooks" / "pre-commit").exists()  # nobody swept: killed
    assert list((locks / "owed").iterdir())
    time.sleep(0.2)  # past the clock slack: the next run's own sweep would not see it
    r = run(launcher, settings, "true", cwd=work)
    assert r.returncode == 0
    assert not (deep / ".git").exists()
    assert any(x.name.startswith(".git.sandbox-quarantine") for x in deep.iterdir())
    assert b"an earlier run ended before its check" in r.stderr
    assert any(x.get("event_kind") == "quarantine" and x.get("late")
               for x in audit_records(tmp_path / "audit"))
    assert not list((locks / "owed").iterdir())


def test_a_sandbox_that_cannot_start_is_retried_by_python_and_explained(
        launcher: Path, locks: Path, settings: Path, work: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """When bwrap fails under a replayed plan, the command has not started: the launcher
    ends that sandbox and the Python runtime tries again, and names the cause."""
    flag = tmp_path / "fail"
    fake = tmp_path / "bwrap"
    fake.write_text(f"#!/bin/sh\n[ -e {flag} ] && {{ echo 'bwrap: No permissions to create "
                    "new namespace' >&2; exit 1; }\nexec /usr/bin/bwrap \"$@\"\n")
    fake.chmod(0o755)
    monkeypatch.setenv("AGENT_SANDBOX_BWRAP", str(fake))
    warm(launcher, settings, work)
    assert REPLAYED in run(launcher, settings, "true", cwd=work).stderr
    flag.touch()
    r = run(launcher, settings, "sh", "-c", "echo RAN", cwd=work)
    assert r.returncode == 125 and b"RAN" not in r.stdout
    assert b"plan not replayed: bubblewrap could not create the sandbox" in r.stderr
    assert b"sandbox exec: the sandbox could not start" in r.stderr  # the Python runtime's
    assert sorted(p.name for p in work.iterdir()) == []  # no placeholder left


def test_replayed_plan_keeps_credentials_out(launcher: Path, locks: Path, tmp_path: Path,
                                             work: Path) -> None:
    """srt's ``credentials`` section holds on the replay path too (the cached
    command line unsets the variables; the file stays hidden)."""
    (work / ".netrc").write_text("machine up.example.com password NETRCSECRET\n")
    s = write_settings(tmp_path / "creds.json", {
        "network": {"allowedDomains": []},
        "filesystem": {"denyRead": [], "allowWrite": [str(work)], "denyWrite": []},
        "credentials": {"files": [{"path": str(work / ".netrc"), "mode": "deny"}],
                        "envVars": [{"name": "API_TOKEN", "mode": "mask"}],
                        "allowPlaintextInject": True},
    })
    env = dict(os.environ, API_TOKEN="TOKENSECRET")
    warm(launcher, s, work)
    r = run(launcher, s, "sh", "-c", "echo token=${API_TOKEN-unset}; cat .netrc", cwd=work,
            env=env)
    assert REPLAYED in r.stderr
    assert b"token=unset" in r.stdout
    assert b"SECRET" not in r.stdout + r.stderr


def test_replayed_plan_proxy_chains_through_the_callers_parent(
        launcher: Path, locks: Path, settings: Path, work: Path, proxy_env: Net,
        tmp_path: Path) -> None:
    """The proxy the launcher starts reads the caller's HTTPS_PROXY as srt does
    (parentProxy's fallback), like the Python runtime's."""
    m = secrets.token_hex(6)
    port = free_port()
    with parent_proxy(tmp_path, proxy_env, ["up.example.com"], f"127.0.0.1:{port}") as parent:
        warm(launcher, settings, work)
        env = dict(os.environ, HTTPS_PROXY=f"http://127.0.0.1:{port}")
        r = run(launcher, settings, "sh", "-c",
                f"curl -s -m 5 -p http://up.example.com:8080/v{m}", cwd=work, env=env)
        assert REPLAYED in r.stderr
        assert f"upstream-ok /v{m}".encode() in r.stdout
        assert ("http-connect", "up.example.com", True) in decisions(parent)


def test_ensure_builds_only_when_something_changed(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """``launcher ensure``, what the role and the pyinfra deploy run on every converge."""
    from agent_sandbox.launcher import ensure

    bindir = tmp_path / "venv" / "bin"
    bindir.mkdir(parents=True)
    entry = bindir / "sandbox-py"
    entry.write_text("#!/bin/sh\necho python entry point\n")
    entry.chmod(0o755)
    assert ensure(bindir) == "installed"
    assert (bindir / "sandbox").read_bytes()[:4] == b"\x7fELF"
    assert ensure(bindir) == "unchanged"
    # a reinstall of the package puts the Python script back: build again
    (bindir / "sandbox").write_text("#!/usr/bin/python3\n")
    assert ensure(bindir) == "installed"
    # a new entry point (another version of the package): build again
    entry.write_text("#!/bin/sh\necho another version\n")
    assert ensure(bindir) == "installed" and ensure(bindir) == "unchanged"
    # no compiler: nothing changes, and that is not an error
    (bindir / "sandbox").write_text("#!/usr/bin/python3\n")
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert ensure(bindir) == "no-compiler"
    assert (bindir / "sandbox").read_text() == "#!/usr/bin/python3\n"
