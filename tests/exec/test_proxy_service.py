"""The proxy run as a service imports nothing from where a sandbox can write.

The unit (and every test and bench that starts the service) runs
``PYTHON -I -m agent_sandbox.runtime.proxy`` from ``/``. Judged from the host:
a package planted in the working directory, or named by ``PYTHONPATH``, leaves
a marker file when it is imported. The control starts the same command
without ``-I`` and shows the plant does fire.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def _plant(tmp_path: Path) -> tuple[Path, Path]:
    """A folder a sandbox could write, holding a fake ``agent_sandbox`` package."""
    writable = tmp_path / "writable"
    pkg = writable / "agent_sandbox"
    pkg.mkdir(parents=True)
    marker = tmp_path / "planted-code-ran"
    (pkg / "__init__.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    return writable, marker


@pytest.mark.parametrize("how", ["cwd", "PYTHONPATH"])
def test_isolated_service_ignores_a_planted_package(tmp_path: Path, how: str) -> None:
    writable, marker = _plant(tmp_path)
    env = {"PATH": "/usr/bin:/bin"}
    if how == "PYTHONPATH":
        env["PYTHONPATH"] = str(writable)
    cwd = writable if how == "cwd" else Path("/")

    def start(*flags: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([sys.executable, *flags, "-m", "agent_sandbox.runtime.proxy",
                               "--help"], cwd=cwd, env=env, capture_output=True, timeout=60)

    # the control: without -I the planted package is what runs
    start()
    assert marker.exists(), "the plant did not fire: this test could not fail"
    marker.unlink()
    r = start("-I")
    assert r.returncode == 0 and b"--settings" in r.stdout
    assert not marker.exists()
