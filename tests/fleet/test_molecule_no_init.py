"""Molecule's host without an init system (``sandbox-molecule-noinit``: a container
whose PID 1 is not an init system), converged with the Linux roles by the default
scenario beside its systemd host (one converge for both: tests/fleet/conftest.py
``molecule_fleet``). ``sandbox install proxy-service`` runs the proxy detached
there; the scenario's sequence after the converge (idempotence with zero changes,
check mode, ``sandbox verify`` and the detached proxy's pid) must pass for it."""

from __future__ import annotations

import re

import pytest

from .conftest import MoleculeFleet, changed_tasks, recap

pytestmark = pytest.mark.slow

HOST = "sandbox-molecule-noinit"


def task_results(out: str, task: str) -> str:
    """What the hosts reported for the task named ``task`` (its last run in ``out``)."""
    parts = re.split(r"^.*TASK \[", out, flags=re.M)
    found = [p for p in parts if p.startswith(task)]
    assert found, out[-3000:]
    return found[-1]


def test_no_init_scenario_passes_the_molecule_sequence(molecule_fleet: MoleculeFleet) -> None:
    assert molecule_fleet.converge is not None
    converge = molecule_fleet.converge.stdout
    assert recap(converge, HOST)["failed"] == 0, changed_tasks(converge)
    idempotence = molecule_fleet.step("idempotence")
    assert idempotence.returncode == 0, (idempotence.stdout + idempotence.stderr)[-8000:]
    assert recap(idempotence.stdout, HOST)["changed"] == 0, changed_tasks(idempotence.stdout)
    check = molecule_fleet.step("check")
    assert check.returncode == 0, (check.stdout + check.stderr)[-8000:]
    counts = recap(check.stdout, HOST)
    assert counts["failed"] == 0 and counts["changed"] == 0, changed_tasks(check.stdout)
    verify = molecule_fleet.step("verify")
    assert verify.returncode == 0, (verify.stdout + verify.stderr)[-8000:]
    assert recap(verify.stdout, HOST)["failed"] == 0
    detached = task_results(verify.stdout, "Require the proxy to be running detached")
    assert f"ok: [{HOST}]" in detached, detached
