"""Molecule's second scenario, ``no-init``: a container host whose PID 1 is not an
init system, converged with the Linux roles through the default scenario's
playbooks. ``sandbox install proxy-service`` runs the proxy detached there; the
whole test sequence (converge, idempotence with zero changes, check mode,
``sandbox verify`` and the detached proxy's pid) must pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import run, tool

pytestmark = pytest.mark.slow


def test_no_init_scenario_passes_the_molecule_sequence(base_image: str,
                                                       wheelhouse: Path) -> None:
    proc = run([tool("molecule"), "test", "--scenario-name", "no-init"], timeout=1800,
               check=False, SANDBOX_WHEELHOUSE_DIR=str(wheelhouse))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-8000:]
    assert "idempotence" in out.lower()
    assert "Require the proxy to be running detached" in out
