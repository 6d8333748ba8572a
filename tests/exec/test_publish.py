"""The publisher of a gVisor run's layers, on real folders: what it replays, and
what the tree's changes meanwhile do to it (``runtime/broker/publish.py``).

The layers are made here by hand (an upper folder as overlayfs leaves it), so
each case can change the tree at a chosen moment of the replay, as a concurrent
run or the user would, and judge the tree after.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from agent_sandbox.runtime.broker.judge import Judge
from agent_sandbox.runtime.broker.publish import Publisher
from agent_sandbox.runtime.broker.target import Place

FSMONITOR = b'[core]\n\tfsmonitor = "touch /nowhere; false"\n'


def publisher(root: Path, home: Path, since_ns: int = 0) -> Publisher:
    return Publisher(Judge([str(root)], str(home)), since_ns)


def test_a_folder_moved_while_it_is_published_is_judged_where_it_is_now(
        tmp_path: Path) -> None:
    """Another run renames the folder the publisher is filling to a repository's
    ``.git`` after its first file: the configuration that follows is judged as that
    repository's (refused), not by the folder's old name."""
    root, home, upper = tmp_path / "w", tmp_path / "h", tmp_path / "up"
    for d in (root / "a", root / "r", home, upper / "a"):
        d.mkdir(parents=True)
    (upper / "a" / "a0").write_text("x")
    (upper / "a" / "config").write_bytes(FSMONITOR)
    (upper / "a" / "gitdir").write_text("x")

    class Racing(Publisher):
        moved = False

        def _entry(self, up: int, name: str, st: os.stat_result, place: Place,
                   depth: int) -> None:
            super()._entry(up, name, st, place, depth)
            if name == "a0" and not self.moved:  # the concurrent run's rename
                os.rename(root / "a", root / "r" / ".git")
                self.moved = True

    p = Racing(Judge([str(root)], str(home)), 0)
    p.publish(str(upper), str(root))
    config = root / "r" / ".git" / "config"
    assert not config.exists() or b"fsmonitor" not in config.read_bytes()
    assert any(path.endswith("/r/.git/config") for path, _ in p.refused), p.refused


def test_what_the_host_changed_meanwhile_stays(tmp_path: Path) -> None:
    """A folder the command removed, to which the user added a file after the layers
    were mounted, stays with that file; a folder nobody touched is removed."""
    root, home, upper = tmp_path / "w", tmp_path / "h", tmp_path / "up"
    for d in (root / "d", root / "old", home, upper):
        d.mkdir(parents=True)
    (root / "old" / "f").write_text("x")
    since = time.time_ns()
    time.sleep(0.05)
    (root / "d" / "user-notes.txt").write_text("user work\n")
    for name in ("d", "old"):  # whiteouts: the command removed both
        os.mknod(upper / name, 0o600 | 0o020000, 0)
    p = publisher(root, home, since)
    p.publish(str(upper), str(root))
    assert (root / "d" / "user-notes.txt").read_text() == "user work\n"
    assert not (root / "old").exists()
    assert any("changed on the host" in why for _, why in p.refused), p.refused


def test_a_mode_change_is_judged_and_depth_is_bounded(tmp_path: Path) -> None:
    """The layer's mode of the user's ``.git`` and ``hooks`` is not applied (judged as
    ``chmod``); a chain of folders deeper than the bound is said, not published,
    and the rest is published."""
    root, home, upper = tmp_path / "w", tmp_path / "h", tmp_path / "up"
    for d in (root / "r" / ".git" / "hooks", home, upper / "r" / ".git" / "hooks",
              upper / "zz"):
        d.mkdir(parents=True)
    (root / "r" / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    os.chmod(upper / "r" / ".git", 0o1777)
    os.chmod(upper / "r" / ".git" / "hooks", 0o777)
    deep = upper.joinpath(*["a"] * 230)
    deep.mkdir(parents=True)
    (upper / "zz" / "f").write_text("after\n")
    p = publisher(root, home)
    p.publish(str(upper), str(root))
    assert (root / "r" / ".git").stat().st_mode & 0o7777 == 0o755
    assert (root / "r" / ".git" / "hooks").stat().st_mode & 0o7777 == 0o755
    assert (root / "zz" / "f").read_text() == "after\n"
    assert any("deeper than" in why for _, why in p.refused), p.refused


def test_a_removed_tree_with_protected_names_inside_is_removed(tmp_path: Path) -> None:
    """``rm -rf node_modules`` in a run, with a package's ``.vscode`` and ``.git``
    inside: published as the calls were made (contents first, then each emptied
    folder), so the tree goes as it does under bwrap; the user's own project
    ``.vscode`` beside it stays."""
    root, home, upper = tmp_path / "w", tmp_path / "h", tmp_path / "up"
    pkg = root / "node_modules" / "pkg"
    for d in (pkg / ".vscode", pkg / "lib", root / ".vscode", home, upper):
        d.mkdir(parents=True)
    (pkg / ".vscode" / "settings.json").write_text("{}")
    (pkg / "lib" / "index.js").write_text("1")
    (root / ".vscode" / "settings.json").write_text("{}")
    since = time.time_ns()
    time.sleep(0.05)
    os.mknod(upper / "node_modules", 0o600 | 0o020000, 0)  # the whiteout rm -rf leaves
    p = publisher(root, home, since)
    p.publish(str(upper), str(root))
    assert not (root / "node_modules").exists(), p.refused
    assert (root / ".vscode" / "settings.json").exists()
