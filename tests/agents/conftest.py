"""Fixtures for the real-client suite: skip cleanly when the clients are not
installed (``make setup`` installs them), one World per test."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from .harness import World, missing_clients


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/agents/" in str(item.fspath):
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def world() -> Iterator[World]:
    if missing := missing_clients():
        pytest.skip(f"agent clients not installed (run make setup): {', '.join(missing)}")
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is required")
    w = World.create()
    try:
        yield w
    finally:
        w.cleanup()
