"""An approved command runs in the folder it was approved for, resolved when it runs:
a link swapped in after the approval (by a sandboxed command, which can write the
repository) cannot take it, with this repository's settings, into another folder.
Judged from the host: where the command's marker file lands."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from agent_sandbox.approval.executor import run_command

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")


def request(cwd: Path) -> dict[str, object]:
    return {"id": "20261201T000000-000000000001", "cwd": str(cwd),
            "params": {"command": "echo ran > marker"}}


def test_control_runs_in_the_approved_folder(repo: Path) -> None:
    (repo / "sub").mkdir()
    out = run_command(str(repo), request(repo / "sub"))
    assert out["status"] == "completed", out
    assert (repo / "sub" / "marker").read_text() == "ran\n"


@pytest.mark.parametrize("swap", ["link_to_outside", "link_to_parent", "dotdot"])
def test_folder_swapped_after_approval_runs_nowhere(repo: Path, tmp_path: Path,
                                                    swap: str) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    if swap == "link_to_outside":
        (repo / "sub").symlink_to(outside)
        cwd = repo / "sub"
    elif swap == "link_to_parent":
        (repo / "sub").symlink_to("..")
        cwd = repo / "sub"
    else:
        cwd = repo / ".." / "elsewhere"
    out = run_command(str(repo), request(cwd))
    assert out["status"] == "failed" and "outside the repository" in str(out["reason"]), out
    assert not (outside / "marker").exists()
    assert not (tmp_path / "marker").exists()
