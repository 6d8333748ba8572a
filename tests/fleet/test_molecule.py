"""Molecule's default scenario: create, converge, idempotence (no changes on the
second run), check mode, verify (`sandbox verify` and `--drift` on the host),
destroy. Runs in CI through `make test`."""

from __future__ import annotations

import pytest

from .conftest import run, tool


@pytest.mark.slow
def test_molecule_default_scenario(base_image: str) -> None:
    proc = run([tool("molecule"), "test", "--scenario-name", "default"], timeout=1200,
               check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-8000:]
    for step in ("converge", "idempotence", "check", "verify"):
        assert step in out
    assert "checks passed" in out
