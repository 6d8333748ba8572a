"""A protected file reached by another route than its name, attacked from outside.

The broker judges a call by the place it names; these cases reach the same
places otherwise: a descriptor opened again (``/proc/self/fd/N``) or changed
through (``fchmod``), a link whose own name is protected, a folder that becomes
a git folder while the command holds its configuration open (alone, or with
another run moving it), two names exchanged (``RENAME_EXCHANGE``), a folder moved
in as ``hooks``. Each is prepared by real ``sandbox exec`` runs, fired by the
real host tool (``git status``, ``git commit``) while the run runs or after it,
and judged from the host by a marker the planted program would write; each has
its control, the same steps without a sandbox, where the marker appears.

And what the same rules must not cost: removing a tree that holds a package's
``.vscode``, moving a folder that holds ``.idea``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import needs_bwrap

pytestmark = [needs_bwrap]
SANDBOX = str(Path(sys.executable).parent / "sandbox")
GIT = shutil.which("git") or "git"
PY = sys.executable

# a folder about to become a git folder, its configuration held open for writing
STAGE = """
import os, stat, sys, time
def stage(path, mark="open"):
    os.mkdir(path)
    fd = os.open(path + "/config", os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, b"[core]\\n\\trepositoryformatversion = 0\\n\\tbare = false\\n")
    os.mkdir(path + "/objects"); os.mkdir(path + "/refs")
    head = path + "/HEAD"
    if mark == "link":  # its mark a second name of a file made elsewhere
        with open("head", "w") as f:
            f.write("ref: refs/heads/main\\n")
        os.link("head", head)
    elif mark == "symlink":  # git takes a link into refs/ for HEAD
        os.symlink("refs/heads/main", head)
    elif mark == "mknod":
        os.mknod(head, stat.S_IFREG | 0o644)
        with open(head, "w") as f:
            f.write("ref: refs/heads/main\\n")
    else:
        with open(head, "w") as f:
            f.write("ref: refs/heads/main\\n")
    return fd
ARM = b"\\tfsmonitor = \\"touch {M}; false\\"\\n"
"""


@dataclass(frozen=True)
class Route:
    plant: str  # shell text, run in work (sandboxed, or not for the control)
    fire: str  # shell text the user runs on the host, in work
    setup: str = ""  # the user's own state, made on the host first
    during: bool = False  # fired while the plant still runs (it touches work/armed, then waits)
    beside: str = ""  # a second run's text, started once work/armed exists


REPO = "git init -q -b main && git commit -q --allow-empty -m a"
ROUTES: dict[str, Route] = {
    "descriptor-reopened-for-config": Route(
        "exec 3<.git/config; printf '[core]\\n\\tfsmonitor = \"touch {M}; false\"\\n' "
        ">> /proc/self/fd/3", "git status --short", setup=REPO),
    "descriptor-fchmod-of-a-hook": Route(
        f"{PY} -c \"import os; os.fchmod(os.open('.git/hooks/pre-commit', os.O_RDONLY), 0o755)\"",
        "git commit -q --allow-empty -m u",
        setup=f"{REPO} && printf '#!/bin/sh\\ntouch {{M}}\\n' > .git/hooks/pre-commit && "
              "chmod 644 .git/hooks/pre-commit"),
    "hook-written-through-its-link": Route(
        "printf '#!/bin/sh\\ntouch {M}\\n' > .git/hooks/pre-commit",
        "git commit -q --allow-empty -m u",
        setup=f"{REPO} && mkdir scripts && printf '#!/bin/sh\\nexit 0\\n' > scripts/h.sh && "
              "chmod +x scripts/h.sh && ln -s ../../scripts/h.sh .git/hooks/pre-commit"),
    "configuration-held-open-as-it-becomes-git": Route(
        f"{PY} -c '{STAGE}\nos.mkdir(\"sub\"); fd = stage(\"stage\"); "
        "os.rename(\"stage\", \"sub/.git\"); os.write(fd, ARM); open(\"armed\", \"w\"); "
        "time.sleep(4)'", "cd sub && git status --short", during=True),
    "configuration-held-open-while-another-run-moves-it": Route(
        f"{PY} -c '{STAGE}\nos.mkdir(\"proj\"); fd = stage(\"stage\"); "
        "os.rename(\"stage\", \"proj/.git\"); open(\"armed\", \"w\")\n"
        "while not os.path.exists(\"moved\"): time.sleep(0.05)\nos.write(fd, ARM)'",
        "cd project && git status --short", beside="mv proj project && touch moved"),
    **{f"configuration-held-open-as-a-{mark}-head-makes-it-git": Route(
        f"{PY} -c '{STAGE}\nos.mkdir(\"sub\"); fd = stage(\"stage\", \"{mark}\"); "
        "open(\"sub/.git\", \"w\").write(\"gitdir: ../stage\\n\"); os.write(fd, ARM); "
        "open(\"armed\", \"w\"); time.sleep(4)'", "cd sub && git status --short", during=True)
       for mark in ("link", "symlink", "mknod")},
    "exchange-into-a-repository": Route(
        f"git init -q proj && printf '[core]\\n\\tfsmonitor = \"touch {{M}}; false\"\\n' > evil && "
        f"{PY} -c \"import ctypes; ctypes.CDLL(None).renameat2(-100, b'proj/.git/config', "
        "-100, b'evil', 2)\"", "cd proj && git status --short"),
    "folder-moved-in-as-hooks": Route(
        "git init -q sub && rm -rf sub/.git/hooks && mkdir h && "
        "printf '#!/bin/sh\\ntouch {M}\\n' > h/pre-commit && chmod +x h/pre-commit && "
        "mv h sub/.git/hooks; touch armed; sleep 4",
        "cd sub && git commit -q --allow-empty -m u", during=True),
}


class World:
    def __init__(self, base: Path) -> None:
        self.work, self.marker = base / "work", base / "marker"
        self.work.mkdir()
        (base / "home").mkdir()
        self.settings = base / "s.json"
        self.settings.write_text(json.dumps({
            "network": {"allowedDomains": [], "deniedDomains": []},
            "filesystem": {"denyRead": [], "denyWrite": [], "allowWrite": [str(self.work)]}}))
        self.env = {**os.environ, "HOME": str(base / "home"), "GIT_CONFIG_NOSYSTEM": "1",
                    "GIT_AUTHOR_NAME": "u", "GIT_AUTHOR_EMAIL": "u@u",
                    "GIT_COMMITTER_NAME": "u", "GIT_COMMITTER_EMAIL": "u@u"}

    def argv(self, script: str, sandboxed: bool) -> list[str]:
        text = ["sh", "-c", script.replace("{M}", str(self.marker))]
        return [SANDBOX, "exec", "--settings", str(self.settings), "--", *text] \
            if sandboxed else text

    def run(self, script: str, sandboxed: bool = False) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(script, sandboxed), cwd=self.work, env=self.env,
                              capture_output=True, text=True, timeout=120)

    def start(self, script: str, sandboxed: bool) -> subprocess.Popen[str]:
        return subprocess.Popen(self.argv(script, sandboxed), cwd=self.work, env=self.env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def wait_armed(self, proc: subprocess.Popen[str]) -> None:
        deadline = time.monotonic() + 60
        while not (self.work / "armed").exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                return  # refused before it armed: the fire below judges
            time.sleep(0.05)


def attack(world: World, route: Route, sandboxed: bool) -> bool:
    if route.setup:
        world.run(route.setup)
    if route.during or route.beside:
        proc = world.start(route.plant, sandboxed)
        world.wait_armed(proc)
        if route.beside:
            world.run(route.beside, sandboxed)
        else:
            world.run(route.fire)
        proc.communicate(timeout=120)
        if route.beside:
            world.run(route.fire)
    else:
        world.run(route.plant, sandboxed)
        world.run(route.fire)
    world.run(route.fire)  # and after the run, too
    return world.marker.exists()


@pytest.mark.parametrize("name", sorted(ROUTES))
@pytest.mark.parametrize("sandboxed", [True, False], ids=["sandboxed", "control"])
def test_a_protected_file_reached_another_way_never_fires(name: str, sandboxed: bool,
                                                          tmp_path: Path) -> None:
    fired = attack(World(tmp_path), ROUTES[name], sandboxed)
    assert fired is not sandboxed, f"{name}: {'escaped' if fired else 'the control never fired'}"


def test_exchanging_two_names_is_refused_as_a_file_system_without_it_would(
        tmp_path: Path) -> None:
    """``RENAME_EXCHANGE`` answers ``EINVAL`` (callers fall back to two renames, each
    judged); a plain rename of the same files works."""
    w = World(tmp_path)
    script = (f"echo a > a && echo b > b && {PY} -c \"import ctypes, os; l = ctypes.CDLL(None, "
              "use_errno=True); r = l.renameat2(-100, b'a', -100, b'b', 2); "
              "print(r, ctypes.get_errno())\" && mv a c")
    r = w.run(script, sandboxed=True)
    assert r.stdout.split() == ["-1", "22"], r
    assert (w.work / "b").read_text() == "b\n" and (w.work / "c").read_text() == "a\n"


def test_removing_and_moving_folders_that_hold_protected_names(tmp_path: Path) -> None:
    """What the rules must not cost: ``rm -rf`` of a tree holding a package's
    ``.vscode/settings.json`` and ``mv`` of a folder holding ``.idea`` work as
    without a sandbox; writing those names stays refused."""
    w = World(tmp_path)
    (w.work / "node_modules/pkg/.vscode").mkdir(parents=True)
    (w.work / "node_modules/pkg/.vscode/settings.json").write_text("{}")
    (w.work / "apps/web/.idea").mkdir(parents=True)
    (w.work / "apps/web/.idea/misc.xml").write_text("<x/>")
    r = w.run("rm -rf node_modules && mv apps/web apps/site && echo ok; "
              "echo '{}' > apps/site/.vscode-x; mkdir apps/site/.vscode", sandboxed=True)
    assert "ok" in r.stdout, r
    assert not (w.work / "node_modules").exists()
    assert (w.work / "apps/site/.idea/misc.xml").read_text() == "<x/>"
    assert not (w.work / "apps/site/.vscode").exists() and "refused" in r.stderr


@pytest.mark.parametrize("sandboxed", [True, False], ids=["sandboxed", "control"])
def test_a_virtualenv_the_user_makes_over_a_runs_folders_is_the_users(
        tmp_path: Path, sandboxed: bool) -> None:
    """Prepared: a run makes ``.venv/lib/python3.X/site-packages``; the user then runs
    ``python3 -m venv .venv`` over it (venv keeps the folders, and the mark a run
    leaves on them); a second run writes a ``.pth`` there. Fired: the venv's Python.
    Judged: whose ``pyvenv.cfg`` it is decides, not whose folders: refused."""
    w = World(tmp_path)
    site = ".venv/lib/python3.$(python3 -c 'import sys; print(sys.version_info[1])')"
    w.run(f"mkdir -p {site}/site-packages .venv/bin", sandboxed)
    w.run("python3 -m venv --without-pip .venv")
    r = w.run(f"echo \"import os; open('{{M}}', 'w')\" > {site}/site-packages/zz.pth", sandboxed)
    w.run(".venv/bin/python -c pass")
    assert w.marker.exists() is not sandboxed, r.stderr
