"""Shared fixtures for the macOS, Windows and cluster renderer tests."""

from __future__ import annotations

from pathlib import Path

import pytest

import openbao_dev
from agent_sandbox.fleet import FleetRenderer

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_FLEET = REPO / "inventories" / "example-fleet"
GOLDEN = Path(__file__).resolve().parent / "golden"


@pytest.fixture(scope="session")
def fleet() -> FleetRenderer:
    return FleetRenderer.from_path(str(EXAMPLE_FLEET))


def hosts_of(os_name: str) -> list[str]:
    fr = FleetRenderer.from_path(str(EXAMPLE_FLEET))
    return [h for h in fr.inventory if fr.facts(h).os == os_name]


# the dev server is shared with the action broker's tests (tests/openbao_dev.py)
_free_port = openbao_dev.free_port
ROOT_TOKEN = openbao_dev.ROOT_TOKEN


@pytest.fixture(scope="module")
def bao_server(tmp_path_factory):
    with openbao_dev.bao_dev_server(tmp_path_factory.mktemp("bao")) as address:
        yield address


@pytest.fixture(scope="session")
def engine_config() -> dict:
    return openbao_dev.stand_in_kubernetes_config()
