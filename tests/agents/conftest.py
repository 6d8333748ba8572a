"""Fixtures for the real-client suite: skip cleanly when the clients are not
installed (``make setup`` installs them), one World per test (a test with a world
is ``slow``: tests/conftest.py ``SLOW_FIXTURES``)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from .harness import World, missing_clients


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
