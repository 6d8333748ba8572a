"""Molecule and the fleet front ends on one real container host (2-core CI: one
converge serves every check here, and the no-init host's: the default scenario
converges both, tests/fleet/conftest.py ``molecule_fleet``).

- Molecule's default scenario step by step: create, prepare, converge,
  idempotence (zero changes on the second run), check mode, verify
  (`sandbox verify` and `--drift` on the host), destroy;
- `ansible-playbook site.yml` on the converged host reports no changes (also
  after the pyinfra deploy's service command ran there);
- the CLI renderer and the Ansible roles install byte-identical files (the
  pyinfra deploy installs those bytes too, into a second, fresh container:
  test_pyinfra_host.py, which runs beside this file);
- a hand-edited managed file is reported by `sandbox verify --drift` and
  restored by the next `site.yml` run; the scheduled drift check's timer (given a
  short first interval by a runtime drop-in) fires by itself and records the drift in
  the host's audit chain and in what `sandbox status` shows;
- `playbooks/verify.yml` over both hosts: one fleet JUnit file that validates against
  the JUnit schema, the systemd host's waived check and the other host's expired
  waiver in it, and the play failing for that host;
- the host boots systemd, so the roles take the systemd path: the proxy runs
  as the rendered, hardened unit (a dynamic user), refuses what the policy
  refuses and chains its decisions in its own audit folder; a converge
  restarts it when the settings it runs with are not the installed ones.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO, MoleculeFleet, changed_tasks, run, tool
from .conftest import recap as fleet_recap

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("molecule"),
              pytest.mark.usefixtures("containers_up")]

SCENARIO = REPO / "molecule" / "default"
SPEC = SCENARIO / "spec"
HOST = "sandbox-molecule-1"
PYINFRA_HOST = "sandbox-molecule-pyinfra"
UNIT = "agent-sandbox-proxy.service"


WHEELHOUSE: dict[str, str] = {}


def podman(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=300,
                          check=False, env={"CONTAINERS_CONF": str(REPO / "containers.conf"),
                                            "PATH": "/usr/local/bin:/usr/bin:/bin"})


def site() -> subprocess.CompletedProcess[str]:
    return run([tool("ansible-playbook"), "-i", str(SPEC), "site.yml", "--limit", HOST,
                "-e", f"sandbox_runtime_wheelhouse_dir={WHEELHOUSE['dir']}",
                "-e", "sandbox_runtime_wheelhouse_build=false"], timeout=900)


def recap(out: str, host: str = HOST) -> dict[str, int]:
    return fleet_recap(out, host)


def installed(host: str, targets: list[str]) -> dict[str, tuple[str, str]]:
    """{target: (sha256, octal mode)} as found on the host."""
    script = ('for f in "$@"; do printf "%s %s " "$(stat -c %a "$f")" "$f"; '
              'sha256sum < "$f" | cut -d" " -f1; done')
    proc = podman("exec", host, "sh", "-c", script, "sh", *targets)
    assert proc.returncode == 0, proc.stderr
    out = {}
    for line in proc.stdout.splitlines():
        mode, target, digest = line.split(" ")
        out[target] = (digest, f"{int(mode, 8):04o}")
    return out


def cli_render(host: str, out: Path) -> dict:
    subprocess.run([sys.executable, "-m", "agent_sandbox", "render", str(SPEC), "--host", host,
                    "--out", str(out)], check=True, capture_output=True)
    return json.loads((out / "manifest.json").read_text())


@pytest.fixture(scope="module")
def converged(molecule_fleet: MoleculeFleet) -> str:
    """The default scenario's systemd host, converged (the package's fleet)."""
    WHEELHOUSE["dir"] = str(molecule_fleet.wheelhouse)
    assert molecule_fleet.converge is not None
    assert recap(molecule_fleet.converge.stdout)["failed"] == 0
    return HOST


def test_molecule_idempotence(converged: str, molecule_fleet: MoleculeFleet) -> None:
    proc = molecule_fleet.step("idempotence")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    assert recap(proc.stdout)["changed"] == 0, changed_tasks(proc.stdout)


def test_molecule_check_mode(converged: str, molecule_fleet: MoleculeFleet) -> None:
    proc = molecule_fleet.step("check")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    counts = recap(proc.stdout)
    assert counts["failed"] == 0 and counts["changed"] == 0, changed_tasks(proc.stdout)


def test_cli_and_ansible_install_identical_bytes(converged: str, tmp_path: Path) -> None:
    manifest = cli_render(HOST, tmp_path / "cli")
    want = {a["target"]: (a["sha256"], a["mode"]) for a in manifest["artifacts"]}
    assert len(want) > 10
    cli_manifest = (tmp_path / "cli" / "manifest.json").read_text()
    assert installed(HOST, sorted(want)) == want, HOST
    got = podman("exec", HOST, "cat", "/etc/agent-sandbox/manifest.json")
    assert got.stdout == cli_manifest, HOST


def service(*props: str) -> dict[str, str]:
    proc = podman("exec", HOST, "systemctl", "show", UNIT, *(f"--property={p}" for p in props))
    assert proc.returncode == 0, proc.stderr
    return dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)


def test_proxy_runs_as_a_hardened_systemd_service(converged: str) -> None:
    state = service("ActiveState", "SubState", "MainPID", "NRestarts")
    assert state["ActiveState"] == "active" and state["SubState"] == "running", state
    assert state["NRestarts"] == "0", state
    status = podman("exec", HOST, "cat", f"/proc/{state['MainPID']}/status").stdout
    uid = next(line.split()[1] for line in status.splitlines() if line.startswith("Uid:"))
    assert uid != "0", status  # DynamicUser=yes
    name = "denied-by-service.example"
    ask = ("import socket; s = socket.create_connection(('127.0.0.1', 3128), timeout=10); "
           f"s.sendall(b'CONNECT {name}:443 HTTP/1.1\\r\\nHost: {name}:443\\r\\n\\r\\n'); "
           "print(s.recv(4096).decode().splitlines()[0])")
    reply = podman("exec", HOST, "python3", "-c", ask)
    assert reply.stdout.startswith("HTTP/1.1 403"), reply.stdout + reply.stderr
    audit = "/var/log/agent-sandbox-proxy"
    checked = podman("exec", HOST, "/usr/local/bin/sandbox", "audit", "verify", audit)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    records = podman("exec", HOST, "cat", f"{audit}/audit.jsonl").stdout
    assert name in records and "proxy.decision" in records
    # the host audit folder is still root's alone
    mode = podman("exec", HOST, "stat", "-c", "%U %a", "/var/log/agent-sandbox").stdout.split()
    assert mode == ["root", "700"], mode


def test_pyinfra_service_command_keeps_the_same_records(converged: str) -> None:
    # the pyinfra deploy's command for the unit, run on the systemd host Ansible made
    import shlex

    from agent_sandbox.deploy import host_steps
    from agent_sandbox.deploy import pyinfra as deploy

    _, artifacts = deploy.rendered(str(SPEC), HOST)
    units = [{"target": a.target, "kind": a.kind} for a in artifacts.values()]
    (step,) = [s for s in host_steps.service_steps(units, apparmor="no")
               if "proxy-service" in s["argv"]]
    command = shlex.join(step["argv"])
    first = service("MainPID")["MainPID"]
    assert podman("exec", HOST, "sh", "-c", command).returncode == 0
    assert service("MainPID")["MainPID"] == first  # Ansible's record holds: nothing to do
    record = f"/var/lib/agent-sandbox/{UNIT}.settings"
    assert podman("exec", HOST, "sh", "-c", f"echo other > {record}").returncode == 0
    assert podman("exec", HOST, "sh", "-c", command).returncode == 0
    second = service("ActiveState", "MainPID")
    assert second["ActiveState"] == "active" and second["MainPID"] != first, second
    # and Ansible agrees with what pyinfra wrote: `site.yml` run again on the converged
    # host (molecule's idempotence step runs converge.yml) changes nothing
    again = site().stdout
    counts = recap(again)
    assert counts["changed"] == 0 and counts["failed"] == 0, changed_tasks(again)


def test_drift_is_reported_then_restored(converged: str) -> None:
    target = "/etc/agent-sandbox/srt-settings.json"
    before = service("MainPID")["MainPID"]
    clean = podman("exec", HOST, "/usr/local/bin/sandbox", "verify", "--drift")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    edit = podman("exec", HOST, "sed", "-i", "s/github.com/github.com.evil.test/", target)
    assert edit.returncode == 0
    drifted = podman("exec", HOST, "/usr/local/bin/sandbox", "verify", "--drift")
    assert drifted.returncode == 1
    assert f"DRIFT modified {target}" in drifted.stdout
    assert recap(site().stdout)["changed"] >= 1
    after = podman("exec", HOST, "/usr/local/bin/sandbox", "verify", "--drift")
    assert after.returncode == 0, after.stdout
    # the service never saw the edit (it reads the file when it starts): no restart
    assert service("MainPID")["MainPID"] == before


DRIFT_TIMER = "agent-sandbox-drift.timer"
DRIFT_SERVICE = "agent-sandbox-drift.service"
# the timer's first run two seconds after it starts: a runtime drop-in (not a managed
# file), removed again by the test
DROP_IN = f"/run/systemd/system/{DRIFT_TIMER}.d/soon.conf"


def drift_events() -> list[dict]:
    lines = podman("exec", HOST, "cat", "/var/log/agent-sandbox/audit.jsonl").stdout
    return [r for r in map(json.loads, lines.splitlines()) if r.get("event") == "drift_check"]


def test_the_drift_timer_records_drift_in_the_audit_and_status(converged: str) -> None:
    import time

    timer = podman("exec", HOST, "systemctl", "show", DRIFT_TIMER,
                   "--property=ActiveState", "--property=UnitFileState").stdout
    assert "ActiveState=active" in timer and "UnitFileState=enabled" in timer, timer
    target = "/etc/agent-sandbox/srt-settings.json"
    seen = len(drift_events())
    edit = podman("exec", HOST, "sed", "-i", "s/github.com/github.com.evil.test/", target)
    assert edit.returncode == 0
    soon = (f"mkdir -p {os.path.dirname(DROP_IN)} && printf '[Timer]\\nOnActiveSec=\\n"
            "OnActiveSec=2s\\nRandomizedDelaySec=0\\nAccuracySec=1s\\n' > "
            f"{DROP_IN} && systemctl daemon-reload && systemctl restart {DRIFT_TIMER}")
    try:
        assert podman("exec", HOST, "sh", "-c", soon).returncode == 0
        deadline = time.monotonic() + 240
        while len(drift_events()) == seen and time.monotonic() < deadline:
            time.sleep(3)
        events = drift_events()
        assert len(events) == seen + 1, "the timer never ran the drift check"
    finally:
        podman("exec", HOST, "sh", "-c", f"rm -f {DROP_IN} && systemctl daemon-reload && "
                                         f"systemctl restart {DRIFT_TIMER}")
    event = events[-1]
    assert event["clean"] is False
    assert {"target": target, "problem": "modified"}.items() <= event["drifted"][0].items()
    assert event["failed_checks"] == [] and event["checks"] >= 1, event
    chain = podman("exec", HOST, "/usr/local/bin/sandbox", "audit", "verify",
                   "/var/log/agent-sandbox")
    assert chain.returncode == 0 and chain.stdout.startswith("OK: "), chain.stdout + chain.stderr
    status = podman("exec", HOST, "/usr/local/bin/sandbox", "status", "/").stdout
    assert "drift check: DRIFT FOUND at " in status and f"DRIFT modified {target}" in status, \
        status
    record = podman("exec", HOST, "stat", "-c", "%U %a", "/var/lib/agent-sandbox/verify/drift.json")
    assert record.stdout.split() == ["root", "644"], record.stdout + record.stderr
    # restored by the next run of site.yml; the scheduled check then finds nothing
    assert recap(site().stdout)["changed"] >= 1
    again = podman("exec", HOST, "systemctl", "start", DRIFT_SERVICE)
    assert again.returncode == 0, again.stderr
    status = podman("exec", HOST, "/usr/local/bin/sandbox", "status", "/").stdout
    assert "drift check: clean at " in status, status


def test_proxy_service_restarts_for_other_settings(converged: str) -> None:
    import base64
    import hashlib

    from agent_sandbox import contract

    record = f"/var/lib/agent-sandbox/{UNIT}.settings"
    want = podman("exec", HOST, "cat", record).stdout
    # the record is what the running proxy was started with: the unit file and the
    # settings it enforces, as `sandbox install proxy-service` digests them
    digest = hashlib.sha256()
    for path in (contract.PROXY_UNIT, contract.SYSTEM_SRT_SETTINGS):
        data = base64.b64decode(podman("exec", HOST, "base64", "-w0", path).stdout)
        digest.update(len(data).to_bytes(8, "big") + data)
    assert want.strip() == digest.hexdigest()
    before = service("MainPID")["MainPID"]
    # as when the settings changed since the service started
    assert podman("exec", HOST, "sh", "-c", f"echo other > {record}").returncode == 0
    assert recap(site().stdout)["changed"] >= 1
    after = service("ActiveState", "MainPID")
    assert after["ActiveState"] == "active" and after["MainPID"] != before, after
    assert podman("exec", HOST, "cat", record).stdout == want


def test_molecule_verify_runs_sandbox_verify(converged: str,
                                             molecule_fleet: MoleculeFleet) -> None:
    proc = molecule_fleet.step("verify")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    assert "6/6 checks passed" in out
    assert "/var/log/agent-sandbox-proxy" in out  # the service's chain, with its refusal
    assert re.search(r"status\W{0,4}waived", out)  # the scenario's waiver of allowed_domain


def test_the_connection_runs_tasks_in_the_container_as_podman_exec_would(converged: str) -> None:
    # plugins/connection/agent_sandbox_podman.py: runc exec on the container podman
    # made, with the container's own process settings, in place of podman exec
    probe = "cat /proc/self/cgroup; readlink /proc/1/exe; id; printenv PATH HOME; pwd"
    proc = run([tool("ansible"), "all", "-i", f"{HOST},", "-c", "agent_sandbox_podman",
                "-m", "ansible.builtin.shell", "-a", probe, "-vvv"], timeout=300)
    assert "EXEC via runc, container" in proc.stdout, proc.stdout[-3000:]
    head = f"{HOST} | CHANGED | rc=0 >>\n"
    assert head in proc.stdout, proc.stdout[-3000:]
    got = proc.stdout.split(head, 1)[1]
    want = podman("exec", HOST, "sh", "-c", probe)
    assert want.returncode == 0, want.stderr
    assert got.startswith(want.stdout), (got, want.stdout)
    assert "/lib/systemd/systemd" in got  # the container's PID 1, not the host's


NOINIT = "sandbox-molecule-noinit"


def test_fleet_report_of_both_hosts(converged: str, tmp_path: Path) -> None:
    import xml.etree.ElementTree as ET

    import xmlschema

    out = tmp_path / "fleet-report"
    proc = run([tool("ansible-playbook"), "-i", str(SPEC), "playbooks/verify.yml",
                "-e", f"sandbox_verify_report_dir={out}"], timeout=900, check=False)
    text = proc.stdout + proc.stderr
    # the no-init host's waiver expired: the play fails at its end, for that host alone
    assert proc.returncode != 0, text[-4000:]
    assert f"sandbox verify failed on {NOINIT}" in text, text[-4000:]
    junit = out / "fleet-junit.xml"
    xmlschema.XMLSchema(str(REPO / "tests" / "fleet" / "schemas" / "junit-10.xsd")).validate(
        str(junit))
    suites = {s.get("hostname"): s for s in ET.parse(junit).getroot().iter("testsuite")}
    assert sorted(suites) == [HOST, NOINIT]
    assert all(s.get("name") == "agent-sandbox verify" and s.get("tests") == "6"
               for s in suites.values())
    cases = {(h, c.get("name")): c for h, s in suites.items() for c in s.iter("testcase")}
    assert all(c.get("classname") == f"agent-sandbox.{h}" for (h, _), c in cases.items())
    waived = cases[(HOST, "allowed_domain")].find("skipped")
    assert waived is not None and waived.get("message") == (
        "waived: the scenario proves how a waived check is reported (until 2099-12-31)")
    assert suites[HOST].get("failures") == "0" and suites[HOST].get("skipped") == "1"
    expired = cases[(NOINIT, "escalation")].find("failure")
    assert expired is not None and expired.get("type") == "waiver-expired"
    assert expired.get("message", "").startswith("waiver expired on 2020-01-31")
    assert suites[NOINIT].get("failures") == "1"
    # the checks themselves passed on both hosts: only the stale waiver fails one
    assert [k for k, c in cases.items() if c.find("failure") is not None] == [
        (NOINIT, "escalation")]
    summary = (out / "fleet-summary.md").read_text()
    assert f"| {HOST} | ok | 5 | 0 | 1 | 0 | none |" in summary, summary
    assert f"| {NOINIT} | FAILED | 5 | 0 | 0 | 1 |" in summary, summary
    assert "| 2099-12-31 | hosts/sandbox-molecule-1.yml |" in summary, summary
    for host in (HOST, NOINIT):  # each host's own report, kept beside
        doc = json.loads((out / "hosts" / f"{host}.json").read_text())
        assert doc["total"] == doc["passed"] == 6
        xmlschema.XMLSchema(str(REPO / "tests" / "fleet" / "schemas" / "junit-10.xsd")
                            ).validate(str(out / "hosts" / f"{host}.xml"))
