"""The sweep and the planner under a command that keeps swapping a folder for a link.

A command in one sandbox exchanges ``src/x`` (a folder) with ``src/y`` (a link to
``../.git``) without pause while other runs start and end over the same
writable root. Their walks must list only what is really below the root, and
their sweeps must never move what existed before the run: judged from the host,
the repository's own ``.git`` stays where it is, with the same inodes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import FLIPPER

from agent_sandbox.runtime.bwrap.fsview import RealFs, WalkError
from agent_sandbox.runtime.bwrap.sweep import SweepFs, find_new, identities

PY = sys.executable
SANDBOX = [PY, "-m", "agent_sandbox"]

needs = pytest.mark.skipif(shutil.which("bwrap") is None or shutil.which("git") is None,
                           reason="bubblewrap or git missing")



def _env(home: Path) -> dict[str, str]:
    home.mkdir(exist_ok=True)
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
            "GIT_CONFIG_NOSYSTEM": "1", "LANG": "C"}


def _repo(tmp_path: Path) -> tuple[Path, Path]:
    repo = tmp_path / "repo"
    (repo / "src/x").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True, env=_env(tmp_path / "h"))
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({
        "network": {"allowedDomains": [], "deniedDomains": []},
        "filesystem": {"denyRead": [], "allowWrite": [str(repo)], "denyWrite": []}}))
    return repo, settings


def _inodes(repo: Path) -> dict[str, int]:
    return {n: os.lstat(repo / n).st_ino for n in (".git", ".git/HEAD", ".git/config")}


@needs
def test_sweeps_never_move_the_real_git_dir(tmp_path: Path) -> None:
    repo, settings = _repo(tmp_path)
    before = _inodes(repo)
    top = sorted(os.listdir(repo))
    flipper = tmp_path / "flip.py"
    flipper.write_text(FLIPPER)
    proc = subprocess.Popen([*SANDBOX, "exec", "--settings", str(settings), "--", PY,
                             str(flipper), str(repo), "120"], cwd=repo,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    said = []
    try:
        deadline = time.monotonic() + 60
        while not (repo / "ready").exists():
            assert time.monotonic() < deadline and proc.poll() is None, "flipper did not start"
            time.sleep(0.02)
        def one(_i: int) -> str:
            return subprocess.run([*SANDBOX, "exec", "--settings", str(settings), "--", "true"],
                                  cwd=repo, capture_output=True, text=True,
                                  timeout=120).stderr

        with ThreadPoolExecutor(3) as pool:  # runs starting and ending over each other
            said += pool.map(one, range(40))
    finally:
        (repo / "stop").touch()
        _, err = proc.communicate(timeout=60)
    said.append(err)
    assert _inodes(repo) == before, "".join(said)
    assert sorted(os.listdir(repo)) == sorted([*top, "ready", "stop"]), "".join(said)
    assert not any("quarantine" in n for n in os.listdir(repo)), "".join(said)
    for root, dirs, files in os.walk(repo / ".git"):
        assert not any("quarantine" in n for n in dirs + files), root
    r = subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True,
                       text=True, env=_env(tmp_path / "h"), timeout=30)
    assert r.returncode == 0, r.stderr


@needs
def test_control_a_new_git_dir_is_quarantined(tmp_path: Path) -> None:
    repo, settings = _repo(tmp_path)
    before = _inodes(repo)
    r = subprocess.run([*SANDBOX, "exec", "--settings", str(settings), "--", "sh", "-c",
                        "mkdir -p sub && echo 'gitdir: ../elsewhere' > sub/.git"],
                       cwd=repo, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert not (repo / "sub/.git").exists(), r.stderr
    assert any(n.startswith(".git.sandbox-quarantine-") for n in os.listdir(repo / "sub"))
    assert _inodes(repo) == before


class _Swapping(RealFs):
    """Swaps ``src/x`` for a link to ``../.git`` right after ``src`` is listed."""

    def _list(self, fd, d, root, out):  # type: ignore[no-untyped-def]
        subs = super()._list(fd, d, root, out)
        if d.endswith("/src") and not os.path.islink(os.path.join(d, "x")):
            os.rename(os.path.join(d, "x"), os.path.join(d, "x.real"))
            os.symlink("../.git", os.path.join(d, "x"))
        return subs


def test_walk_not_through_a_swapped_in_link(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "src/x").mkdir(parents=True)
    (repo / ".git").mkdir()
    (repo / ".git/HEAD").write_text("ref: refs/heads/main\n")
    with pytest.raises(WalkError, match="changed while the sandbox was planned"):
        _Swapping().walk(str(repo))
    os.unlink(repo / "src/x")
    os.rename(repo / "src/x.real", repo / "src/x")

    class Sweeping(_Swapping, SweepFs):
        pass

    walked = dict(Sweeping().walk(str(repo)))
    assert walked[f"{repo}/src/x"] == "l"
    assert not any(p.startswith(f"{repo}/src/x/") for p in walked)


def test_identities_not_through_links_and_moved_folder_kept(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / ".git/HEAD").write_text("ref: refs/heads/main\n")
    (repo / ".git/config").write_text("[core]\n\tfsmonitor = echo pwned\n")
    os.symlink(".git", repo / "y")
    got = identities([f"{repo}/y/HEAD", f"{repo}/.git/HEAD"])
    assert list(got) == [f"{repo}/.git/HEAD"]
    # a folder recorded before the run is never new, under whatever name
    before = identities([f"{repo}/.git"])
    os.rename(repo / ".git", repo / "moved")
    assert find_new([str(repo)], before, "/nonexistent") == []
    assert find_new([str(repo)], {}, "/nonexistent") != []  # control: judged new
