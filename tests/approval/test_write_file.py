"""Approved file writes (Write, Edit, MultiEdit) are applied inside the repository's
sandbox, never by path on the host (``approval/approved_write.py``).

Judged from the host: what the file holds afterwards, what ``.git/config`` and a
secret outside the repository hold, and the result the runner reports. The race
cases run a hostile command in a sandbox of its own that keeps rearranging the
tree while approved writes are applied.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from agent_sandbox.approval.executor import apply_write

from .conftest import PY, REPO, make_repo

SANDBOX = str(REPO / ".venv" / "bin" / "sandbox")
PAYLOAD = "[core]\n\tfsmonitor = echo pwned\n"


def req(repo: Path, tool: str = "Write", **params: Any) -> dict[str, Any]:
    return {"id": "20261201-000000-write", "tool": tool, "kind": "write", "cwd": str(repo),
            "params": params}


def git_repo(tmp_path: Path) -> Path:
    repo = make_repo(tmp_path / "repo")
    subprocess.run(["git", "init", "-q", str(repo)], check=True, capture_output=True)
    (repo / "src/x").mkdir(parents=True)
    return repo


def test_write_edit_multiedit_land_as_approved(tmp_path: Path) -> None:
    repo = git_repo(tmp_path)
    r = apply_write(str(repo), req(repo, file_path="src/x/a.txt", content="one two two\n"))
    assert r["status"] == "completed", r
    assert (repo / "src/x/a.txt").read_text() == "one two two\n"
    os.chmod(repo / "src/x/a.txt", 0o750)
    r = apply_write(str(repo), req(repo, "Edit", file_path=str(repo / "src/x/a.txt"),
                                   old_string="two", new_string="2"))
    assert r["status"] == "completed", r
    assert (repo / "src/x/a.txt").read_text() == "one 2 two\n"
    assert (repo / "src/x/a.txt").stat().st_mode & 0o777 == 0o750  # an edit keeps the mode
    r = apply_write(str(repo), req(repo, "MultiEdit", file_path="src/x/a.txt", edits=[
        {"old_string": "one", "new_string": "1"},
        {"old_string": "two", "new_string": "2", "replace_all": True}]))
    assert r["status"] == "completed", r
    assert (repo / "src/x/a.txt").read_text() == "1 2 2\n"
    r = apply_write(str(repo), req(repo, "Edit", file_path="src/x/a.txt",
                                   old_string="absent", new_string="x"))
    assert r["status"] == "failed" and "not found" in r["reason"]
    assert (repo / "src/x/a.txt").read_text() == "1 2 2\n"
    assert [p.name for p in (repo / "src/x").iterdir()] == ["a.txt"]  # no temporary left


def test_protected_and_unwritable_targets_change_nothing(tmp_path: Path) -> None:
    repo = git_repo(tmp_path)
    before = (repo / ".git/config").read_text()
    r = apply_write(str(repo), req(repo, file_path=".git/config", content=PAYLOAD))
    assert r["status"] == "refused"
    # a link to git metadata is resolved before the check
    (repo / "src/link").symlink_to("../.git")
    r = apply_write(str(repo), req(repo, file_path="src/link/config", content=PAYLOAD))
    assert r["status"] == "refused"
    assert (repo / ".git/config").read_text() == before
    outside = tmp_path / "outside.txt"  # not a writable root of the repository's sandbox
    r = apply_write(str(repo), req(repo, file_path=str(outside), content="x"))
    assert r["status"] == "failed" and not outside.exists(), r
    bad = [req(repo, file_path="a", content=3), req(repo, "Edit", file_path="a"),
           req(repo, "MultiEdit", file_path="a", edits=[]), req(repo, file_path="a\x00b",
                                                              content="x")]
    for b in bad:
        assert apply_write(str(repo), b)["status"] == "failed", b
    assert not (repo / "a").exists()


def test_an_unconnected_repository_writes_nothing(tmp_path: Path) -> None:
    repo = git_repo(tmp_path)
    os.unlink(repo / ".sandbox/srt-settings.json")
    r = apply_write(str(repo), req(repo, file_path="src/x/a.txt", content="x"))
    assert r["status"] == "failed" and "sandbox init" in r["reason"]
    assert not (repo / "src/x/a.txt").exists()


# a hostile command in its own sandbox swaps src/x with another entry as fast as it
# can (three renames: the sandbox answers RENAME_EXCHANGE with EINVAL) while approved
# writes are applied
FLIPPER = """
import os, sys, time
os.chdir(sys.argv[1])
other = sys.argv[2]
if sys.argv[3] == "link":
    os.symlink(other, "src/y")
    other = "src/y"
open("ready", "w").close()
n = 0
end = time.time() + 20
while time.time() < end and not os.path.exists("stop"):
    try:
        os.rename("src/x", "src/x.swap")
        os.rename(other, "src/x")
        os.rename("src/x.swap", other)
        n += 1
    except OSError:
        pass
open("swaps", "w").write(str(n))
"""


def race(tmp_path: Path, repo: Path, other: str, how: str, request: dict[str, Any],
         seconds: float = 4.0) -> tuple[list[str], int]:
    settings = tmp_path / "flipper.json"
    settings.write_text(json.dumps({
        "network": {"allowedDomains": [], "deniedDomains": []},
        "filesystem": {"denyRead": [], "allowWrite": [str(repo)], "denyWrite": []}}))
    script = tmp_path / "flip.py"
    script.write_text(FLIPPER)
    said = (tmp_path / "flipper.err").open("wb")
    proc = subprocess.Popen([SANDBOX, "exec", "--settings", str(settings), "--", PY,
                             str(script), str(repo), other, how], cwd=repo,
                            stdout=subprocess.DEVNULL, stderr=said)
    said.close()
    statuses = []
    try:
        deadline = time.monotonic() + 60  # a loaded machine starts sandboxes slowly
        while not (repo / "ready").exists():
            assert time.monotonic() < deadline and proc.poll() is None, (
                "flipper did not start", (tmp_path / "flipper.err").read_text())
            time.sleep(0.02)
        end = time.monotonic() + seconds
        # on a loaded machine a few more tries, until one lands between two swaps
        longest = time.monotonic() + 3 * seconds
        while time.monotonic() < end or (
                "completed" not in statuses and time.monotonic() < longest):
            statuses.append(apply_write(str(repo), request)["status"])
    finally:
        (repo / "stop").touch()
        proc.wait(timeout=60)
    return statuses, int((repo / "swaps").read_text())


@pytest.mark.parametrize("other,how", [("../.git", "link"), (".git", "folder"),
                                       (".git/hooks", "folder")])
def test_a_tree_rearranged_during_the_write_keeps_git_metadata(
        tmp_path: Path, other: str, how: str) -> None:
    """src/x swapped with a link to .git, with .git itself, or with its hooks
    folder: the approved bytes never reach git metadata, and what git runs stays
    as it was (judged by the host's git). The host-side write this replaced let
    the link case land in .git/config within a few dozen tries."""
    repo = git_repo(tmp_path)
    config = (repo / ".git/config").read_text()
    statuses, swaps = race(tmp_path, repo, other, how,
                           req(repo, file_path="src/x/config", content=PAYLOAD))
    assert statuses, "no write was tried"
    if how == "link":  # the race is real: the tree did change under the writes
        assert swaps > 20 and "completed" in statuses, (swaps, statuses)
    # a folder with git metadata cannot be moved at all
    found = subprocess.run(["git", "-C", str(repo), "config", "--get", "core.fsmonitor"],
                           capture_output=True, text=True, check=False)
    assert found.stdout == "", "git reads the approved bytes as its own config"
    for p in (repo / ".git", repo / "src/x"):
        if (p / "HEAD").exists():  # wherever the repository's git folder now is
            assert (p / "config").read_text() == config
            assert not (p / "hooks" / "config").exists()


def test_an_edit_never_reads_through_a_swapped_link(tmp_path: Path) -> None:
    """An Edit of src/x/notes whose folder is swapped with a link to a folder of
    secrets the repository's sandbox may not read: the secret never reaches a file
    in the repository."""
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "notes").write_text("SECRET-4c1d marker\n")
    repo = git_repo(tmp_path)
    settings = json.loads((repo / ".sandbox/srt-settings.json").read_text())
    settings["filesystem"]["denyRead"] = [str(secrets)]
    (repo / ".sandbox/srt-settings.json").write_text(json.dumps(settings))
    (repo / "src/x/notes").write_text("plain marker\n")
    statuses, swaps = race(tmp_path, repo, str(secrets), "link",
                           req(repo, "Edit", file_path="src/x/notes", old_string="marker",
                               new_string="kept"))
    assert swaps > 20 and statuses, (swaps, statuses)
    for p in repo.rglob("*"):
        if p.is_file() and not p.is_symlink() and ".sandbox" not in p.parts:
            assert "SECRET-4c1d" not in p.read_text(errors="ignore"), p
    assert (secrets / "notes").read_text() == "SECRET-4c1d marker\n"
