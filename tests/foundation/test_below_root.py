"""below_root: file operations below a trusted root that never follow a link or
leave the root in any component."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from agent_sandbox import below_root
from agent_sandbox.atomic_file import replace_file_at
from agent_sandbox.below_root import NotBelowRoot


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "root"
    (r / "a" / "b").mkdir(parents=True)
    (r / "a" / "b" / "f.txt").write_bytes(b"inside")
    return r


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    o = tmp_path / "outside"
    (o / "b").mkdir(parents=True)
    (o / "secret").write_bytes(b"secret")
    (o / "b" / "f.txt").write_bytes(b"secret too")
    return o


def listing(folder: Path) -> dict[str, tuple[int, bytes]]:
    return {str(p.relative_to(folder)): (p.lstat().st_mode,
                                         b"" if p.is_dir() else p.read_bytes())
            for p in sorted(folder.rglob("*"))}


def test_a_link_in_a_middle_component_is_refused(root: Path, outside: Path) -> None:
    os.symlink(outside, root / "l")
    before = listing(outside)
    with pytest.raises(NotBelowRoot, match=r"/l is a link; .*move it away"):
        below_root.open_folder(str(root), "l/b")
    for call in (lambda: below_root.read_file(str(root), "l/secret"),
                 lambda: below_root.read_file(str(root), "l/b/f.txt"),
                 lambda: below_root.replace_file(str(root), "l/secret", b"x"),
                 lambda: below_root.replace_file(str(root), "l/new/x", b"x", create=True),
                 lambda: below_root.unlink(str(root), "l/secret"),
                 lambda: below_root.remove_tree(str(root), "l/b"),
                 lambda: below_root.remove_empty_folders(str(root), "l"),
                 lambda: below_root.open_folder(str(root), "l/c", create=True)):
        with pytest.raises(NotBelowRoot, match="is a link"):
            call()
    assert listing(outside) == before


def test_a_file_where_a_folder_should_be_is_refused(root: Path) -> None:
    with pytest.raises(NotBelowRoot, match=r"a/b/f.txt is not a folder"):
        below_root.read_file(str(root), "a/b/f.txt/x")


@pytest.mark.parametrize("rel", ["../outside/secret", "a/../../outside/secret", "a//b/f.txt",
                                 "/etc/passwd", "a/./b/f.txt", ""])
def test_dotdot_absolute_and_empty_components_are_refused(root: Path, outside: Path,
                                                          rel: str) -> None:
    with pytest.raises(NotBelowRoot) as info:
        below_root.read_file(str(root), rel)
    assert info.value.errno == errno.EINVAL
    with pytest.raises(NotBelowRoot):
        below_root.replace_file(str(root), rel, b"x", create=True)
    with pytest.raises(NotBelowRoot):
        below_root.unlink(str(root), rel)
    assert (outside / "secret").read_bytes() == b"secret"


def test_a_fifo_as_the_file_is_refused_without_blocking(root: Path) -> None:
    os.mkfifo(root / "a" / "pipe")
    with pytest.raises(NotBelowRoot, match="pipe is not a regular file"):
        below_root.read_file(str(root), "a/pipe")


def test_a_link_or_folder_as_the_file_is_not_read(root: Path, outside: Path) -> None:
    os.symlink(outside / "secret", root / "a" / "ln")
    with pytest.raises(NotBelowRoot, match="ln is a link"):
        below_root.read_file(str(root), "a/ln")
    with pytest.raises(NotBelowRoot, match="not a regular file"):
        below_root.read_file(str(root), "a/b")


def test_read_and_its_limit(root: Path) -> None:
    assert below_root.read_file(str(root), "a/b/f.txt") == b"inside"
    data, st = below_root.read_file_stat(str(root), "a/b/f.txt", limit=6)
    assert data == b"inside" and stat.S_ISREG(st.st_mode)
    with pytest.raises(OSError) as info:
        below_root.read_file(str(root), "a/b/f.txt", limit=5)
    assert info.value.errno == errno.EFBIG
    with pytest.raises(FileNotFoundError):
        below_root.read_file(str(root), "a/missing/f.txt")


def test_create_makes_missing_folders_with_the_mode(root: Path) -> None:
    old = os.umask(0o022)
    try:
        fd = below_root.open_folder(str(root), "a/x/y", create=True, mode=0o700)
    finally:
        os.umask(old)
    try:
        assert os.path.samestat(os.fstat(fd), os.stat(root / "a" / "x" / "y"))
    finally:
        os.close(fd)
    assert stat.S_IMODE((root / "a" / "x").stat().st_mode) == 0o700
    assert stat.S_IMODE((root / "a").stat().st_mode) != 0o700  # existing: untouched
    with pytest.raises(FileNotFoundError):
        below_root.open_folder(str(root), "a/z")
    assert not (root / "a" / "z").exists()


def test_replace_file_replaces_a_link_never_its_target(root: Path, outside: Path) -> None:
    os.symlink(outside / "secret", root / "a" / "ln")
    below_root.replace_file(str(root), "a/ln", b"ours", 0o640, times_ns=(10**9, 2 * 10**9))
    st = (root / "a" / "ln").lstat()
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o640
    assert st.st_mtime_ns == 2 * 10**9
    assert (root / "a" / "ln").read_bytes() == b"ours"
    assert (outside / "secret").read_bytes() == b"secret"
    below_root.replace_file(str(root), "n/m/new", b"x", create=True)
    assert (root / "n" / "m" / "new").read_bytes() == b"x"
    assert [p.name for p in (root / "n" / "m").iterdir()] == ["new"]  # no temporary left


def test_unlink_and_lstat(root: Path, outside: Path) -> None:
    os.symlink(outside / "secret", root / "a" / "ln")
    st = below_root.lstat(str(root), "a/ln")
    assert st is not None and stat.S_ISLNK(st.st_mode)
    assert below_root.unlink(str(root), "a/ln") is True
    assert (outside / "secret").exists() and not os.path.lexists(root / "a" / "ln")
    assert below_root.unlink(str(root), "a/ln") is False
    assert below_root.unlink(str(root), "missing/x") is False
    assert below_root.lstat(str(root), "missing/x") is None


def test_remove_tree_removes_links_inside_not_their_targets(root: Path, outside: Path) -> None:
    before = listing(outside)
    os.symlink(outside, root / "a" / "b" / "out")
    assert below_root.remove_tree(str(root), "a") is True
    assert not (root / "a").exists() and listing(outside) == before
    assert below_root.remove_tree(str(root), "a") is False


def test_remove_empty_folders_keeps_any_file_or_link(root: Path, outside: Path) -> None:
    (root / "e" / "f" / "g").mkdir(parents=True)
    assert below_root.remove_empty_folders(str(root), "e") is True
    assert not (root / "e").exists()
    assert below_root.remove_empty_folders(str(root), "a") is False
    assert (root / "a" / "b" / "f.txt").exists()
    (root / "k").mkdir()
    os.symlink(outside, root / "k" / "out")
    assert below_root.remove_empty_folders(str(root), "k") is False
    assert (root / "k" / "out").is_symlink() and (outside / "secret").exists()


def test_replace_file_at_takes_a_plain_name_only(tmp_path: Path) -> None:
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        replace_file_at(fd, "x", b"data", 0o600)
        for bad in ("a/x", "..", ""):
            with pytest.raises(ValueError):
                replace_file_at(fd, bad, b"data")
    finally:
        os.close(fd)
    assert (tmp_path / "x").read_bytes() == b"data"
