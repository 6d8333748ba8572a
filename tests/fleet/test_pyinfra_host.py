"""The pyinfra deploy on a fresh container host, a peer of Molecule's (see
test_molecule.py): the same spec host rendered, the runtime installed from the
same wheelhouse, into a container booting systemd with the same developer
account.

- pyinfra installs the bytes and modes the CLI renderer gives, and the same
  manifest (test_molecule.py proves the Ansible roles install those bytes too:
  the three front ends agree);
- the runtime it installs proves its isolation: the host audit folder, the
  proxy under systemd, and `sandbox verify` passing every check.

A file of its own so that it runs beside the Molecule scenario (another worker)
instead of after it.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import run, tool
from .test_molecule import HOST, PYINFRA_HOST, SPEC, UNIT, cli_render, installed, podman

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("containers_up")]


@pytest.fixture(scope="module")
def pyinfra_host(base_image: str, wheelhouse: Path) -> Iterator[str]:
    """A fresh host for pyinfra, booting systemd like Molecule's, with the same
    developer account; pyinfra installs the runtime too."""
    podman("rm", "-f", "-t", "0", PYINFRA_HOST)
    try:
        started = podman("run", "-d", "--name", PYINFRA_HOST, "--hostname", PYINFRA_HOST,
                         "--network", "none", "--privileged", "--systemd", "always",
                         base_image, "/sbin/init")
        assert started.returncode == 0, started.stderr
        assert podman("exec", PYINFRA_HOST, "useradd", "-m", "dev").returncode == 0
        assert podman("exec", PYINFRA_HOST, "install", "-d", "-o", "dev",
                      "/home/dev/src/app").returncode == 0
        run([tool("pyinfra"), "-y", f"@podman/{PYINFRA_HOST}", "deploy/pyinfra/deploy.py",
             "--data", f"sandbox_render_host={HOST}"], timeout=900,
            SANDBOX_INVENTORY=str(SPEC), SANDBOX_INSTALL_RUNTIME="1",
            SANDBOX_WHEELHOUSE_DIR=str(wheelhouse))
        yield PYINFRA_HOST
    finally:
        podman("rm", "-f", "-t", "0", PYINFRA_HOST)


def test_pyinfra_installs_the_cli_rendering(pyinfra_host: str, tmp_path: Path) -> None:
    manifest = cli_render(HOST, tmp_path / "cli")
    want = {a["target"]: (a["sha256"], a["mode"]) for a in manifest["artifacts"]}
    assert len(want) > 10
    cli_manifest = (tmp_path / "cli" / "manifest.json").read_text()
    assert installed(pyinfra_host, sorted(want)) == want, pyinfra_host
    got = podman("exec", pyinfra_host, "cat", "/etc/agent-sandbox/manifest.json")
    assert got.stdout == cli_manifest, pyinfra_host


def test_pyinfra_installs_a_runtime_that_proves_its_isolation(pyinfra_host: str) -> None:
    """The host pyinfra made is a peer of Ansible's: the host audit folder, the
    proxy under systemd, and `sandbox verify` passing every check."""

    def on_host(*argv: str) -> subprocess.CompletedProcess[str]:
        return podman("exec", pyinfra_host, *argv)

    assert on_host("systemctl", "is-active", UNIT).stdout.strip() == "active"
    assert on_host("stat", "-c", "%a %U", "/var/log/agent-sandbox").stdout.split() == [
        "700", "root"]
    verify = on_host("/usr/local/bin/sandbox", "verify")
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "6/6 checks passed" in verify.stdout + verify.stderr
    drift = on_host("/usr/local/bin/sandbox", "verify", "--drift")
    assert drift.returncode == 0, drift.stdout + drift.stderr
