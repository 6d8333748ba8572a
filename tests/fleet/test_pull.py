"""A host that converges itself: `ansible-pull` from a git repository of the
inventory and spec, on Molecule's converged systemd host (a laptop the
controller cannot reach: nothing here goes through the controller's
connection once the host has its runtime).

- the push converge gives the host the runtime with its `pull` extra (ansible-core
  in the virtualenv) and git;
- a repository on the host (a local path, as a laptop would clone its fleet's
  repository) holds the project's playbooks, roles and plugins, and an inventory
  whose spec allows one more domain than the host's;
- the first pull converges the host to that spec (the settings change, `sandbox
  verify --drift` agrees with the pulled manifest); a second pull changes nothing;
- a push converge then puts the host's spec back.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml

from .conftest import REPO, changed_tasks, run, tool
from .test_molecule import HOST, SPEC, WHEELHOUSE, converged, recap

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("containers_up")]
__all__ = ["converged"]  # the converged fleet's fixture, shared with test_molecule.py

CHECKOUT = "/var/lib/agent-sandbox/pull"
ORIGIN = "/srv/fleet"
PULLED_DOMAIN = "pull.example.test"
# what a repository of the fleet holds: the playbooks and what they run
SHIPPED = ("ansible.cfg", "site.yml", "playbooks", "roles", "plugins", "src")


def fleet_repository(tmp: Path) -> bytes:
    """A tar of the fleet's repository: the project's tracked files and an
    inventory of this host (local connection) whose spec allows PULLED_DOMAIN."""
    # the working tree's files (tracked or new, not ignored), as a commit of it would hold
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard", "--", *SHIPPED], cwd=REPO, check=True,
                            capture_output=True).stdout.decode().split("\0")
    tracked = sorted({n for n in listed if n and os.path.lexists(REPO / n)})
    inventory = tmp / "inventories" / "laptops"
    shutil.copytree(SPEC / "sandbox", inventory / "sandbox")
    fleet = inventory / "sandbox" / "fleet.yml"
    layer = yaml.safe_load(fleet.read_text())
    layer["network"]["allowed_domains"].append(PULLED_DOMAIN)
    fleet.write_text(yaml.safe_dump(layer))
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
            "sandbox_runtime_extras": ["pull"],
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
    proc = on_host("/opt/agent-sandbox/venv/bin/ansible-pull", "-U", ORIGIN, "-C", "main",
                   "-d", CHECKOUT, "-i", "inventories/laptops/hosts.yml", "playbooks/linux.yml")
    out = proc.stdout.decode(errors="replace")
    assert proc.returncode == 0, out[-6000:] + proc.stderr.decode(errors="replace")[-3000:]
    return out


def test_a_host_converges_itself_from_a_repository(converged: str, tmp_path: Path) -> None:
    # the push converge gives the host what pulling needs: ansible-core, git
    pushed = run([*site_argv(), "-e", '{"sandbox_runtime_extras": ["pull"]}'], timeout=900)
    assert recap(pushed.stdout)["failed"] == 0
    assert on_host("/opt/agent-sandbox/venv/bin/ansible-pull", "--version").returncode == 0
    made = on_host("sh", "-c", f"rm -rf {ORIGIN} {CHECKOUT} && mkdir -p {ORIGIN} && "
                   f"tar -x -C {ORIGIN} && cd {ORIGIN} && git init -q -b main && git add -A && "
                   "git -c user.name=fleet -c user.email=fleet@example.invalid commit -qm fleet",
                   stdin=fleet_repository(tmp_path))
    assert made.returncode == 0, made.stderr
    try:
        first = pull()
        assert recap(first)["changed"] >= 1 and recap(first)["failed"] == 0, first[-4000:]
        settings = on_host("cat", "/etc/agent-sandbox/srt-settings.json").stdout.decode()
        assert PULLED_DOMAIN in settings
        drift = on_host("/usr/local/bin/sandbox", "verify", "--drift")
        assert drift.returncode == 0, drift.stdout + drift.stderr
        again = pull()
        counts = recap(again)
        assert counts["changed"] == 0 and counts["failed"] == 0, changed_tasks(again)
    finally:  # the pushed spec again (the extra kept: no second reinstall)
        back = run([*site_argv(), "-e", '{"sandbox_runtime_extras": ["pull"]}'], timeout=900)
        assert recap(back.stdout)["failed"] == 0
    assert PULLED_DOMAIN not in on_host("cat", "/etc/agent-sandbox/srt-settings.json"
                                        ).stdout.decode()


def site_argv() -> list[str]:
    return [tool("ansible-playbook"), "-i", str(SPEC), "site.yml", "--limit", HOST,
            "-e", f"sandbox_runtime_wheelhouse_dir={WHEELHOUSE['dir']}",
            "-e", "sandbox_runtime_wheelhouse_build=false"]
