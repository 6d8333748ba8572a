"""The host install steps both front ends call (``sandbox install proxy-service``,
``sandbox install repo``) are idempotent and say so: ``changed`` when they did
something, ``unchanged`` on the next run, ``changed`` again when their input
changed. Judged from the host: pids, files and the calls made.

The detached supervisor runs a real process from a unit file; the systemd path
runs against a stand-in ``systemctl`` (a script that keeps unit state in files),
since no systemd is PID 1 here (the Molecule scenario runs the real one). The
owner switch of ``install repo`` under root is exercised in the Molecule
scenario (a developer account in a container)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent_sandbox.deploy import pyinfra as deploy
from agent_sandbox.errors import InstallError, SandboxError
from agent_sandbox.install import proxy_service, repository

from .conftest import DEMO
from .test_plugin import filters

SLEEPER = "import signal, sys, time; signal.signal(signal.SIGTERM, lambda *a: sys.exit(0)); " \
          "time.sleep(600)"


def write_unit(tmp: Path, settings: Path, name: str = "agent-sandbox-test.service") -> Path:
    unit = tmp / name
    unit.write_text(
        "[Service]\nType=simple\n"
        f"ExecStart={sys.executable} -c '{SLEEPER}' --settings {settings}\n"
        "RuntimeDirectory=agent-sandbox-test\n")
    unit.chmod(0o644)
    return unit


@pytest.fixture
def detached(tmp_path: Path):  # type: ignore[no-untyped-def]
    settings = tmp_path / "settings.json"
    settings.write_text('{"network": {}}\n')
    unit = proxy_service.read_unit(str(write_unit(tmp_path, settings)))
    run_dir, log_dir = tmp_path / "run", tmp_path / "log"
    run_dir.mkdir()

    def step(**kw: bool) -> bool:
        return proxy_service.run_detached(unit, run_dir=str(run_dir), log_dir=str(log_dir),
                                          settle=0.2, **kw)

    def pid() -> int:
        return int((run_dir / "agent-sandbox-test.pid").read_text())

    yield step, pid, settings, run_dir
    try:
        os.kill(pid(), signal.SIGKILL)
    except (OSError, ValueError):
        pass


def alive(pid: int) -> bool:
    try:
        return bool(Path(f"/proc/{pid}/cmdline").read_bytes())
    except OSError:
        return False


def test_detached_proxy_service_is_idempotent(detached) -> None:  # type: ignore[no-untyped-def]
    step, pid, settings, run_dir = detached
    assert step() is True
    first = pid()
    assert alive(first)
    assert (run_dir / "agent-sandbox-test").is_dir()  # RuntimeDirectory=
    assert step() is False and pid() == first  # unchanged: same process
    settings.write_text('{"network": {"allowedDomains": ["example.com"]}}\n')
    assert step() is True  # new settings: restarted
    second = pid()
    assert second != first and alive(second)
    for _ in range(50):
        if not alive(first):
            break
        time.sleep(0.05)
    assert not alive(first)
    assert step() is False
    assert step(restart=True) is True and pid() != second
    third = pid()
    unit_file = Path(str(settings.parent / "agent-sandbox-test.service"))
    unit_file.write_text(unit_file.read_text() + "# changed\n")  # a new unit: restarted
    assert step() is True and pid() != third
    assert step() is False


def test_detached_proxy_service_restarts_a_dead_proxy(detached) -> None:  # type: ignore[no-untyped-def]
    step, pid, _, _ = detached
    assert step() is True
    os.kill(pid(), signal.SIGKILL)
    for _ in range(50):
        if not alive(pid()):
            break
        time.sleep(0.05)
    assert step() is True and alive(pid())


def test_a_proxy_that_exits_at_once_fails_the_step(tmp_path: Path) -> None:
    settings = tmp_path / "s.json"
    settings.write_text("{}")
    unit = tmp_path / "bad.service"
    unit.write_text(f"[Service]\nExecStart=/bin/false --settings {settings}\n")
    with pytest.raises(InstallError, match="exited at once"):
        proxy_service.run_detached(proxy_service.read_unit(str(unit)), run_dir=str(tmp_path),
                                   log_dir=str(tmp_path / "log"), settle=0.3)


@pytest.mark.parametrize("text,problem", [
    ("[Service]\nType=simple\n", "no ExecStart"),
    ("[Service]\nExecStart=proxy --settings /x\n", "absolute"),
    ("[Service]\nExecStart=/bin/proxy --audit-dir /x\n", "--settings"),
    ("[Service]\nExecStart=/bin/p --settings /x\nRuntimeDirectory=../etc\n", "relative"),
])
def test_a_unit_the_step_cannot_run_is_refused(tmp_path: Path, text: str, problem: str) -> None:
    unit = tmp_path / "u.service"
    unit.write_text(text)
    with pytest.raises(InstallError, match=problem):
        proxy_service.read_unit(str(unit))


@pytest.mark.skipif(os.geteuid() != 0, reason="the ownership check applies to root")
def test_root_refuses_a_unit_others_may_write(tmp_path: Path) -> None:
    unit = tmp_path / "u.service"
    unit.write_text("[Service]\nExecStart=/bin/p --settings /x\n")
    unit.chmod(0o666)
    with pytest.raises(InstallError, match="owned by root"):
        proxy_service.read_unit(str(unit))
    unit.chmod(0o644)
    os.chown(unit, 65534, 65534)
    with pytest.raises(InstallError, match="owned by root"):
        proxy_service.read_unit(str(unit))


FAKE_SYSTEMCTL = r"""#!/bin/sh
# A stand-in systemctl: unit state in files under $STATE; every call logged.
echo "$*" >> "$STATE/calls"
case "$1" in
  show) if [ -e "$STATE/loaded" ]; then echo LoadState=loaded; else echo LoadState=not-found; fi
        stale=no; [ -e "$STATE/stale" ] && stale=yes; echo "NeedDaemonReload=$stale" ;;
  daemon-reload) touch "$STATE/loaded"; rm -f "$STATE/stale" ;;
  is-enabled) if [ -e "$STATE/enabled" ]; then echo enabled; else echo disabled; exit 1; fi ;;
  enable) touch "$STATE/enabled" ;;
  is-active) if [ -e "$STATE/active" ]; then echo active; else echo inactive; exit 3; fi ;;
  start|restart) touch "$STATE/active"; echo x >> "$STATE/starts" ;;
esac
"""


def test_systemd_proxy_service_is_idempotent(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    state = tmp_path / "units"
    state.mkdir()
    fake = tmp_path / "systemctl"
    fake.write_text(FAKE_SYSTEMCTL)
    fake.chmod(0o755)
    monkeypatch.setenv("STATE", str(state))
    settings = tmp_path / "settings.json"
    settings.write_text("{}")
    unit = proxy_service.read_unit(str(write_unit(tmp_path, settings)))

    def step(**kw: bool) -> bool:
        return proxy_service.run_systemd(unit, state_dir=str(tmp_path / "lib"),
                                         systemctl=[str(fake)], **kw)

    def mutating() -> list[str]:
        calls = (state / "calls").read_text().splitlines()
        (state / "calls").write_text("")
        return [c.split()[0] for c in calls if c.split()[0] not in ("show", "is-enabled",
                                                                    "is-active")]

    assert step() is True
    assert mutating() == ["daemon-reload", "enable", "start"]
    assert step() is False
    assert mutating() == []
    settings.write_text('{"changed": true}')
    assert step() is True
    assert mutating() == ["restart"]
    (state / "stale").touch()  # the unit file changed on disk
    assert step() is True
    assert mutating() == ["daemon-reload", "restart"]
    assert step() is False and mutating() == []


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agent_sandbox", *args], capture_output=True,
                          text=True, timeout=120, check=False)


def test_install_repo_is_idempotent(tmp_path: Path) -> None:
    repo = tmp_path / "app"
    repo.mkdir()
    first = run_cli("install", "repo", str(repo), "--claude", "--mcp")
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines()[-1] == "changed"
    start = repo / ".sandbox" / "policy.yml"
    assert start.read_text() == repository.STARTER_POLICY
    assert (repo / ".sandbox" / "policy.json").is_file()
    assert (repo / ".claude" / "settings.json").is_file()
    snapshot = {p: p.read_bytes() for p in repo.rglob("*") if p.is_file()}
    second = run_cli("install", "repo", str(repo), "--claude", "--mcp")
    assert second.returncode == 0, second.stderr
    assert second.stdout.splitlines()[-1] == "unchanged"
    assert {p: p.read_bytes() for p in repo.rglob("*") if p.is_file()} == snapshot


def test_install_repo_keeps_an_existing_policy_layer(tmp_path: Path) -> None:
    repo = tmp_path / "app"
    (repo / ".sandbox").mkdir(parents=True)
    (repo / ".sandbox" / "policy.yml").write_text("version: 1\n# mine\n")
    assert repository.install(str(repo), ["--mcp"]) is True
    assert (repo / ".sandbox" / "policy.yml").read_text() == "version: 1\n# mine\n"


@pytest.mark.parametrize("make,flags,problem", [
    (False, ["--mcp"], "No such file"),
    (True, ["--mcp", "--everything"], "unknown sandbox init flags"),
])
def test_install_repo_refuses_bad_input(tmp_path: Path, make: bool, flags: list[str],
                                        problem: str) -> None:
    repo = tmp_path / "app"
    if make:
        repo.mkdir()
    with pytest.raises(InstallError, match=problem):
        repository.install(str(repo), flags)
    assert not (repo / ".sandbox").exists()
    assert issubclass(InstallError, SandboxError)


def test_install_repo_cli_reports_a_missing_repository(tmp_path: Path) -> None:
    proc = run_cli("install", "repo", str(tmp_path / "missing"), "--mcp")
    assert proc.returncode == 1
    assert "missing" in proc.stderr and "unchanged" not in proc.stdout


def test_both_front_ends_run_the_same_steps() -> None:
    """The pyinfra deploy and the roles hand the installer the steps one module
    lists (agent_sandbox.deploy.host_steps), with the flags one function works out
    from the spec."""
    from agent_sandbox.fleet import FleetRenderer

    fleet = FleetRenderer.from_path(str(DEMO))
    spec, facts = fleet.spec_for("sandbox-demo-1"), fleet.facts("sandbox-demo-1")
    flags = repository.init_flags(spec)
    assert flags[-1] == "--mcp" and all(f in repository.FLAGS for f in flags)
    _, artifacts = deploy.rendered(str(DEMO), "sandbox-demo-1")
    bundle = deploy.host_bundle(artifacts, facts, spec, install_runtime=True)
    sandbox = "/opt/agent-sandbox/venv/bin/sandbox"
    (init,) = bundle["early_steps"]
    assert init["argv"] == [sandbox, "install", "repo", "/home/alice/src/app", "--policy",
                            repository.STARTER_POLICY, *flags]
    assert init["unless_exist"] == ["/home/alice/src/app/.sandbox/policy.json",
                                    "/home/alice/src/app/.sandbox/policy.yml"]
    apparmor, proxy, *units = bundle["late_steps"]
    assert [u["name"] for u in units] == ["start agent-sandbox-drift.timer"]
    assert units[0]["after_change"]["targets"] == [
        "/etc/systemd/system/agent-sandbox-drift.service",
        "/etc/systemd/system/agent-sandbox-drift.timer"]
    assert apparmor["argv"] == [sandbox, "install", "apparmor-profile", "--profile",
                                "/etc/apparmor.d/agent-sandbox-bwrap", "--when", "auto"]
    assert proxy["argv"][:5] == [sandbox, "install", "proxy-service", "--unit",
                                 "/etc/systemd/system/agent-sandbox-proxy.service"]
    assert proxy["after_upgrade"] == ["--restart"]
    # the roles' filters return the same steps
    selected = filters.agent_sandbox_select(filters.agent_sandbox_render(str(DEMO),
                                                                         "sandbox-demo-1"))
    assert filters.agent_sandbox_service_steps(
        selected, "/opt/agent-sandbox", "/var/log/agent-sandbox") == bundle["late_steps"]
    assert filters.agent_sandbox_repo_steps(
        ["/home/alice/src/app"], flags, "/opt/agent-sandbox",
        repository.STARTER_POLICY) == bundle["early_steps"]
    # the agents role's part, as the roles describe it, gives the same steps
    part = {"inventory": str(DEMO), "host": "sandbox-demo-1", "kinds": [],
            "repositories": ["/home/alice/src/app"], "init_flags": [],
            "prefix": "/opt/agent-sandbox", "policy": repository.STARTER_POLICY}
    assert filters.agent_sandbox_bundle_parts([part])["early_steps"] == bundle["early_steps"]
    roles = Path(__file__).resolve().parents[2] / "roles"
    assert "agent_sandbox_bundle_parts" in (roles / "sandbox_agents/tasks/agents.yml"
                                            ).read_text()
    assert "agent_sandbox_service_steps" in (roles / "sandbox_runtime/tasks/bundle.yml"
                                             ).read_text()
    for tasks in roles.glob("*/tasks/*.yml"):  # no role carries its own service shell
        assert "ansible.builtin.shell" not in tasks.read_text(), tasks


def test_apparmor_profile_loads_only_where_needed_and_once(tmp_path: Path) -> None:
    from agent_sandbox.install import apparmor

    calls = tmp_path / "calls"
    loaded = tmp_path / "profiles"
    parser = tmp_path / "apparmor_parser"
    # a stand-in parser: logs its arguments and "loads" the profile into the list
    parser.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n'
                      f'echo "bwrap (enforce)" >> {loaded}\n')
    parser.chmod(0o755)
    profile = tmp_path / "agent-sandbox-bwrap"
    profile.write_text("abi <abi/4.0>,\ninclude <tunables/global>\n"
                       "profile bwrap /usr/bin/bwrap flags=(unconfined) {\n  userns,\n}\n")
    flag = tmp_path / "restrict"

    def step(when: str = "auto") -> bool:
        return apparmor.install(str(profile), when=when, flag=str(flag), profiles=str(loaded),
                                state_dir=str(tmp_path / "state"), parser=[str(parser)])

    def n_calls() -> int:
        return len(calls.read_text().splitlines()) if calls.exists() else 0

    assert step() is False and n_calls() == 0  # no flag: not restricted
    flag.write_text("0\n")
    assert step() is False and n_calls() == 0
    flag.write_text("1\n")
    assert step() is True and n_calls() == 1
    assert step() is False and n_calls() == 1  # loaded as it is
    profile.write_text(profile.read_text().replace("userns,", "userns,\n  # changed"))
    assert step() is True and n_calls() == 2
    loaded.write_text("")  # the kernel lost it (a reboot)
    assert step() is True and n_calls() == 3
    flag.write_text("0\n")
    assert step("always") is False  # loaded and unchanged: nothing to do
    loaded.write_text("")
    assert step("always") is True and n_calls() == 4
