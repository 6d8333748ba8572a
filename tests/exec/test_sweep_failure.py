"""A sweep that cannot finish fails closed.

The sweep after a run disarms the protected names the command created (a nested
``.git`` with a hook or an fsmonitor, an ``.envrc``). Whatever the command made
can also be aimed at the sweep itself: a tree it cannot walk, a link chain that
makes a resolver raise. Such a failure is said and recorded, the sweep stays
owed, and no later start goes ahead until it is done: a start that went ahead
would count the planted files as already there and never judge them.

Judged from the host: whether ``git status`` there runs the planted fsmonitor.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import audit_records

from agent_sandbox.runtime.bwrap import sweep
from agent_sandbox.runtime.bwrap.fsview import WalkError
from agent_sandbox.runtime.failures import SandboxStartError
from agent_sandbox.runtime.run import run_sandboxed

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None or shutil.which("git") is None,
                                reason="bubblewrap or git missing")

PY = sys.executable


def _host_git_status(where: Path, home: Path) -> None:
    home.mkdir(exist_ok=True)
    subprocess.run(["git", "status"], cwd=where, capture_output=True, timeout=30,
                   env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
                        "GIT_CONFIG_NOSYSTEM": "1", "LANG": "C"})


def _plant_git(marker: Path) -> str:
    """A nested repository's ``.git`` file pointing at a git folder elsewhere, whose
    fsmonitor would run on the host's next ``git status`` there: the broker lets a
    run make the file (the git folder is the test's, ``box``); the sweep disarms it."""
    return f"mkdir -p evil && echo 'gitdir: {marker.parent}/store' > evil/.git && cd evil"


@pytest.fixture
def box(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """Its own state (owed markers) and audit folders: a sweep left owed here must
    not hold up another test."""
    work = tmp_path / "w"
    work.mkdir()
    monkeypatch.setenv("AGENT_SANDBOX_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("AGENT_SANDBOX_AUDIT_DIR", str(tmp_path / "audit"))
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({
        "network": {"allowedDomains": [], "deniedDomains": []},
        "filesystem": {"denyRead": [], "allowWrite": [str(work)], "denyWrite": []}}))
    # the git folder a planted ``.git`` file points to (``_plant_git``), outside the tree
    store = tmp_path / "store"
    subprocess.run(["git", "init", "-q", "--bare", str(store)], check=True)
    subprocess.run(["git", "--git-dir", str(store), "config", "core.fsmonitor",
                    f"touch {tmp_path / 'ran'}; false"], check=True)
    subprocess.run(["git", "--git-dir", str(store), "config", "core.bare", "false"], check=True)
    return {"work": work, "settings": settings, "audit": tmp_path / "audit",
            "marker": tmp_path / "ran", "home": tmp_path / "h"}


def _run(box: dict[str, Path], script: str) -> tuple[int, str]:
    r = run_sandboxed(["bash", "-c", script], str(box["settings"]), cwd=str(box["work"]),
                      timeout=120)
    return r.returncode, r.stderr.decode(errors="replace")


def test_link_chain_named_by_pyvenv_cfg(box: dict[str, Path]) -> None:
    """Two steps: the command plants a nested .git and a pyvenv.cfg whose ``home`` is a
    chain of 1,500 links (Python's realpath recursed once per link and raised); the
    sweep still finishes, and the host's git never runs the fsmonitor. (The
    virtualenv is the run's own, its start-up the command's: it stays.)"""
    work = box["work"]
    chain = ("mkdir -p .cache/c && cd .cache/c && "
             "for i in $(seq 1 1500); do ln -s l$((i+1)) l$i; done && ln -s /usr/bin l1501 "
             "&& cd ../.. && mkdir -p venv && "
             f"printf 'home = {work}/.cache/c/l1\\n' > venv/pyvenv.cfg")
    rc, err = _run(box, f"{_plant_git(box['marker'])} && cd .. && {chain}")
    assert rc == 0, err
    _host_git_status(work / "evil", box["home"])
    assert not box["marker"].exists(), "host git ran the fsmonitor the command planted"
    assert not (work / "evil/.git").exists()
    quarantined = {r.get("path") for r in audit_records(box["audit"])
                   if r.get("event_kind") == "quarantine"}
    assert str(work / "evil/.git") in quarantined


def test_unfinished_sweep_is_owed_and_holds_every_start(
        box: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever makes the sweep raise (here injected: a judgement that gives up), the run
    says so, records it, and the next start refuses until the owed sweep is done;
    once it can be done, the next start does it first."""
    work = box["work"]

    def gives_up(*_a: object, **_k: object) -> list[tuple[str, str]]:
        raise WalkError(f"{work} holds more than 2000000 entries")

    monkeypatch.setattr(sweep, "made_repos", gives_up)
    rc, err = _run(box, _plant_git(box["marker"]))
    assert rc == 0
    assert "could not finish" in err and "no sandbox of this account starts" in err, err
    assert any(r.get("event_kind") == "sweep_failed" for r in audit_records(box["audit"]))
    with pytest.raises(SandboxStartError, match="could not finish"):
        _run(box, "true")
    assert (work / "evil/.git").is_file()  # nothing judged it yet, and nothing ran since

    monkeypatch.undo()
    monkeypatch.setenv("AGENT_SANDBOX_STATE_DIR", str(box["settings"].parent / "state"))
    monkeypatch.setenv("AGENT_SANDBOX_AUDIT_DIR", str(box["audit"]))
    rc, err = _run(box, "true")
    assert rc == 0, err
    assert not (work / "evil/.git").exists(), "the owed sweep was not done before the start"
    _host_git_status(work / "evil", box["home"])
    assert not box["marker"].exists()
    assert any(r.get("event_kind") == "quarantine" and r.get("late")
               for r in audit_records(box["audit"]))


def test_notices_quote_names_as_a_terminal_shows_them(box: dict[str, Path]) -> None:
    """A protected name in a folder whose name carries terminal controls: the notice
    shows the controls escaped, never as bytes a terminal would act on."""
    rc, err = _run(box, "d=$(printf 'x\\033]52;c;cHduZWQ=\\007\\033[2K\\ry'); "
                        "mkdir -p \"$d\" && echo 'echo hi' > \"$d/.envrc\"")
    assert rc != 0, err  # refused when it was made (runtime.broker)
    # the command's own message (the shell's) is its output; the notice is ours
    ours = "\n".join(x for x in err.split("\n") if x.startswith("sandbox:"))
    assert "refused" in ours and ".envrc" in ours, err
    assert "\x1b" not in ours and "\x07" not in ours and "\r" not in ours
    assert "\\x1b]52" in ours


def test_a_timed_out_run_is_swept_once_every_process_has_ended(tmp_path: Path) -> None:
    """A timeout kills bwrap; the sandbox's other processes end a moment later, as
    the kernel takes the pid namespace down. Prepared: a command with hundreds of
    processes, some creating protected names without pause. Judged on the host once
    the runs are over: nothing they created is left armed (the sweep waited for the
    namespace's init to end, not for bwrap's)."""
    root = tmp_path / "r"
    root.mkdir()
    settings = {"filesystem": {"allowWrite": [str(root)], "denyRead": [], "denyWrite": []},
                "network": {"allowedDomains": [], "deniedDomains": []}}
    script = ("for j in $(seq 200); do (while :; do sleep 0.9; done) & done; "
              "for j in 1 2 3 4 5 6; do (i=0; while :; do i=$((i+1)); "
              "mkdir -p w$j-$i && echo 'echo planted' > w$j-$i/.bashrc; done) & done; wait")
    (tmp_path / "s.json").write_text(json.dumps(settings))
    for _ in range(3):  # the command line's run: its output is the terminal's, not a pipe
        done = subprocess.run([PY, "-m", "agent_sandbox", "exec", "--timeout", "1",
                               "--settings", str(tmp_path / "s.json"), "--", "sh", "-c",
                               script], cwd=root, capture_output=True, timeout=60)
        assert done.returncode != 0, done.stderr
    left = sorted(str(p.relative_to(root)) for p in root.glob("*/.bashrc"))
    assert left == [], left[:5]


def test_the_owed_sweep_spares_what_the_runs_own_sweep_spares(tmp_path: Path) -> None:
    """The marker a run leaves for the owed sweep (a later start does it when this
    run's supervisor is killed) says the run is brokered and names each git folder
    the command made, as it is made (what the owed sweep judges, and nothing
    else), and never spares a writable root or the user's ``.git``, which the
    command could write. Read from the host while the command runs."""
    repo, lock, home = tmp_path / "repo", tmp_path / "lock", tmp_path / "h"
    home.mkdir()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C",
           "GIT_CONFIG_NOSYSTEM": "1", "AGENT_SANDBOX_LOCK_DIR": str(lock)}
    subprocess.run(["git", "init", "-q", str(repo)], check=True, env=env)
    (tmp_path / "s.json").write_text(json.dumps({
        "network": {"allowedDomains": [], "deniedDomains": []},
        "filesystem": {"denyRead": [], "allowWrite": [str(repo)], "denyWrite": []}}))
    proc = subprocess.Popen([PY, "-m", "agent_sandbox", "exec", "--settings",
                             str(tmp_path / "s.json"), "--", "sh", "-c",
                             "git init -q sub && touch made && "
                             "while [ ! -e stop ]; do sleep 0.05; done"], cwd=repo, env=env)
    try:
        owed = lock / sweep.OWED
        deadline = time.monotonic() + 60
        while not (owed.is_dir() and any(owed.iterdir()) and (repo / "made").exists()) \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        fields = next(owed.iterdir()).read_bytes().split(b"\0")
    finally:
        (repo / "stop").touch()
        proc.wait(timeout=60)
    spared = {os.fsdecode(f[1:]) for f in fields if f[:1] == b"S"}
    assert b"K" in fields
    made = {os.fsdecode(f[1:].split(b":", 2)[2]) for f in fields if f[:1] == b"G"}
    assert made == {str(repo / "sub" / ".git")}, fields
    assert not spared & {str(repo), str(repo / ".git")}, spared
    assert proc.returncode == 0


def test_a_git_file_through_a_link_chain_never_stops_the_sweep(box: dict[str, Path]) -> None:
    """Two steps: the command makes a ``.git`` file whose target is reached through
    1,500 links, and a git folder's ``config`` that is one (``realpath`` recursed once
    per link and raised); the sweep still finishes, disarms the file, and the next
    start is not refused."""
    work = box["work"]
    chain = ("mkdir -p c && cd c && for i in $(seq 1 1500); do ln -s l$((i+1)) l$i; done && "
             "mkdir -p l1501/.git/worktrees/w && cd .. && mkdir -p w && "
             f"echo 'gitdir: {work}/c/l1/.git/worktrees/w' > w/.git")
    rc, err = _run(box, chain)
    assert rc == 0, err
    assert not (work / "w/.git").exists(), err
    rc, err = _run(box, "true")
    assert rc == 0, err
