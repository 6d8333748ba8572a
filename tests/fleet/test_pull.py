"""A host that converges itself: `ansible-pull` from a git repository of the
inventory and spec, run by the rendered pull schedule, on Molecule's converged
systemd host (a laptop the controller cannot reach: nothing here goes through
the controller's connection once the host has its runtime and its schedule).

- a push converge from a spec that makes the host pull (`platforms.linux.pull`,
  repository `file:///srv/fleet`) gives it the runtime's `pull` extra
  (ansible-core), git, and `agent-sandbox-pull.service`/`.timer`;
- a repository at that path holds the project's playbooks, roles and plugins, and
  an inventory whose spec allows one more domain than the pushed one;
- the pull service, started as its timer starts it, converges the host to that
  spec (the settings change) and then runs the drift check, which records a clean
  result in the host's audit and in `sandbox status`: the host reports as a
  pushed one does; started again, the pull changes nothing;
- a push converge then puts the host's spec back.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

import pytest
import yaml

from .conftest import REPO, changed_tasks, run, tool
from .test_molecule import HOST, SPEC, WHEELHOUSE, converged, recap

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("containers_up")]
__all__ = ["converged"]  # the converged fleet's fixture, shared with test_molecule.py

CHECKOUT = "/var/lib/agent-sandbox/pull"
ORIGIN = "/srv/fleet"
ORIGIN_URL = f"file://{ORIGIN}"
PULLED_DOMAIN = "pull.example.test"
# what a repository of the fleet holds: the playbooks and what they run
SHIPPED = ("ansible.cfg", "site.yml", "playbooks", "roles", "plugins", "src")


PULL = {"repository": ORIGIN_URL, "branch": "main", "every": "30m",
        "inventory": "inventories/laptops/hosts.yml"}


def spec_layers(dst: Path, *, more_domain: bool) -> None:
    """The Molecule scenario's spec layers, the host pulling (and allowing one more
    domain, for the repository's copy)."""
    shutil.copytree(SPEC / "sandbox", dst)
    host = dst / "hosts" / f"{HOST}.yml"
    layer = yaml.safe_load(host.read_text()) if host.exists() else {"version": 1}
    layer.setdefault("platforms", {}).setdefault("linux", {})["pull"] = PULL
    host.write_text(yaml.safe_dump(layer))
    if more_domain:
        fleet = dst / "fleet.yml"
        layer = yaml.safe_load(fleet.read_text())
        layer["network"]["allowed_domains"].append(PULLED_DOMAIN)
        fleet.write_text(yaml.safe_dump(layer))


def pushed_inventory(tmp: Path) -> Path:
    """The scenario's inventory (the controller's connection), its host pulling."""
    inventory = tmp / "pushed"
    spec_layers(inventory / "sandbox", more_domain=False)
    shutil.copyfile(SPEC / "hosts.yml", inventory / "hosts.yml")
    return inventory


def fleet_repository(tmp: Path) -> bytes:
    """A tar of the fleet's repository: the project's tracked files and an
    inventory of this host (local connection) whose spec allows PULLED_DOMAIN."""
    # the working tree's files (tracked or new, not ignored), as a commit of it would hold
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard", "--", *SHIPPED], cwd=REPO, check=True,
                            capture_output=True).stdout.decode().split("\0")
    tracked = sorted({n for n in listed if n and os.path.lexists(REPO / n)})
    inventory = tmp / "inventories" / "laptops"
    spec_layers(inventory / "sandbox", more_domain=True)
    (inventory / "hosts.yml").write_text(yaml.safe_dump({"all": {
        "vars": {"sandbox_os": "linux"},
        "hosts": {HOST: {
            "ansible_connection": "local", "ansible_become": False,
            "ansible_python_interpreter": "/usr/bin/python3",
            "sandbox_users": [{"name": "dev"}],
            "sandbox_repositories": ["/home/dev/src/app"],
            # a pulling host keeps the runtime it was given: no wheelhouse here
            "sandbox_runtime_venv_enabled": False,
            "sandbox_runtime_wheelhouse_build": False,
        }}}}))
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name in tracked:
            tar.add(REPO / name, arcname=name, recursive=False)
        tar.add(inventory, arcname="inventories/laptops")
    return out.getvalue()


def on_host(*argv: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    env = {"CONTAINERS_CONF": str(REPO / "containers.conf"), "PATH": "/usr/local/bin:/usr/bin:/bin"}
    return subprocess.run(["podman", "exec", "-i", HOST, *argv], input=stdin,
                          capture_output=True, timeout=900, check=False, env=env)


def pull() -> str:
    """The pull service, started as its timer starts it; what it printed."""
    since = on_host("date", "+%s").stdout.decode().strip()
    proc = on_host("systemctl", "start", "agent-sandbox-pull.service")
    out = on_host("journalctl", "-u", "agent-sandbox-pull.service", "--since", f"@{since}",
                  "-o", "cat", "--no-pager").stdout.decode(errors="replace")
    assert proc.returncode == 0, out[-6000:] + proc.stderr.decode(errors="replace")
    return out


def drift_check_since(moment: float) -> dict:
    """The host's last drift record once it is newer than ``moment`` (the check runs
    as the pull service stops: give it a few seconds)."""
    record: dict = {}
    for _ in range(60):
        proc = on_host("/usr/local/bin/sandbox", "status", "--json", "/home/dev/src/app")
        assert proc.returncode == 0, proc.stderr
        record = dict(json.loads(proc.stdout)["drift_check"] or {})
        if record.get("at", 0) >= moment:
            return record
        time.sleep(0.5)
    raise AssertionError(f"no drift check recorded after the pull: {record}")


def test_a_host_converges_itself_from_a_repository(converged: str, tmp_path: Path) -> None:
    pushed = run(site_argv(pushed_inventory(tmp_path)), timeout=900)
    assert recap(pushed.stdout)["failed"] == 0
    assert on_host("/opt/agent-sandbox/venv/bin/ansible-pull", "--version").returncode == 0
    timer = on_host("systemctl", "is-enabled", "agent-sandbox-pull.timer").stdout.decode()
    assert timer.strip() == "enabled"
    made = on_host("sh", "-c", f"rm -rf {ORIGIN} {CHECKOUT} && mkdir -p {ORIGIN} && "
                   f"tar -x -C {ORIGIN} && cd {ORIGIN} && git init -q -b main && git add -A && "
                   "git -c user.name=fleet -c user.email=fleet@example.invalid commit -qm fleet",
                   stdin=fleet_repository(tmp_path))
    assert made.returncode == 0, made.stderr
    try:
        before = time.time()
        first = pull()
        assert recap(first)["changed"] >= 1 and recap(first)["failed"] == 0, first[-4000:]
        settings = on_host("cat", "/etc/agent-sandbox/srt-settings.json").stdout.decode()
        assert PULLED_DOMAIN in settings
        # the drift check after the pull: recorded, clean against the pulled manifest
        record = drift_check_since(before - 1)
        assert record.get("clean") is True, record
        events = on_host("/usr/local/bin/sandbox", "audit", "show", "/var/log/agent-sandbox")
        assert b"drift_check" in events.stdout
        again = pull()
        counts = recap(again)
        assert counts["changed"] == 0 and counts["failed"] == 0, changed_tasks(again)
    finally:  # the scenario's spec again (the extra kept: no second reinstall)
        back = run([*site_argv(SPEC), "-e", '{"sandbox_runtime_extras": ["pull"]}'],
                   timeout=900)
        assert recap(back.stdout)["failed"] == 0
        on_host("systemctl", "disable", "--now", "agent-sandbox-pull.timer")
    assert PULLED_DOMAIN not in on_host("cat", "/etc/agent-sandbox/srt-settings.json"
                                        ).stdout.decode()


def site_argv(inventory: Path) -> list[str]:
    return [tool("ansible-playbook"), "-i", str(inventory), "site.yml", "--limit", HOST,
            "-e", f"sandbox_runtime_wheelhouse_dir={WHEELHOUSE['dir']}",
            "-e", "sandbox_runtime_wheelhouse_build=false"]
