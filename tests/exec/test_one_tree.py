"""One tree, many runs: protection judged when a call is made, attacked from outside.

Runs share one working tree with each other and with the user. Each case lets
one or two sandboxed runs (real ``sandbox exec`` processes over the same root)
and the user (this test, on the host) act in a set order, each waiting for the
other through flag files; the attack is fired by a real host tool (``git
status``, ``git commit``) while the runs still run (before any end-of-run
sweep could repair anything), and judged from the host by a marker file the
planted program would write. Every case has its control: the same steps
without a sandbox, where the marker appears, so no case passes because its
judge cannot fire.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import PY, needs_bwrap

pytestmark = [needs_bwrap]
SANDBOX = str(Path(sys.executable).parent / "sandbox")
GIT = shutil.which("git") or "git"


def wait_for(path: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} never appeared")
        time.sleep(0.02)


class Tree:
    """A writable root, its settings, and the flag files the steps wait on."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.root = base / "repo"
        self.flags = base / "flags"
        self.marker = base / "marker"
        for d in (self.root, self.flags):
            d.mkdir()
        self.settings = base / "settings.json"
        self.settings.write_text(json.dumps({
            "network": {"allowedDomains": [], "deniedDomains": []},
            "filesystem": {"denyRead": [], "allowWrite": [str(self.root), str(self.flags)],
                           "denyWrite": []}}))
        self.env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(base / "home"),
                    "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
                    "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
        (base / "home").mkdir()

    def run(self, script: str, *, sandboxed: bool = True) -> subprocess.Popen[bytes]:
        argv = ["sh", "-c", script]
        if sandboxed:
            argv = [SANDBOX, "exec", "--settings", str(self.settings), "--", *argv]
        return subprocess.Popen(argv, cwd=self.root, env=self.env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT)

    def git(self, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([GIT, *args], cwd=cwd or self.root, env=self.env,
                              capture_output=True, timeout=60, check=False)

    def flag(self, name: str) -> Path:
        return self.flags / name

    def waits(self, name: str) -> str:
        """Shell text that waits for the host's flag ``name``."""
        return f"while [ ! -e {self.flag(name)} ]; do sleep 0.02; done"


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[Tree]:
    yield Tree(tmp_path)


def planted_fsmonitor(t: Tree) -> str:
    return f"[core]\n\tfsmonitor = \"touch {t.marker}; false\"\n"


HOOK = "#!/bin/sh\ntouch {marker}\n"


def finish(*procs: subprocess.Popen[bytes]) -> list[bytes]:
    outs = []
    for p in procs:
        out, _ = p.communicate(timeout=120)
        outs.append(out)
    return outs


def move_then_plant(t: Tree, mover: str, planter: str, sandboxed: bool,
                    fire: Callable[[], object]) -> list[bytes]:
    """Two runs at once over the tree: the first does ``mover`` (then says
    ``moved``), the second then does ``planter`` (then says ``planted``); ``fire``,
    the host's later tool, runs while both still run. What each run printed."""
    first = t.run(f"{t.waits('go1')}; {mover}; touch {t.flag('moved')}; {t.waits('end')}",
                  sandboxed=sandboxed)
    second = t.run(f"{t.waits('go2')}; {planter}; touch {t.flag('planted')}; "
                   f"{t.waits('end')}", sandboxed=sandboxed)
    try:
        t.flag("go1").touch()
        wait_for(t.flag("moved"))
        t.flag("go2").touch()
        wait_for(t.flag("planted"))
        fire()
    finally:
        t.flag("end").touch()
        outs = finish(first, second)
    return outs


@pytest.mark.parametrize("sandboxed", [True, False], ids=["sandboxed", "control"])
def test_a_run_cannot_move_protected_git_files_out_from_under_another(
        tree: Tree, sandboxed: bool) -> None:
    """Two runs at once over one repository, same settings: the first moves the
    repository's ``config`` and ``hooks`` away and puts its own in their place
    (what detached the second run's read-only mounts before); the second plants
    an fsmonitor and a hook. The user's ``git status`` and ``git commit`` run
    during both runs."""
    t = tree
    assert t.git("init", "-q").returncode == 0
    (t.root / "f").write_text("x\n")
    mover = ("mv .git/config .git/config.old; cp .git/config.old .git/config; "
             "mv .git/hooks .git/hooks.old; mkdir .git/hooks")
    planter = (f"printf '{planted_fsmonitor(t)}' >> .git/config; "
               f"printf '{HOOK.format(marker=t.marker)}' > .git/hooks/pre-commit; "
               "chmod +x .git/hooks/pre-commit")

    def fire() -> None:
        t.git("status")
        t.git("add", "f")
        t.git("commit", "-qm", "user's commit")

    outs = move_then_plant(t, mover, planter, sandboxed, fire)
    assert t.marker.exists() == (not sandboxed), outs


@pytest.mark.parametrize("sandboxed", [True, False], ids=["sandboxed", "control"])
def test_a_repository_the_user_makes_during_a_run_is_protected_at_once(
        tree: Tree, sandboxed: bool) -> None:
    """A long run; meanwhile the user makes a repository; the run rewrites its
    configuration and adds a hook; the user's ``git status`` and ``git commit``
    there run before the run ends."""
    t = tree
    script = (f"{t.waits('made')}; "
              f"printf '{planted_fsmonitor(t)}' >> new/.git/config; "
              f"printf '{planted_fsmonitor(t)}' > new/.git/config.tmp && "
              "mv -f new/.git/config.tmp new/.git/config; "
              f"printf '{HOOK.format(marker=t.marker)}' > new/.git/hooks/pre-commit; "
              "chmod +x new/.git/hooks/pre-commit; "
              f"touch {t.flag('planted')}; {t.waits('end')}")
    run = t.run(script, sandboxed=sandboxed)
    try:
        time.sleep(0.3)
        new = t.root / "new"
        new.mkdir()
        assert t.git("init", "-q", cwd=new).returncode == 0
        (new / "f").write_text("x\n")
        t.flag("made").touch()
        wait_for(t.flag("planted"))
        t.git("status", cwd=new)
        t.git("add", "f", cwd=new)
        t.git("commit", "-qm", "m", cwd=new)
    finally:
        t.flag("end").touch()
        out = finish(run)
    assert t.marker.exists() == (not sandboxed), out


@pytest.mark.parametrize("sandboxed", [True, False], ids=["sandboxed", "control"])
def test_protected_names_made_deep_during_a_run_never_reach_the_tree(
        tree: Tree, sandboxed: bool) -> None:
    """Names no placeholder could have covered (in a folder made during the run),
    looked at from the host while the run still runs: none is there."""
    t = tree
    script = ("mkdir -p a/b/c && cd a/b/c && "
              "echo 'touch marker' > .envrc; echo x > .bashrc; mkdir .vscode; "
              "mkdir -p x/fish && echo evil > x/fish/config.fish && mv x .config; "
              "mkdir -p y && echo '{}' > y/settings.json && mv y .claude; "
              f"touch {t.flag('done')}; {t.waits('end')}")
    run = t.run(script, sandboxed=sandboxed)
    try:
        wait_for(t.flag("done"))
        deep = t.root / "a" / "b" / "c"
        present = sorted(n for n in (".envrc", ".bashrc", ".vscode", ".config", ".claude")
                         if (deep / n).exists())
    finally:
        t.flag("end").touch()
        out = finish(run)
    if sandboxed:
        assert present == [], out
        assert b"Read-only file system" in out[0]
    else:
        assert present == [".bashrc", ".claude", ".config", ".envrc", ".vscode"]


PLANTER = r"""
import ctypes, os, sys, threading
good, bad = sys.argv[1].encode(), sys.argv[2].encode()
buf = ctypes.create_string_buffer(max(len(good), len(bad)) + 1)
def put(p):
    ctypes.memmove(buf, p + b"\0", len(p) + 1)
put(good)
stop = False
def flip():
    while not stop:
        put(bad)
        put(good)
threading.Thread(target=flip, daemon=True).start()
libc = ctypes.CDLL(None, use_errno=True)
opened = 0
for _ in range(400):
    fd = libc.open(buf, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    if fd >= 0:
        os.write(fd, b"echo planted\n")
        os.close(fd)
        opened += 1
stop = True
print("opened", opened)
"""


def test_a_path_changed_while_it_is_judged_never_opens_a_protected_name(tree: Tree) -> None:
    """A second thread rewrites the path between an ordinary file and ``.bashrc``
    (deep, where no placeholder is) while the first opens it 400 times for
    writing: what was judged is what was opened. Looked at from the host while
    the run still runs; the ordinary file got the writes (the control)."""
    t = tree
    (t.root / "deep").mkdir()
    script = (f"{PY} -I -c '{PLANTER}' deep/notes.txt deep/.bashrc; "
              f"touch {t.flag('done')}; {t.waits('end')}")
    run = t.run(script)
    try:
        wait_for(t.flag("done"))
        assert not (t.root / "deep" / ".bashrc").exists()
        assert (t.root / "deep" / "notes.txt").read_text().count("planted") > 0
    finally:
        t.flag("end").touch()
        finish(run)


def test_a_run_builds_and_uses_its_own_repository(tree: Tree) -> None:
    """What a run makes is its own: ``git init``, ``config``, ``commit`` and a branch
    work inside, and the next run commits there again."""
    t = tree
    first = t.run("git init -q own && cd own && git config user.name n && "
                  "git config user.email e@e && echo x > f && git add f && "
                  "git commit -qm one && git branch b && echo ok")
    out, _ = first.communicate(timeout=120)
    assert first.returncode == 0 and out.strip().endswith(b"ok"), out
    second = t.run("cd own && echo y >> f && git commit -qam two && git log --oneline "
                   "| wc -l")
    out, _ = second.communicate(timeout=120)
    assert second.returncode == 0 and out.strip().endswith(b"2"), out
    assert t.git("log", "--oneline", cwd=t.root / "own").stdout.count(b"\n") == 2


def test_a_hidden_or_read_only_file_cannot_be_moved_or_removed(tree: Tree) -> None:
    """The broker makes its calls from the host's mount namespace, where the
    sandbox's mounts are not: a name that is a mount point in the sandbox (a file
    hidden by ``denyRead``, a protected file kept read-only) is still refused
    (``EBUSY``), so a hidden file cannot be renamed to a readable name."""
    t = tree
    assert t.git("init", "-q").returncode == 0
    (t.root / "secret.env").write_text("TOKEN=1\n")
    data = json.loads(t.settings.read_text())
    data["filesystem"]["denyRead"] = [str(t.root / "secret.env")]
    t.settings.write_text(json.dumps(data))
    run = t.run("mv secret.env visible.txt; cat visible.txt; rm -f secret.env; "
                "mv .git/config .git/config.old; rm -f .git/config; echo done")
    out, _ = run.communicate(timeout=120)
    assert b"done" in out and b"TOKEN" not in out, out
    assert (t.root / "secret.env").read_text() == "TOKEN=1\n"
    assert not (t.root / "visible.txt").exists()
    assert (t.root / ".git" / "config").exists() and not (t.root / ".git" / "config.old").exists()


@pytest.mark.parametrize("sandboxed", [True, False], ids=["sandboxed", "control"])
def test_a_git_folder_cannot_be_made_inside_another_repositorys(
        tree: Tree, sandboxed: bool) -> None:
    """The user's repository has a submodule not checked out yet; a run makes its
    git folder inside the repository's ``.git`` (by hand, and by moving a folder of
    its own there) with a planted fsmonitor; the user's ``git submodule update``
    and ``git status`` run while the run still runs."""
    t = tree
    src = t.base / "lib"
    src.mkdir()
    assert t.git("init", "-q", cwd=src).returncode == 0
    (src / "x").write_text("x\n")
    t.git("add", "x", cwd=src)
    t.git("commit", "-qm", "lib", cwd=src)
    assert t.git("init", "-q").returncode == 0
    t.git("-c", "protocol.file.allow=always", "submodule", "add", "-q", str(src), "sub")
    t.git("commit", "-qm", "with sub")
    shutil.rmtree(t.root / ".git" / "modules")
    shutil.rmtree(t.root / "sub")
    (t.root / "sub").mkdir()
    fsmonitor = planted_fsmonitor(t)
    script = ("mkdir -p .git/modules/sub && git --git-dir=" + str(t.base / "lib" / ".git")
              + " rev-parse HEAD >/dev/null; "
              "cp -r " + str(src / ".git") + "/. .git/modules/sub/ 2>/dev/null; "
              f"printf '{fsmonitor}' >> .git/modules/sub/config; "
              "mkdir -p own && cp -r " + str(src / ".git") + "/. own/ && "
              f"printf '{fsmonitor}' >> own/config && mv own .git/modules/sub2; "
              f"touch {t.flag('planted')}; {t.waits('end')}")
    run = t.run(script, sandboxed=sandboxed)
    try:
        wait_for(t.flag("planted"))
        t.git("-c", "protocol.file.allow=always", "submodule", "update", "--init", "-q")
        t.git("status")
        t.git("-C", "sub", "status")
    finally:
        t.flag("end").touch()
        out = finish(run)
    assert t.marker.exists() == (not sandboxed), out


def _pth(t: Tree) -> str:
    return f"import os; open('{t.marker}', 'w').close()\\n"


@pytest.mark.parametrize("sandboxed", [True, False], ids=["sandboxed", "control"])
def test_a_run_cannot_move_a_virtualenvs_start_up_out_from_under_another(
        tree: Tree, sandboxed: bool) -> None:
    """The user's virtualenv, two runs at once: the first moves its site folder
    and its ``.pth`` away and its activate script aside; the second plants an
    import line, a ``sitecustomize`` and an activate script. The user's venv
    Python and ``. .venv/bin/activate`` run while both runs still run."""
    t = tree
    subprocess.run([PY, "-m", "venv", "--without-pip", str(t.root / ".venv")], check=True,
                   timeout=120)
    site = next((t.root / ".venv/lib").glob("python3*/site-packages"))
    (site / "user.pth").write_text(str(t.root) + "\n")
    mover = (f"mv {site}/user.pth {site}/user.old; mv {site} {site}.old; mkdir -p {site}; "
             "mv .venv/bin/activate .venv/bin/activate.old")
    planter = (f"printf \"{_pth(t)}\" > {site}/user.pth; "
               f"printf \"{_pth(t)}\" > {site}/zz.pth; "
               f"printf \"{_pth(t)}\" > {site}/sitecustomize.py; "
               f"printf 'touch {t.marker}\\n' >> .venv/bin/activate")

    def fire() -> None:
        subprocess.run([str(t.root / ".venv/bin/python"), "-c", "pass"], timeout=60,
                       capture_output=True, check=False)
        subprocess.run(["bash", "-c", ". .venv/bin/activate"], cwd=t.root, timeout=60,
                       capture_output=True, check=False)

    outs = move_then_plant(t, mover, planter, sandboxed, fire)
    assert t.marker.exists() == (not sandboxed), outs
    if sandboxed:  # and the user's own start-up is where and as the user left it
        assert (site / "user.pth").read_text() == str(t.root) + "\n"
        assert (t.root / ".venv/bin/activate").exists()


@pytest.mark.parametrize("sandboxed", [True, False], ids=["sandboxed", "control"])
def test_a_virtualenv_the_user_makes_during_a_run_is_protected_at_once(
        tree: Tree, sandboxed: bool) -> None:
    """A long run; meanwhile the user makes a virtualenv; the run plants a ``.pth``
    and bytecode for the user's module, and the user's interpreter runs before the
    run ends. Then the run's own virtualenv: made, installed into by the next run
    (a ``.pth`` path line, as ``pip install -e`` writes), and used on the host."""
    t = tree
    (t.root / "mod.py").write_text("X = 1\n")
    script = (f"{t.waits('made')}; "
              f"for s in venv/lib/python3*/site-packages; do "
              f"printf \"{_pth(t)}\" > $s/zz.pth; done; "
              f"mkdir -p __pycache__ && printf \"{_pth(t)}\" > __pycache__/x.py && "
              f"{PY} -c \"import py_compile; py_compile.compile('__pycache__/x.py', "
              "cfile='__pycache__/mod.' + __import__('sys').implementation.cache_tag + '.pyc', "
              "invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)\"; "
              f"touch {t.flag('planted')}; {t.waits('end')}")
    run = t.run(script, sandboxed=sandboxed)
    try:
        time.sleep(0.3)
        subprocess.run([PY, "-m", "venv", "--without-pip", str(t.root / "venv")], check=True,
                       timeout=120)
        t.flag("made").touch()
        wait_for(t.flag("planted"))
        subprocess.run([str(t.root / "venv/bin/python"), "-c", "import mod"], cwd=t.root,
                       timeout=60, capture_output=True, check=False,
                       env={k: v for k, v in os.environ.items()
                            if k != "PYTHONDONTWRITEBYTECODE"})
    finally:
        t.flag("end").touch()
        out = finish(run)
    assert t.marker.exists() == (not sandboxed), out
    if not sandboxed:
        return
    own = (f"{PY} -m venv --without-pip own && mkdir -p src/pkg && "
           "echo 'X = 2' > src/pkg/__init__.py")
    assert finish(t.run(own))[0] is not None
    finish(t.run("for s in own/lib/python3*/site-packages; do "
                 f"echo {t.root}/src > $s/__editable__.pkg.pth; done"))
    ok = subprocess.run(["bash", "-c", ". own/bin/activate && python -c 'import pkg; "
                         "print(pkg.X)'"], cwd=t.root, capture_output=True, text=True,
                        timeout=60)
    assert ok.stdout == "2\n", ok.stderr


@pytest.mark.parametrize("sandboxed", [True, False], ids=["sandboxed", "control"])
def test_what_a_repository_around_a_path_makes_of_it_is_judged_when_written(
        tree: Tree, sandboxed: bool) -> None:
    """No walk finds them beforehand: during a long run the user makes a bare
    repository (a git directory not named ``.git``) and a repository whose
    configuration names an ordinary folder as its hooks (``core.hooksPath``); the
    run plants a pager in the first and a hook in the second, and the user's
    ``git`` runs in both before the run ends."""
    t = tree
    script = (f"{t.waits('made')}; "
              f"printf '[core]\\n\\tpager = touch {t.marker}\\n' >> store.git/config; "
              f"mkdir -p store.git/hooks; printf '{HOOK.format(marker=t.marker)}' > "
              "store.git/hooks/post-update; "
              f"printf '{HOOK.format(marker=t.marker)}' > app/tools/githooks/pre-commit; "
              "chmod +x app/tools/githooks/pre-commit; "
              f"touch {t.flag('planted')}; {t.waits('end')}")
    run = t.run(script, sandboxed=sandboxed)
    try:
        time.sleep(0.3)
        assert t.git("init", "-q", "--bare", "store.git").returncode == 0
        app = t.root / "app"
        app.mkdir()
        assert t.git("init", "-q", cwd=app).returncode == 0
        (app / "tools/githooks").mkdir(parents=True)
        assert t.git("config", "core.hooksPath", "tools/githooks", cwd=app).returncode == 0
        (app / "f").write_text("x\n")
        t.flag("made").touch()
        wait_for(t.flag("planted"))
        subprocess.run([GIT, "--git-dir", str(t.root / "store.git"), "-c", "core.pager=",
                        "log"], env={**t.env, "GIT_PAGER": ""}, capture_output=True,
                       timeout=60, check=False)
        subprocess.run(["script", "-qc", f"{GIT} --git-dir {t.root / 'store.git'} branch",
                        "/dev/null"], env={k: v for k, v in t.env.items()
                                           if k not in ("GIT_PAGER", "PAGER")},
                       capture_output=True, timeout=60, check=False)
        t.git("add", "f", cwd=app)
        t.git("commit", "-qm", "m", cwd=app)
    finally:
        t.flag("end").touch()
        out = finish(run)
    assert t.marker.exists() == (not sandboxed), out
    if sandboxed:  # each refused when it was written, with the reason
        said = out[0].decode()
        for name in ("store.git/config", "store.git/hooks", "githooks/pre-commit"):
            assert f"{name}" in said and "refused" in said, said


@pytest.mark.parametrize("how", ["commondir", "gitdir-elsewhere"])
@pytest.mark.parametrize("sandboxed", [True, False], ids=["sandboxed", "control"])
def test_a_worktree_a_run_adds_to_the_users_repository_is_judged(
        tree: Tree, sandboxed: bool, how: str) -> None:
    """A run may add a linked worktree to the user's repository (``git worktree
    add`` works step by step); one whose git folder reads its configuration from
    elsewhere (a ``commondir`` to a git directory the command made, or a ``.git``
    file pointing straight at one) is disarmed after the run: the user's ``git
    status`` in that worktree runs nothing."""
    t = tree
    assert t.git("init", "-q").returncode == 0
    (t.root / "f").write_text("x\n")
    t.git("add", "f")
    assert t.git("commit", "-qm", "m").returncode == 0
    # a common folder git accepts with no HEAD of its own: not a repository the
    # broker records, so only the worktree's own judgement can catch it
    evil = ("mkdir -p evil.git/objects evil.git/refs && "
            f"printf '[core]\\n\\tfsmonitor = \"touch {t.marker}; false\"\\n' > evil.git/config"
            " && ")
    plant = (evil + "git worktree add -q wt && echo ../../../evil.git > "
             ".git/worktrees/wt/commondir" if how == "commondir" else
             evil + "echo 'ref: refs/heads/x' > evil.git/HEAD.tmp && git worktree add -q wt && "
             "mv evil.git/HEAD.tmp evil.git/HEAD && "
             "echo \"gitdir: $PWD/evil.git\" > wt/.git && "
             "printf '\\tworktree = ../wt\\n\\tbare = false\\n' >> evil.git/config")
    finish(t.run(plant, sandboxed=sandboxed))
    t.git("status", cwd=t.root / "wt")
    assert t.marker.exists() == (not sandboxed)
    if sandboxed:  # the worktree git made is kept and works
        ok = t.run("git worktree add -q ok && cat ok/f")
        assert finish(ok)[0] == b"x\n"
        assert t.git("status", "--short", cwd=t.root / "ok").returncode == 0


HELD_LOCK = """
import os, sys
fd = os.open(".git/config.lock", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, open(".git/config", "rb").read())
os.rename(".git/config.lock", ".git/config")  # judged here: what git writes itself
os.write(fd, ('[core]\\n\\tfsmonitor = "touch ' + sys.argv[1] + '; false"\\n').encode())
"""


@pytest.mark.parametrize("how", ["git-config", "in-place", "held-lock", "hook", "commondir"])
@pytest.mark.parametrize("sandboxed", [True, False], ids=["sandboxed", "control"])
def test_a_repository_a_run_makes_takes_nothing_git_runs_even_mid_run(
        tree: Tree, sandboxed: bool, how: str) -> None:
    """A run makes a repository (its own to build) and plants what would make git run
    a program there: through ``git config``, written in place, through a lock file it
    keeps writing after the rename, as a hook, or as a ``commondir`` to a folder of
    its own. The user's ``git status`` and ``git commit`` run there before the run
    ends (no sweep has judged anything yet)."""
    t = tree
    fsmon = f"touch {t.marker}; false"
    (t.flags / "held.py").write_text(HELD_LOCK)
    plant = {
        "git-config": f"git config core.fsmonitor '{fsmon}'",
        "in-place": f"printf '[core]\\n\\tfsmonitor = \"{fsmon}\"\\n' >> .git/config",
        "held-lock": f"{sys.executable} {t.flags / 'held.py'} {t.marker}",
        "hook": f"printf '#!/bin/sh\\ntouch {t.marker}\\n' > .git/hooks/pre-commit && "
                "chmod +x .git/hooks/pre-commit",
        "commondir": ("mkdir -p ../c/objects ../c/refs && "
                      f"printf '[core]\\n\\tfsmonitor = \"{fsmon}\"\\n' > ../c/config && "
                      "echo ../../c > .git/commondir"),
    }[how]
    script = (f"mkdir new && cd new && git init -q && echo x > f && ({plant}); "
              f"touch {t.flag('planted')}; {t.waits('end')}")
    run = t.run(script, sandboxed=sandboxed)
    try:
        wait_for(t.flag("planted"))
        new = t.root / "new"
        t.git("status", cwd=new)
        t.git("add", "f", cwd=new)
        t.git("commit", "-qm", "m", cwd=new)
    finally:
        t.flag("end").touch()
        out = finish(run)
    assert t.marker.exists() == (not sandboxed), out
    if sandboxed:  # the repository itself is the run's, and works
        assert t.git("log", "--oneline", cwd=t.root / "new").returncode == 0


@pytest.mark.parametrize("how", ["git-config", "in-place", "hook", "submodule-update",
                                 "submodule-fsmonitor", "submodule-hook"])
@pytest.mark.parametrize("sandboxed", [True, False], ids=["sandboxed", "control"])
def test_a_repository_an_earlier_run_made_stays_judged_in_later_runs(
        tree: Tree, sandboxed: bool, how: str) -> None:
    """One run makes a repository; a later run (as an agent's next call) changes
    its configuration, adds a submodule (both allowed: the repository is the
    command's) and plants what would make git run a program: in the repository's
    configuration, as a hook, as a submodule's ``update = !command``, or in the
    submodule's own git folder. The user's git fires it after the runs."""
    t = tree
    src = t.base / "subsrc"
    src.mkdir()
    for args in (["init", "-q"], ["commit", "-q", "--allow-empty", "-m", "a"],
                 ["commit", "-q", "--allow-empty", "-m", "b"]):
        assert t.git(*args, cwd=src).returncode == 0
    fsmon = f"touch {t.marker}; false"
    add = f"git -c protocol.file.allow=always submodule add -q {src} s && git commit -qm s"
    plant = {
        "git-config": f"git config core.fsmonitor '{fsmon}'",
        "in-place": f"printf '[core]\\n\\tfsmonitor = \"{fsmon}\"\\n' >> .git/config",
        "hook": f"printf '#!/bin/sh\\ntouch {t.marker}\\n' > .git/hooks/pre-commit && "
                "chmod +x .git/hooks/pre-commit",
        "submodule-update": f"{add} && git -C s checkout -q HEAD~1 && "
                            f"git config submodule.s.update '!touch {t.marker}'",
        "submodule-fsmonitor": f"{add} && git -C s config core.fsmonitor '{fsmon}'",
        "submodule-hook": f"{add} && printf '#!/bin/sh\\ntouch {t.marker}\\n' > "
                          ".git/modules/s/hooks/post-checkout && "
                          "chmod +x .git/modules/s/hooks/post-checkout",
    }[how]
    made = t.run("mkdir new && cd new && git init -q && git commit -q --allow-empty -m i",
                 sandboxed=sandboxed)
    finish(made)
    new = t.root / "new"
    assert t.git("log", "--oneline", cwd=new).returncode == 0
    ok = t.run("cd new && git config user.name agent && git commit -q --allow-empty -m j "
               "&& git config --get user.name", sandboxed=sandboxed)
    assert finish(ok)[0] == b"agent\n"  # the repository is the command's to change
    out = finish(t.run(f"cd new && {plant}", sandboxed=sandboxed))
    t.git("status", cwd=new)
    t.git("commit", "-q", "--allow-empty", "-m", "u", cwd=new)
    t.git("-c", "protocol.file.allow=always", "submodule", "update", cwd=new)
    if (new / "s").is_dir():
        t.git("status", cwd=new / "s")
        t.git("checkout", "-q", "HEAD~1", cwd=new / "s")
    assert t.marker.exists() == (not sandboxed), out
    if sandboxed and how.startswith("submodule"):  # the submodule itself was added
        status = t.git("submodule", "status", cwd=new)
        assert b" s" in status.stdout, status


@pytest.mark.parametrize("sandboxed", [True, False], ids=["sandboxed", "control"])
def test_a_submodule_stays_refused_in_the_users_repository(tree: Tree,
                                                          sandboxed: bool) -> None:
    """In a repository the user made, ``.gitmodules`` and ``.git/modules/`` stay the
    user's: a run's ``git submodule add`` there changes nothing the user's git reads."""
    t = tree
    src = t.base / "subsrc"
    src.mkdir()
    assert t.git("init", "-q", cwd=src).returncode == 0
    assert t.git("commit", "-q", "--allow-empty", "-m", "a", cwd=src).returncode == 0
    assert t.git("init", "-q").returncode == 0
    assert t.git("commit", "-q", "--allow-empty", "-m", "i").returncode == 0
    finish(t.run(f"git -c protocol.file.allow=always submodule add -q {src} s",
                 sandboxed=sandboxed))
    changed = [p for p in (".gitmodules", ".git/modules/s/config", "s/.git")
               if (t.root / p).exists()]
    assert (changed == []) == sandboxed, changed
    assert (t.git("submodule", "status").stdout == b"") == sandboxed
