"""Molecule and the fleet front ends on one real container host (2-core CI: one
converge serves every check here).

- Molecule's default scenario step by step: create, prepare, converge,
  idempotence (zero changes on the second run), check mode, verify
  (`sandbox verify` and `--drift` on the host), destroy;
- `ansible-playbook site.yml` on the converged host reports no changes;
- the CLI renderer, the Ansible roles and the pyinfra deploy (into a second,
  fresh container) install byte-identical files;
- a hand-edited managed file is reported by `sandbox verify --drift` and
  restored by the next `site.yml` run.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import REPO, run, tool

pytestmark = pytest.mark.slow

SCENARIO = REPO / "molecule" / "default"
SPEC = SCENARIO / "spec"
HOST = "sandbox-molecule-1"
PYINFRA_HOST = "sandbox-molecule-pyinfra"


WHEELHOUSE: dict[str, str] = {}


def molecule(step: str, *, check: bool = True) -> subprocess.CompletedProcess[str]:
    return run([tool("molecule"), step, "--scenario-name", "default"], timeout=1200,
               check=check, SANDBOX_WHEELHOUSE_DIR=WHEELHOUSE["dir"])


def podman(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=300,
                          check=False, env={"CONTAINERS_CONF": str(REPO / "containers.conf"),
                                            "PATH": "/usr/local/bin:/usr/bin:/bin"})


def site() -> subprocess.CompletedProcess[str]:
    return run([tool("ansible-playbook"), "-i", str(SPEC), "site.yml", "--limit", HOST,
                "-e", f"sandbox_runtime_wheelhouse_dir={WHEELHOUSE['dir']}",
                "-e", "sandbox_runtime_wheelhouse_build=false"], timeout=900)


def changed_tasks(out: str) -> list[str]:
    """The TASK headers followed by a `changed:` line (for failure messages)."""
    found, task = [], ""
    for line in out.splitlines():
        if "TASK [" in line:
            task = line.strip(" │*")
        elif "changed:" in line and task:
            found.append(task)
    return found


def recap(out: str, host: str = HOST) -> dict[str, int]:
    m = re.search(rf"^\W*{re.escape(host)}\s+:\s+(.*)$", out, re.M)
    assert m, out[-3000:]
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m.group(1))}


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
def converged(base_image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    # One wheelhouse for the whole module: the source tree may change meanwhile
    # (it is a working tree), and a rebuilt wheel is a real change on the host.
    wheelhouse = tmp_path_factory.mktemp("wheelhouse")
    for cached in (REPO / "build" / "wheelhouse").glob("*.whl"):  # saves downloads
        if not cached.name.startswith("agent_sandbox-"):
            shutil.copy(cached, wheelhouse)
    run([sys.executable, "-m", "agent_sandbox.deploy.wheelhouse", "--project", str(REPO),
         "--out", str(wheelhouse)], timeout=600)
    WHEELHOUSE["dir"] = str(wheelhouse)
    molecule("destroy")
    try:
        molecule("create")
        molecule("prepare")
        conv = molecule("converge")
        assert recap(conv.stdout)["failed"] == 0
        yield HOST
    finally:
        molecule("destroy", check=False)
        podman("rm", "-f", "-t", "0", PYINFRA_HOST)


def test_molecule_idempotence(converged: str) -> None:
    proc = molecule("idempotence", check=False)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    assert recap(proc.stdout)["changed"] == 0, changed_tasks(proc.stdout)


def test_molecule_check_mode(converged: str) -> None:
    proc = molecule("check", check=False)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    counts = recap(proc.stdout)
    assert counts["failed"] == 0 and counts["changed"] == 0, changed_tasks(proc.stdout)


def test_site_yml_second_run_changes_nothing(converged: str) -> None:
    out = site().stdout
    counts = recap(out)
    assert counts["changed"] == 0 and counts["failed"] == 0, changed_tasks(out)


def test_cli_ansible_and_pyinfra_install_identical_bytes(converged: str, tmp_path: Path) -> None:
    # a fresh host for pyinfra, with the same developer account
    podman("rm", "-f", "-t", "0", PYINFRA_HOST)
    started = podman("run", "-d", "--name", PYINFRA_HOST, "--network", "none",
                     "localhost/agent-sandbox-base:bookworm", "sleep", "infinity")
    assert started.returncode == 0, started.stderr
    assert podman("exec", PYINFRA_HOST, "useradd", "-m", "dev").returncode == 0
    assert podman("exec", PYINFRA_HOST, "install", "-d", "-o", "dev",
                  "/home/dev/src/app").returncode == 0
    run([tool("pyinfra"), "-y", f"@podman/{PYINFRA_HOST}", "deploy/pyinfra/deploy.py",
         "--data", f"sandbox_render_host={HOST}"], timeout=600,
        SANDBOX_INVENTORY=str(SPEC), SANDBOX_INSTALL_RUNTIME="0")
    manifest = cli_render(HOST, tmp_path / "cli")
    want = {a["target"]: (a["sha256"], a["mode"]) for a in manifest["artifacts"]}
    assert len(want) > 10
    cli_manifest = (tmp_path / "cli" / "manifest.json").read_text()
    for host in (HOST, PYINFRA_HOST):
        assert installed(host, sorted(want)) == want, host
        got = podman("exec", host, "cat", "/etc/agent-sandbox/manifest.json")
        assert got.stdout == cli_manifest, host


def test_drift_is_reported_then_restored(converged: str) -> None:
    target = "/etc/agent-sandbox/srt-settings.json"
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


def test_molecule_verify_runs_sandbox_verify(converged: str) -> None:
    proc = molecule("verify", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    assert "6/6 checks passed" in out
