"""End to end on real container hosts: `ansible-playbook site.yml` converges and
a second run changes nothing; the CLI renderer, the Ansible roles and the
pyinfra deploy install byte-identical files; a hand-edited managed file is
reported by `sandbox verify --drift` and restored by the next run; and
`sandbox verify` passes every check on the converged host.

One module-scoped pair of containers serves every test here (2-core CI)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from .conftest import DEMO, REPO, run, tool

pytestmark = pytest.mark.slow

ANSIBLE_HOST = "sandbox-e2e-ansible"
PYINFRA_HOST = "sandbox-e2e-pyinfra"
HOST_VARS = {"sandbox_users": [{"name": "alice"}],
             "sandbox_repositories": ["/home/alice/src/app"]}


@pytest.fixture(scope="module")
def inventory(base_image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    inv = tmp_path_factory.mktemp("inventory")
    shutil.copytree(DEMO / "sandbox", inv / "sandbox")
    (inv / "hosts.yml").write_text(yaml.safe_dump({"all": {
        "vars": {"sandbox_os": "linux"},
        "children": {"demo": {
            "vars": {"ansible_connection": "agent_sandbox_podman", "ansible_become": False,
                     "ansible_python_interpreter": "/usr/bin/python3"},
            "children": {"developers": {"hosts": {
                ANSIBLE_HOST: dict(HOST_VARS), PYINFRA_HOST: dict(HOST_VARS)}}}}}}}))
    run([tool("ansible-playbook"), "-i", str(inv), "playbooks/demo-down.yml"], timeout=300)
    run([tool("ansible-playbook"), "-i", str(inv), "playbooks/demo-up.yml"], timeout=300)
    try:
        yield inv
    finally:
        run([tool("ansible-playbook"), "-i", str(inv), "playbooks/demo-down.yml"], timeout=300,
            check=False)


def site(inv: Path) -> subprocess.CompletedProcess[str]:
    return run([tool("ansible-playbook"), "-i", str(inv), "site.yml", "--limit", ANSIBLE_HOST],
               timeout=900)


def recap(out: str, host: str) -> dict[str, int]:
    m = re.search(rf"^{re.escape(host)}\s+:\s+(.*)$", out, re.M)
    assert m, out[-3000:]
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m.group(1))}


def podman(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=120,
                          check=False, env={"CONTAINERS_CONF": str(REPO / "containers.conf"),
                                            "PATH": "/usr/local/bin:/usr/bin:/bin"})


def installed(host: str, targets: list[str]) -> dict[str, tuple[str, str]]:
    """{target: (sha256, octal mode)} as found on the host."""
    script = 'for f in "$@"; do printf "%s %s " "$(stat -c %a "$f")" "$f"; ' \
             'sha256sum < "$f" | cut -d" " -f1; done'
    proc = podman("exec", host, "sh", "-c", script, "sh", *targets)
    assert proc.returncode == 0, proc.stderr
    out = {}
    for line in proc.stdout.splitlines():
        mode, target, digest = line.split(" ")
        out[target] = (digest, f"{int(mode, 8):04o}")
    return out


def cli_render(inv: Path, host: str, out: Path) -> dict:
    subprocess.run([sys.executable, "-m", "agent_sandbox", "render", str(inv), "--host", host,
                    "--out", str(out)], check=True, capture_output=True)
    return json.loads((out / "manifest.json").read_text())


@pytest.fixture(scope="module")
def converged(inventory: Path) -> Path:
    first = site(inventory)
    assert recap(first.stdout, ANSIBLE_HOST)["failed"] == 0
    return inventory


def test_second_site_run_changes_nothing(converged: Path) -> None:
    again = site(converged)
    counts = recap(again.stdout, ANSIBLE_HOST)
    assert counts["changed"] == 0, again.stdout[-5000:]
    assert counts["failed"] == 0


def test_cli_ansible_and_pyinfra_install_identical_bytes(converged: Path, tmp_path: Path) -> None:
    pyinfra = run([tool("pyinfra"), "-y", f"@podman/{PYINFRA_HOST}",
                   "deploy/pyinfra/deploy.py"], timeout=600,
                  SANDBOX_INVENTORY=str(converged), SANDBOX_INSTALL_RUNTIME="0")
    assert pyinfra.returncode == 0
    for host in (ANSIBLE_HOST, PYINFRA_HOST):
        manifest = cli_render(converged, host, tmp_path / host)
        want = {a["target"]: (a["sha256"], a["mode"]) for a in manifest["artifacts"]}
        assert len(want) > 10
        assert installed(host, sorted(want)) == want, host
        got = podman("exec", host, "cat", "/etc/agent-sandbox/manifest.json")
        assert got.stdout == (tmp_path / host / "manifest.json").read_text(), host
    # and the same bytes across front ends, file by file
    a = cli_render(converged, ANSIBLE_HOST, tmp_path / "a2")["artifacts"]
    p = cli_render(converged, PYINFRA_HOST, tmp_path / "p2")["artifacts"]
    assert [x["sha256"] for x in a] == [x["sha256"] for x in p]


def test_drift_is_reported_then_restored(converged: Path) -> None:
    target = "/etc/agent-sandbox/srt-settings.json"
    clean = podman("exec", ANSIBLE_HOST, "/usr/local/bin/sandbox", "verify", "--drift")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    edit = podman("exec", ANSIBLE_HOST, "sh", "-c",
                  f"sed -i 's/github.com/github.com.evil.test/' {target}")
    assert edit.returncode == 0
    drifted = podman("exec", ANSIBLE_HOST, "/usr/local/bin/sandbox", "verify", "--drift")
    assert drifted.returncode == 1
    assert f"DRIFT modified {target}" in drifted.stdout
    fixed = site(converged)
    assert recap(fixed.stdout, ANSIBLE_HOST)["changed"] >= 1
    after = podman("exec", ANSIBLE_HOST, "/usr/local/bin/sandbox", "verify", "--drift")
    assert after.returncode == 0, after.stdout


def test_sandbox_verify_passes_every_check_on_the_host(converged: Path) -> None:
    proc = podman("exec", ANSIBLE_HOST, "/usr/local/bin/sandbox", "verify", "--json")
    doc = json.loads(proc.stdout)
    assert proc.returncode == 0, json.dumps(doc, indent=2)
    assert doc["passed"] == doc["total"] == 6
    assert {c["name"] for c in doc["checks"]} == {
        "denied_read", "protected_write", "denied_domain", "allowed_domain", "escalation",
        "audit"}
