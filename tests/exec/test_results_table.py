"""The side-by-side tables the escape and srt suites leave under build/ are
written without following a link planted there (conftest.write_results)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import write_results

from agent_sandbox.below_root import NotBelowRoot


def test_a_link_at_the_tables_name_is_replaced_and_its_target_untouched(tmp_path: Path) -> None:
    build = tmp_path / "build"
    first = write_results("escape-results", "first\n", build)
    target = tmp_path / "elsewhere.txt"
    target.write_text("original\n")
    first.unlink()
    first.symlink_to(target)
    out = write_results("escape-results", "second\n", build)
    assert out == first and not out.is_symlink() and out.read_text() == "second\n"
    assert target.read_text() == "original\n"
    assert sorted(p.name for p in build.iterdir()) == [out.name]  # no temporary left


def test_a_build_folder_that_is_a_link_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "build").symlink_to(elsewhere)
    with pytest.raises(NotBelowRoot, match="is a link"):
        write_results("escape-results", "table\n", tmp_path / "build")
    assert list(elsewhere.iterdir()) == []
