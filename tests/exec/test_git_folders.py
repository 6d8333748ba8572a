"""Git folders as runs make them: never by reference, judged when they become one.

Each case prepares in sandboxed runs (each its own ``sandbox exec``, as an
agent's calls are) what would make the user's git run a program: git metadata
made as a symbolic or hard link, a second name for a configuration written
afterwards, a hooks folder that is a link, a folder that holds a configuration
before it becomes a git folder (written, renamed or moved into place), a
worktree's ``commondir`` rewritten, a link where git looks for a submodule's git
folder. The user's git fires it (``git status``, ``git commit``, ``git
submodule update``), judged from the host by a marker, some while the run
still runs (before any sweep). Each case has its unsandboxed control.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from conftest import needs_bwrap
from test_one_tree import Tree, finish, wait_for

pytestmark = [needs_bwrap]


@pytest.fixture
def tree(tmp_path: Path) -> Tree:
    return Tree(tmp_path)


def fsmonitor(t: Tree) -> str:
    return f"printf '[core]\\n\\tfsmonitor = \"touch {t.marker}; false\"\\n'"


def run(t: Tree, script: str, sandboxed: bool) -> bytes:
    return finish(t.run(script, sandboxed=sandboxed))[0]


def agent_repo(t: Tree, sandboxed: bool, *, template: bool = True) -> Path:
    """A repository one run made (``git init``, a commit), as an agent's first calls do."""
    init = "git init -q r" if template else "mkdir tpl && git init -q --template=tpl r"
    said = run(t, f"{init} && cd r && git commit -q --allow-empty -m a", sandboxed)
    assert t.git("log", "--oneline", cwd=t.root / "r").returncode == 0, said
    return t.root / "r"


LATER = {  # planted by a later run in the repository an earlier run made
    "config-symlink": "{cfg} > ../evil && rm .git/config && ln -s ../../evil .git/config",
    "config-hardlink": "{cfg} > ../evil && rm .git/config && ln ../evil .git/config",
    "config-second-name": "ln .git/config ../second && {cfg} >> ../second",
    "worktree-config-symlink": "{cfg} > ../evil && git config extensions.worktreeConfig true "
                               "&& ln -s ../../evil .git/config.worktree",
    "hook-hardlink": "printf '#!/bin/sh\\ntouch {marker}\\n' > ../h && chmod +x ../h && "
                     "ln ../h .git/hooks/pre-commit",
}


@pytest.mark.parametrize("how", sorted(LATER))
@pytest.mark.parametrize("sandboxed", [True, False], ids=["sandboxed", "control"])
def test_git_metadata_is_never_made_by_reference(tree: Tree, sandboxed: bool,
                                                 how: str) -> None:
    t = tree
    repo = agent_repo(t, sandboxed)
    run(t, "cd r && " + LATER[how].format(cfg=fsmonitor(t), marker=t.marker), sandboxed)
    t.git("status", cwd=repo)
    t.git("commit", "-q", "--allow-empty", "-m", "u", cwd=repo)
    assert t.marker.exists() == (not sandboxed)


@pytest.mark.parametrize("sandboxed", [True, False], ids=["sandboxed", "control"])
def test_a_hooks_folder_is_never_a_link(tree: Tree, sandboxed: bool) -> None:
    t = tree
    repo = agent_repo(t, sandboxed, template=False)  # no hooks folder yet
    run(t, f"mkdir hk && printf '#!/bin/sh\\ntouch {t.marker}\\n' > hk/pre-commit && "
           "chmod +x hk/pre-commit && ln -s ../../hk r/.git/hooks", sandboxed)
    t.git("commit", "-q", "--allow-empty", "-m", "u", cwd=repo)
    assert t.marker.exists() == (not sandboxed)


BUILT = {  # a git folder built outside .git, tied into the user's repository
    "mark-written-last": "mkdir -p ev/objects ev/refs && {cfg} > ev/config && "
                         "echo 'ref: refs/heads/main' > ev/HEAD",
    "moved-into-place": "mkdir -p tmp/objects tmp/refs && {cfg} > tmp/config && "
                        "echo 'ref: refs/heads/main' > tmp/HEAD && mv tmp ev",
    "mark-renamed-in": "mkdir -p ev/objects ev/refs && {cfg} > ev/config && "
                       "echo 'ref: refs/heads/main' > h && mv h ev/HEAD",
}


@pytest.mark.parametrize("how", sorted(BUILT))
@pytest.mark.parametrize("sandboxed", [True, False], ids=["sandboxed", "control"])
def test_a_folder_is_judged_when_it_becomes_a_git_folder(tree: Tree, sandboxed: bool,
                                                        how: str) -> None:
    """The user's repository gets a gitlink whose ``.git`` file points at the
    folder; the user's ``git status`` runs while the run still runs."""
    t = tree
    assert t.git("init", "-q", "-b", "main").returncode == 0
    (t.root / "a").write_text("a\n")
    t.git("add", "a")
    assert t.git("commit", "-qm", "a").returncode == 0
    plant = BUILT[how].format(cfg=fsmonitor(t))
    script = (f"({plant}); mkdir sub && echo 'gitdir: ../ev' > sub/.git && "
              "git update-index --add --cacheinfo 160000,$(git rev-parse HEAD),sub; "
              f"touch {t.flag('planted')}; {t.waits('end')}")
    proc = t.run(script, sandboxed=sandboxed)
    try:
        wait_for(t.flag("planted"))
        t.git("status")
    finally:
        t.flag("end").touch()
        finish(proc)
    assert t.marker.exists() == (not sandboxed)


@pytest.mark.parametrize("how", ["write", "rename"])
@pytest.mark.parametrize("sandboxed", [True, False], ids=["sandboxed", "control"])
def test_a_worktrees_commondir_is_never_rewritten(tree: Tree, sandboxed: bool,
                                                 how: str) -> None:
    t = tree
    agent_repo(t, sandboxed)
    said = run(t, "cd r && git worktree add -q ../wt", sandboxed)
    assert (t.root / "wt").is_dir(), said  # what the run said when it made none
    assert t.git("status", cwd=t.root / "wt").returncode == 0  # the worktree works
    evil = (f"mkdir -p ev && cp -r r/.git/objects r/.git/refs ev/ && {fsmonitor(t)} > "
            "ev/config && ")
    common = t.root / "ev"
    plant = (evil + f"echo {common} > r/.git/worktrees/wt/commondir" if how == "write" else
             evil + f"echo {common} > c && mv c r/.git/worktrees/wt/commondir")
    run(t, plant, sandboxed)
    t.git("status", cwd=t.root / "wt")
    assert t.marker.exists() == (not sandboxed)


@pytest.mark.parametrize("where", ["modules", "worktrees"])
@pytest.mark.parametrize("sandboxed", [True, False], ids=["sandboxed", "control"])
def test_no_link_where_git_looks_for_a_submodules_or_worktrees_folder(
        tree: Tree, sandboxed: bool, where: str) -> None:
    """The user's clone has a submodule not checked out yet (or a worktree being
    added); a run links the place git looks for its git folder to one of its own."""
    t = tree
    src, top = t.base / "S", t.base / "P"
    for repo in (src, top):
        assert t.git("init", "-q", "-b", "main", str(repo)).returncode == 0
    assert t.git("commit", "-q", "--allow-empty", "-m", "s", cwd=src).returncode == 0
    t.git("-c", "protocol.file.allow=always", "submodule", "add", "-q", str(src), "x", cwd=top)
    assert t.git("commit", "-qm", "sub", cwd=top).returncode == 0
    subprocess.run(["git", "clone", "-q", str(top), str(t.root / "U")], env=t.env, check=True)
    run(t, f"mkdir -p ev/hooks ev/refs/heads && printf '[core]\\n\\tbare = false\\n' > ev/config "
           f"&& printf '#!/bin/sh\\ntouch {t.marker}\\n' > ev/hooks/post-checkout && "
           f"chmod +x ev/hooks/post-checkout && cp -r {src}/.git/objects ev/ && "
           f"cp {src}/.git/refs/heads/main ev/refs/heads/ && "
           "echo 'ref: refs/heads/main' > ev/HEAD && mkdir -p U/.git/" + where +
           f" && ln -s ../../../ev U/.git/{where}/x", sandboxed)
    if where == "modules":
        t.git("-c", "protocol.file.allow=always", "submodule", "update", "--init",
              cwd=t.root / "U")
    else:
        assert (t.root / "U/.git/worktrees/x").is_symlink() == (not sandboxed)
        (t.root / "wtx").mkdir()
        (t.root / "wtx/.git").write_text(f"gitdir: {t.root}/U/.git/worktrees/x\n")
        t.git("checkout", "-q", "main", cwd=t.root / "wtx")
    assert t.marker.exists() == (not sandboxed)


def test_git_still_links_what_it_links(tree: Tree) -> None:
    """A local clone hard-links objects into its store, worktrees and bare
    repositories are made as git makes them: all as before."""
    t = tree
    src = t.base / "S"
    assert t.git("init", "-q", str(src)).returncode == 0
    (src / "f").write_text("f\n")
    t.git("add", "f", cwd=src)
    assert t.git("commit", "-qm", "f", cwd=src).returncode == 0
    out = run(t, f"git clone -q {src} c && git init -q --bare b.git && cd c && "
                 "git worktree add -q ../w && git push -q ../b.git HEAD:main && echo ok", True)
    assert out.endswith(b"ok\n"), out
    assert t.git("status", "--short", cwd=t.root / "w").returncode == 0
    assert t.git("log", "--oneline", "main", cwd=t.root / "b.git").returncode == 0
