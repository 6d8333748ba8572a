"""Shared fixtures for the macOS, Windows and cluster renderer tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_sandbox.fleet import FleetRenderer

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_FLEET = REPO / "inventories" / "example-fleet"
SCHEMAS = REPO / ".." / "shared" / "schemas"
GOLDEN = Path(__file__).resolve().parent / "golden"


@pytest.fixture(scope="session")
def fleet() -> FleetRenderer:
    return FleetRenderer.from_path(str(EXAMPLE_FLEET))


def hosts_of(os_name: str) -> list[str]:
    fr = FleetRenderer.from_path(str(EXAMPLE_FLEET))
    return [h for h in fr.inventory if fr.facts(h).os == os_name]
