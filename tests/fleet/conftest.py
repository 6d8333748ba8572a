"""Shared helpers for the fleet tests: paths, the environment Ansible and podman
need, and running the project's commands."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
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
