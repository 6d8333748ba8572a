"""The suite's run order (tests/conftest.py ``LONGEST_FIRST``) names files that
exist: a renamed or split file must be named again, or the longest files would
quietly run last. It changes the order only; it never selects or skips a test."""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]


@pytest.fixture
def longest_first(request: pytest.FixtureRequest) -> tuple[str, ...]:
    conftest = request.config.pluginmanager.get_plugin(str(TESTS / "conftest.py"))
    assert conftest is not None
    names: tuple[str, ...] = conftest.LONGEST_FIRST
    assert names  # an empty order would prove nothing below
    return names


def test_every_file_the_order_names_exists(longest_first: tuple[str, ...]) -> None:
    missing = [name for name in longest_first if not (TESTS / name).is_file()]
    assert missing == []


def test_the_order_names_each_file_once(longest_first: tuple[str, ...]) -> None:
    assert len(set(longest_first)) == len(longest_first)
