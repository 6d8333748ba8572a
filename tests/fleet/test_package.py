"""The package works without this repository's Makefile: a wheel built with plain
``python -m build`` (directly, and through the sdist), installed into a fresh
virtual environment, renders every host of ``inventories/example-fleet`` to the
same bytes and modes as the checkout.

The build runs on a copy of what a clean checkout holds (``pyproject.toml``,
``README.md``, ``src/``, symbolic links kept as links), so a template or a
data file reached only through the repository's layout is missing from the
wheel and the render fails. Building uses the project venv's setuptools
(``--no-isolation``, offline); the fresh venv gets the wheel alone (``--no-deps``)
and finds the third-party dependencies through one path entry naming this venv's
site-packages, where no ``agent_sandbox`` is importable (checked).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from .conftest import EXAMPLE_FLEET, REPO

# Prints {host: {target: [sha256, mode, kind]}} for every host of an inventory,
# and where agent_sandbox was imported from.
RENDER_ALL = r"""
import hashlib, json, sys
import agent_sandbox
from agent_sandbox.fleet import FleetRenderer
out = {"module": agent_sandbox.__file__, "hosts": {}}
for host, arts in FleetRenderer.from_path(sys.argv[1]):
    out["hosts"][host] = {t: [hashlib.sha256(a.content).hexdigest(), a.mode, a.kind]
                          for t, a in sorted(arts.items())}
print(json.dumps(out, sort_keys=True))
"""


def clean_copy(dest: Path) -> Path:
    """What a clean checkout gives the build: no caches, no egg-info, no build/."""
    dest.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, dest / name)
    shutil.copytree(REPO / "src", dest / "src", symlinks=True, ignore=shutil.ignore_patterns(
        "__pycache__", "*.pyc", "*.egg-info", ".mypy_cache"))
    return dest


def build(source: Path, outdir: Path, *flags: str) -> list[Path]:
    proc = subprocess.run([sys.executable, "-m", "build", "--no-isolation", *flags,
                           "--outdir", str(outdir), str(source)],
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return sorted(outdir.iterdir())


def fresh_venv(path: Path, wheel: Path) -> Path:
    """A new virtualenv holding the wheel and nothing else of ours. It gets no pip
    of its own (ensurepip costs 5-30 s a venv on a loaded machine): this
    environment's pip installs the wheel into it (``pip --python``)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True,
                   timeout=300)
    py = path / "bin" / "python"
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q",
                           "--no-index", "--no-deps", "--disable-pip-version-check",
                           str(wheel)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    purelib = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True, text=True, check=True).stdout.strip()
    deps = sysconfig.get_path("purelib")
    assert not (Path(deps) / "agent_sandbox").exists(), "the dev venv must not hold the package"
    (Path(purelib) / "zz-agent-sandbox-test-deps.pth").write_text(deps + "\n")
    return py


def render_all(py: Path, inventory: Path, cwd: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    proc = subprocess.run([str(py), "-I", "-c", RENDER_ALL, str(inventory)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def checkout_render(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = render_all(Path(sys.executable), EXAMPLE_FLEET, tmp_path_factory.mktemp("cwd"))
    assert len(out["hosts"]) >= 5 and all(out["hosts"].values())
    return out["hosts"]


def check_installed_render(tmp: Path, wheel: Path, expected: dict) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
    assert any(n.startswith("agent_sandbox/templates/") and n.endswith(".j2") for n in names)
    py = fresh_venv(tmp / "venv", wheel)
    inventory = tmp / "example-fleet"  # a copy: nothing beside it but what the wheel brings
    shutil.copytree(EXAMPLE_FLEET, inventory)
    got = render_all(py, inventory, tmp)
    assert Path(got["module"]).is_relative_to(tmp / "venv"), got["module"]
    assert got["hosts"] == expected
    # the console script of the installed wheel renders too
    sandbox = py.parent / "sandbox"
    proc = subprocess.run([str(sandbox), "render", str(inventory), "--host", "dev-linux-01",
                           "--out", str(tmp / "out")], cwd=tmp, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    manifest = json.loads((tmp / "out" / "manifest.json").read_text())
    assert manifest


def test_plain_wheel_renders_the_example_fleet(tmp_path: Path, checkout_render: dict) -> None:
    source = clean_copy(tmp_path / "checkout")
    built = build(source, tmp_path / "dist", "--wheel")
    wheels = [p for p in built if p.suffix == ".whl"]
    assert len(wheels) == 1, built
    check_installed_render(tmp_path, wheels[0], checkout_render)


def test_wheel_from_the_sdist_renders_the_example_fleet(tmp_path: Path,
                                                        checkout_render: dict) -> None:
    source = clean_copy(tmp_path / "checkout")
    built = build(source, tmp_path / "dist")  # sdist, then the wheel built from it
    wheels = [p for p in built if p.suffix == ".whl"]
    assert len(wheels) == 1 and any(p.name.endswith(".tar.gz") for p in built), built
    check_installed_render(tmp_path, wheels[0], checkout_render)


def test_a_wheel_without_templates_is_caught(tmp_path: Path, checkout_render: dict) -> None:
    """Control: the same build with the templates left out of the package fails to
    render (so the comparison above is not vacuous)."""
    source = clean_copy(tmp_path / "checkout")
    shutil.rmtree(source / "src" / "agent_sandbox" / "templates")
    built = build(source, tmp_path / "dist", "--wheel")
    wheel = next(p for p in built if p.suffix == ".whl")
    py = fresh_venv(tmp_path / "venv", wheel)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([str(py), "-I", "-c", RENDER_ALL, str(EXAMPLE_FLEET)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode != 0 or json.loads(proc.stdout)["hosts"] != checkout_render
