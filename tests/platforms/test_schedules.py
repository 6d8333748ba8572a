"""The scheduled jobs (``render.schedules``): the drift check and ansible-pull as a
systemd service and timer (checked by ``systemd-analyze verify``), a LaunchDaemon
(read with plistlib) and a Scheduled Task (read as XML in the Task Scheduler's
namespace), on and off as the spec says; golden files for each form."""

from __future__ import annotations

import plistlib
import shlex
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from pydantic import ValidationError

from agent_sandbox import contract
from agent_sandbox.inventory import HostFacts, User
from agent_sandbox.render import render, schedules
from agent_sandbox.spec.models import Spec

from .test_macos import _golden

NS = {"t": schedules.TASK_NS}
PULL = {"repository": "https://git.example.com/fleet.git", "branch": "laptops",
        "every": "30m", "inventory": "inventories/laptops"}
FACTS = {os_: HostFacts(name=f"lap-{os_}", os=os_, users=(User("dev", "/home/dev"),))
         for os_ in ("linux", "macos", "windows")}


def spec(**platforms: dict) -> Spec:
    return Spec.model_validate({"version": 1, "platforms": platforms})


def scheduled(s: Spec, os_: str) -> dict[str, bytes]:
    return {t: a.content for t, a in render(s, FACTS[os_]).items()
            if a.kind in ("drift-schedule", "pull-schedule")}


def test_the_drift_check_is_on_by_default_and_the_pull_off() -> None:
    s = spec()
    assert sorted(scheduled(s, "linux")) == [contract.DRIFT_UNIT + ".service",
                                             contract.DRIFT_UNIT + ".timer"]
    assert list(scheduled(s, "macos")) == ["/Library/LaunchDaemons/com.agent-sandbox.drift.plist"]
    assert list(scheduled(s, "windows")) == [
        "C:/Program Files/agent-sandbox/tasks/agent-sandbox-drift.xml"]
    off = spec(linux={"drift_check": {"enabled": False}})
    assert scheduled(off, "linux") == {}


def test_linux_units_run_verify_drift_and_ansible_pull() -> None:
    s = spec(linux={"drift_check": {"every": "2h"}, "pull": PULL})
    units = {t.rsplit("/", 1)[1]: c.decode() for t, c in scheduled(s, "linux").items()}
    assert set(units) == {"agent-sandbox-drift.service", "agent-sandbox-drift.timer",
                          "agent-sandbox-pull.service", "agent-sandbox-pull.timer"}
    python = FACTS["linux"].python
    assert f"ExecStart={python} -I -m agent_sandbox verify --drift" in \
        units["agent-sandbox-drift.service"].splitlines()
    assert "OnUnitInactiveSec=7200s" in units["agent-sandbox-drift.timer"].splitlines()
    assert "Unit=agent-sandbox-drift.service" in units["agent-sandbox-drift.timer"]
    assert ("ExecStart=/opt/agent-sandbox/venv/bin/ansible-pull "
            "-U https://git.example.com/fleet.git -C laptops -d /var/lib/agent-sandbox/pull "
            "-i inventories/laptops playbooks/linux.yml --limit lap-linux"
            ) in units["agent-sandbox-pull.service"].splitlines()
    # the drift check after every pull, whatever its outcome: the host reports
    assert f"ExecStopPost={python} -I -m agent_sandbox verify --drift" in \
        units["agent-sandbox-pull.service"].splitlines()
    assert "ExecStopPost" not in units["agent-sandbox-drift.service"]
    assert "OnUnitInactiveSec=1800s" in units["agent-sandbox-pull.timer"].splitlines()
    for name, text in units.items():
        _golden(f"schedules/{name}", text.encode())


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze missing")
def test_linux_units_pass_systemd_analyze(tmp_path: Path) -> None:
    s = spec(linux={"pull": PULL})
    for target, content in scheduled(s, "linux").items():
        (tmp_path / target.rsplit("/", 1)[1]).write_bytes(content)
    files = sorted(str(p) for p in tmp_path.iterdir())
    r = subprocess.run(["systemd-analyze", "verify", *files], capture_output=True, text=True)
    # the host's interpreter and ansible-pull are not installed here
    bad = [x for x in r.stderr.splitlines() if "agent-sandbox-" in x
           and "Command" not in x and "not executable" not in x]
    assert not bad, r.stderr


def test_macos_launch_daemons() -> None:
    s = spec(macos={"pull": PULL})
    docs = {t: plistlib.loads(c) for t, c in scheduled(s, "macos").items()}
    drift = docs["/Library/LaunchDaemons/com.agent-sandbox.drift.plist"]
    assert drift["Label"] == contract.DRIFT_LABEL
    assert drift["ProgramArguments"] == [FACTS["macos"].python, "-I", "-m", "agent_sandbox",
                                         "verify", "--drift"]
    assert drift["StartInterval"] == 3600 and drift["RunAtLoad"] is False
    assert "UserName" not in drift  # root's, as the record it writes must be
    pull = docs["/Library/LaunchDaemons/com.agent-sandbox.pull.plist"]
    # the pull, then the drift check whatever the pull's outcome (the host reports)
    shell, flag, script = pull["ProgramArguments"]
    assert (shell, flag) == ("/bin/sh", "-c")
    first, then = script.split("; exec ")
    assert shlex.split(first)[:3] == ["/opt/agent-sandbox/venv/bin/ansible-pull", "-U",
                                      PULL["repository"]]
    assert "playbooks/macos.yml" in shlex.split(first)
    assert shlex.split(first)[-2:] == ["--limit", "lap-macos"]
    assert shlex.split(then) == drift["ProgramArguments"]
    assert pull["StartInterval"] == 1800
    for target, content in scheduled(s, "macos").items():
        _golden("schedules/" + target.rsplit("/", 1)[1], content)


def test_windows_scheduled_tasks() -> None:
    s = spec(windows={"pull": PULL, "drift_check": {"every": "90m"}})
    docs = {t: ET.fromstring(c) for t, c in scheduled(s, "windows").items()}
    drift = docs["C:/Program Files/agent-sandbox/tasks/agent-sandbox-drift.xml"]
    assert drift.tag == f"{{{schedules.TASK_NS}}}Task" and drift.get("version") == "1.2"
    assert drift.findtext("t:Triggers/t:TimeTrigger/t:Repetition/t:Interval",
                          namespaces=NS) == "PT90M"
    assert drift.findtext("t:Principals/t:Principal/t:UserId", namespaces=NS) == "S-1-5-18"
    assert drift.findtext("t:Actions/t:Exec/t:Command", namespaces=NS) == \
        "C:\\Program Files\\agent-sandbox\\venv\\Scripts\\python.exe"
    assert drift.findtext("t:Actions/t:Exec/t:Arguments", namespaces=NS) == \
        "-I -m agent_sandbox verify --drift"
    principal = drift.find("t:Principals/t:Principal", NS)
    assert principal is not None
    assert drift.find("t:Actions", NS).get("Context") == principal.get("id")  # type: ignore[union-attr]
    pull = docs["C:/Program Files/agent-sandbox/tasks/agent-sandbox-pull.xml"]
    assert pull.findtext("t:Actions/t:Exec/t:Arguments", namespaces=NS) == (
        "-U https://git.example.com/fleet.git -C laptops -d C:/ProgramData/agent-sandbox/pull "
        "-i inventories/laptops playbooks/windows.yml --limit lap-windows")
    runs = pull.findall("t:Actions/t:Exec", NS)
    assert len(runs) == 2 and runs[1].findtext("t:Arguments", namespaces=NS) == \
        "-I -m agent_sandbox verify --drift"
    assert len(drift.findall("t:Actions/t:Exec", NS)) == 1
    for target, content in scheduled(s, "windows").items():
        _golden("schedules/" + target.rsplit("/", 1)[1], content)


def test_iso_durations() -> None:
    assert [schedules.iso_duration(x) for x in (3600, 7200, 1800, 90, 86400)] == [
        "PT1H", "PT2H", "PT30M", "PT90S", "PT24H"]


@pytest.mark.parametrize("pull", [
    {"repository": "https://x.test/a.git"},  # no inventory
    {"repository": "https://x.test/a b.git", "inventory": "i"},
    {"repository": "https://x.test/a.git", "inventory": "i", "branch": "a;b"},
    {"repository": "https://x.test/a.git", "inventory": "i", "directory": "relative"},
    {"repository": "https://x.test/a.git", "inventory": "../up"},
    {"repository": "https://x.test/$HOME", "inventory": "i"},
    {"every": "10s"},
])
def test_unsafe_or_incomplete_pull_settings_are_refused(pull: dict) -> None:
    with pytest.raises(ValidationError):
        spec(linux={"pull": pull})
