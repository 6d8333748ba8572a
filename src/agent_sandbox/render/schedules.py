"""The host's scheduled jobs, in each platform's own scheduler:

- the drift check, ``sandbox verify --drift`` (installed files against the manifest
  and the host's isolation checks, each run recorded in the host's audit), on by
  default (``platforms.<os>.drift_check``);
- ``ansible-pull`` for hosts that fetch their own configuration, off until
  ``platforms.<os>.pull.repository`` is set.

On Linux a systemd service and timer (``agent-sandbox-drift``, ``agent-sandbox-pull``),
on macOS a LaunchDaemon, on Windows a Scheduled Task's XML (registered by the
``sandbox_windows`` role). Each runs as root (SYSTEM on Windows).

Pure: (spec, facts) -> artifacts. Never writes files or starts processes.
"""

from __future__ import annotations

import plistlib
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable

from .. import contract
from ..inventory import HostFacts
from ..spec.models import Spec
from ..spec.schedules import DriftCheck, Pull
from . import Artifact, RenderError
from .templating import render_template

TASK_NS = "http://schemas.microsoft.com/windows/2004/02/mit/task"
SYSTEM_SID = "S-1-5-18"  # LocalSystem
PULL_DIR = {"linux": f"{contract.HOST_STATE_DIR}/pull", "macos": f"{contract.HOST_STATE_DIR}/pull",
            "windows": f"{contract.WINDOWS_STATE_DIR}/pull"}
# where launchd finds ansible-pull (Homebrew's folders, then the system's)
LAUNCHD_PATH = "/opt/homebrew/bin:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
_HOST_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def drift_argv(facts: HostFacts) -> list[str]:
    """The scheduled drift check: the host's own interpreter, isolated."""
    return contract.self_argv(facts.python, "verify", "--drift")


def pull_argv(pull: Pull, facts: HostFacts) -> list[str]:
    """``ansible-pull`` for this host, from the spec's repository and branch: the
    runtime's own (its ``pull`` extra, beside the host's interpreter) where the
    runtime is a virtualenv, running the host's own kind of playbook."""
    if not _HOST_NAME.match(facts.name):
        raise RenderError(f"host name {facts.name!r} cannot be passed to --limit unquoted")
    assert pull.repository is not None
    program = "ansible-pull"
    if facts.os != "windows" and facts.python.startswith("/"):
        program = f"{facts.python.rsplit('/', 1)[0]}/ansible-pull"
    return [program, "-U", pull.repository, "-C", pull.branch,
            "-d", pull.directory or PULL_DIR[facts.os], "-i", pull.inventory,
            f"playbooks/{facts.os}.yml", "--limit", facts.name]


def _jobs(spec: Spec, facts: HostFacts) -> list[tuple[str, str, float, list[str]]]:
    """(name, kind, every, argv) of each job this host runs. A pull is followed by a
    drift check whatever the pull's outcome (``then_argv``), so a pulling host
    reports as a pushed one does: in its audit, ``sandbox status`` and serve."""
    section = getattr(spec.platforms, facts.os, None)
    if section is None:
        return []
    drift: DriftCheck = section.drift_check
    pull: Pull = section.pull
    jobs = []
    if drift.enabled:
        jobs.append(("drift", "drift-schedule", drift.every, drift_argv(facts)))
    if pull.repository:
        jobs.append(("pull", "pull-schedule", pull.every, pull_argv(pull, facts)))
    return jobs


# ------------------------------------------------------------------------ Linux

_DESCRIPTION = {"drift": "agent-sandbox drift check, sandbox verify --drift",
                "pull": "agent-sandbox configuration pull, ansible-pull"}
_UNIT = {"drift": contract.DRIFT_UNIT, "pull": contract.PULL_UNIT}
_LABEL = {"drift": contract.DRIFT_LABEL, "pull": contract.PULL_LABEL}


def then_argv(job: str, facts: HostFacts) -> list[str]:
    """What runs after the job, however it ended: the drift check after a pull."""
    return drift_argv(facts) if job == "pull" else []


def systemd_units(job: str, every: float, argv: list[str],
                  then: list[str] | None = None) -> tuple[bytes, bytes]:
    """The job's service and timer (``then`` as the service's ExecStopPost)."""
    name = _UNIT[job].rsplit("/", 1)[1]
    seconds = int(every)
    after = "network-online.target" if job == "pull" else "local-fs.target"
    service = render_template("linux/agent-sandbox-scheduled.service.j2", unit=name,
                              description=_DESCRIPTION[job], argv=argv, after=after,
                              then=then or [])
    timer = render_template("linux/agent-sandbox-scheduled.timer.j2", unit=name,
                            description=_DESCRIPTION[job], every=seconds,
                            delay=min(seconds // 10, 300))
    return service, timer


# ------------------------------------------------------------------------ macOS


def launchd_plist(job: str, every: float, argv: list[str],
                  then: list[str] | None = None) -> bytes:
    """The job as a LaunchDaemon: root, every ``every`` seconds, never at load
    (``then`` after it through ``/bin/sh``: the spec's values need no quoting)."""
    log = f"{contract.HOST_AUDIT_DIR}/{job}.log"
    if then:
        import shlex

        argv = ["/bin/sh", "-c", f"{shlex.join(argv)}; exec {shlex.join(then)}"]
    doc = {"Label": _LABEL[job], "ProgramArguments": argv, "StartInterval": int(every),
           "EnvironmentVariables": {"PATH": LAUNCHD_PATH},
           "RunAtLoad": False, "ProcessType": "Background", "WorkingDirectory": "/",
           "StandardOutPath": log, "StandardErrorPath": log}
    return plistlib.dumps(doc, fmt=plistlib.FMT_XML, sort_keys=True)


def launchd_target(job: str) -> str:
    return f"/Library/LaunchDaemons/{_LABEL[job]}.plist"


# ---------------------------------------------------------------------- Windows


def iso_duration(seconds: float) -> str:
    """Whole seconds as the XML schema's duration (``PT1H``, ``PT30M``, ``PT90S``)."""
    whole = int(seconds)
    if whole % 3600 == 0:
        return f"PT{whole // 3600}H"
    if whole % 60 == 0:
        return f"PT{whole // 60}M"
    return f"PT{whole}S"


def _sub(parent: ET.Element, tag: str, text: str | None = None) -> ET.Element:
    el = ET.SubElement(parent, f"{{{TASK_NS}}}{tag}")
    if text is not None:
        el.text = text
    return el


def _windows_quote(arg: str) -> str:
    return f'"{arg}"' if " " in arg else arg


def task_xml(job: str, every: float, argv: list[str], then: list[str] | None = None) -> bytes:
    """The job as a Scheduled Task (Task Scheduler schema 1.2): SYSTEM, repeating
    every ``every`` seconds from the time it is registered, one instance at a time."""
    ET.register_namespace("", TASK_NS)
    task = ET.Element(f"{{{TASK_NS}}}Task", {"version": "1.2"})
    info = _sub(task, "RegistrationInfo")
    _sub(info, "Description", f"{_DESCRIPTION[job]} (rendered by agent-sandbox; do not edit)")
    _sub(info, "URI", f"\\agent-sandbox\\agent-sandbox-{job}")  # as the role registers it
    trigger = _sub(_sub(task, "Triggers"), "TimeTrigger")
    _sub(trigger, "Enabled", "true")
    _sub(trigger, "StartBoundary", "2000-01-01T00:00:00")
    repeat = _sub(trigger, "Repetition")
    _sub(repeat, "Interval", iso_duration(every))
    _sub(repeat, "StopAtDurationEnd", "false")
    principal = _sub(_sub(task, "Principals"), "Principal", None)
    principal.set("id", "System")
    _sub(principal, "UserId", SYSTEM_SID)
    _sub(principal, "RunLevel", "HighestAvailable")
    settings = _sub(task, "Settings")
    for tag, value in (("MultipleInstancesPolicy", "IgnoreNew"),
                       ("DisallowStartIfOnBatteries", "false"),
                       ("StopIfGoingOnBatteries", "false"), ("StartWhenAvailable", "true"),
                       ("ExecutionTimeLimit", "PT1H"), ("Enabled", "true")):
        _sub(settings, tag, value)
    actions = _sub(task, "Actions")
    actions.set("Context", "System")
    for command in (argv, then or []):  # the actions run one after the other
        if command:
            run = _sub(actions, "Exec")
            _sub(run, "Command", command[0].replace("/", "\\"))
            _sub(run, "Arguments", " ".join(_windows_quote(a) for a in command[1:]))
    ET.indent(task)
    data: bytes = ET.tostring(task, encoding="UTF-8", xml_declaration=True)
    return data + b"\n"


def task_target(facts: HostFacts, job: str) -> str:
    return f"{facts.prefix}/tasks/agent-sandbox-{job}.xml"


# ----------------------------------------------------------------------- render


def render(spec: Spec, facts: HostFacts) -> Iterable[Artifact]:
    for job, kind, every, argv in _jobs(spec, facts):
        then = then_argv(job, facts)
        if facts.os == "linux":
            service, timer = systemd_units(job, every, argv, then)
            yield Artifact(_UNIT[job] + ".service", service, 0o644, kind)
            yield Artifact(_UNIT[job] + ".timer", timer, 0o644, kind)
        elif facts.os == "macos":
            yield Artifact(launchd_target(job), launchd_plist(job, every, argv, then), 0o644,
                           kind)
        elif facts.os == "windows":
            yield Artifact(task_target(facts, job), task_xml(job, every, argv, then), 0o644,
                           kind)
