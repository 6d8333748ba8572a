"""Shared helpers for the fleet tests: paths, the environment Ansible and podman
need, and running the project's commands."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from base_image import build as build_base_image

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
DEMO = REPO / "inventories" / "demo"
EXAMPLE_FLEET = REPO / "inventories" / "example-fleet"


def env(**extra: str) -> dict[str, str]:
    """The environment `make` gives Ansible, podman and Molecule."""
    return {
        **os.environ,
        "CONTAINERS_CONF": str(REPO / "containers.conf"),
        "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".collections"),
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '')}",
        **extra,
    }


def run(argv: list[str], *, timeout: float = 600, check: bool = True,
        **extra_env: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, cwd=REPO, env=env(**extra_env), capture_output=True, text=True,
                          timeout=timeout, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} exited {proc.returncode}\n"
                             f"--- stdout\n{proc.stdout[-6000:]}\n"
                             f"--- stderr\n{proc.stderr[-3000:]}")
    return proc


def tool(name: str) -> str:
    return str(VENV_BIN / name)


@pytest.fixture(scope="session")
def collections(one_at_a_time: Callable[[str], contextlib.AbstractContextManager[None]]
                ) -> Path:
    """The Ansible collections unpacked by bootstrap (run it if they are missing)."""
    with one_at_a_time("collections"):
        run(["bash", "scripts/bootstrap.d/10-collections.sh"], timeout=300)
    path = REPO / ".collections" / "ansible_collections" / "containers" / "podman"
    assert path.is_dir()
    return path


@pytest.fixture(scope="session")
def base_image(collections: Path) -> str:
    """The locally built base image (built here when missing: tests/base_image.py)."""
    if shutil.which("podman") is None or shutil.which("debootstrap") is None:
        pytest.fail("podman and debootstrap are needed (scripts/bootstrap.sh installs them)")
    return build_base_image()


@pytest.fixture(scope="session")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory,
               one_at_a_time: Callable[[str], contextlib.AbstractContextManager[None]]) -> Path:
    """One wheelhouse for the run's Molecule scenarios, whichever worker runs
    them: the source tree may change meanwhile (it is a working tree), and a
    rebuilt wheel is a real change on a host. The first worker builds it, the
    others wait for it and use it as it is."""
    base = tmp_path_factory.getbasetemp()  # a worker's parent folder is the run's
    out = (base.parent if "PYTEST_XDIST_WORKER" in os.environ else base) / "wheelhouse"
    built = out / ".built-for-this-run"
    with one_at_a_time("wheelhouse"):
        if not built.is_file():
            out.mkdir(exist_ok=True)
            for cached in (REPO / "build" / "wheelhouse").glob("*.whl"):  # saves downloads
                if not cached.name.startswith("agent_sandbox-"):
                    shutil.copy(cached, out)
            run([sys.executable, "-m", "agent_sandbox.deploy.wheelhouse", "--project",
                 str(REPO), "--out", str(out)], timeout=600)
            built.touch()
    return out


def changed_tasks(out: str) -> list[str]:
    """The TASK headers followed by a `changed:` line (for failure messages)."""
    found, task = [], ""
    for line in out.splitlines():
        if "TASK [" in line:
            task = line.strip(" │*")
        elif "changed:" in line and task:
            found.append(task)
    return found


def recap(out: str, host: str) -> dict[str, int]:
    """The host's line in the last play recap of ``out`` (a Molecule sequence
    prints one for each playbook it runs)."""
    found = re.findall(rf"^\W*{re.escape(host)}\s+:\s+(.*)$", out, re.M)
    assert found, out[-3000:]
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", found[-1])}


class MoleculeFleet:
    """Molecule's default scenario, converged once for the run: its systemd host
    (``sandbox-molecule-1``: test_molecule.py) and its host without an init system
    (``sandbox-molecule-noinit``: test_molecule_no_init.py). A step of the
    scenario's sequence after the converge (idempotence, check, verify) runs once,
    for both hosts, when a test first asks for it: each file judges its own host in
    the same output."""

    def __init__(self, wheelhouse: Path) -> None:
        self.wheelhouse = wheelhouse
        self.converge: subprocess.CompletedProcess[str] | None = None
        self._steps: dict[str, subprocess.CompletedProcess[str]] = {}

    def molecule(self, step: str, *, check: bool = True) -> subprocess.CompletedProcess[str]:
        return run([tool("molecule"), step, "--scenario-name", "default"], timeout=1200,
                   check=check, SANDBOX_WHEELHOUSE_DIR=str(self.wheelhouse))

    def step(self, name: str) -> subprocess.CompletedProcess[str]:
        if name not in self._steps:
            self._steps[name] = self.molecule(name, check=False)
        return self._steps[name]


@pytest.fixture(scope="package")
def molecule_fleet(base_image: str, wheelhouse: Path,
                   containers_held: Callable[[], contextlib.AbstractContextManager[None]]
                   ) -> Iterator[MoleculeFleet]:
    """The converged fleet (Molecule's converge sequence: create, prepare, converge),
    destroyed when the package's tests on this worker are done (tests/conftest.py
    ``SAME_WORKER`` hands both Molecule files to one worker)."""
    fleet = MoleculeFleet(wheelhouse)
    with containers_held():
        fleet.molecule("destroy")
        try:
            fleet.converge = fleet.molecule("converge")
            yield fleet
        finally:
            fleet.molecule("destroy", check=False)
