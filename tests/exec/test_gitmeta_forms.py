"""Git metadata in the forms git accepts: config syntax, git-directory shapes and
worktrees, each judged by the host's own git.

Three classes, each closed as a class rather than case by case:

1. the reader (``gitconfig``) against the host's ``git config --list``, byte for
   byte, on the corners of git's syntax; then attacks that hide a section from
   a line-based reader with any byte Python takes for a line break;
2. folders git takes for a git directory though they hold no ``HEAD`` file with
   ``objects/`` and ``refs/`` folders beside it (links, ``commondir``, a
   ``gitdir:`` file, a ``--git-dir`` layout, a submodule's git directory);
3. worktrees: one made during the run, a linked worktree's git directory made
   again where its ``.git`` file points, a ``commondir`` leading elsewhere.

Each attack runs through ``sandbox exec``; the host's git then runs where a
user would, and a marker file outside every writable root shows whether the
command's program ran. Each has a control: the same bytes written without the
sandbox make the marker appear.
"""

from __future__ import annotations

import posixpath
import subprocess
from pathlib import Path

import pytest
from test_bwrap_plan import BASE, CWD, HOME, FakeFs, ops
from test_host_tool_attacks import (
    evil,
    host_env,
    host_git,
    pytestmark,
    sandboxed,
    settings_for,
    unsandboxed,
)

from agent_sandbox.runtime.bwrap import gitconfig, gitmeta
from agent_sandbox.runtime.bwrap import plan as bw
from agent_sandbox.runtime.settings import parse

__all__ = ["pytestmark"]


# --- 1. the reader against git itself ------------------------------------------

def git_version() -> tuple[int, ...]:
    out = subprocess.run(["git", "--version"], capture_output=True, text=True).stdout
    return tuple(int(x) for x in out.split()[2].split(".")[:2])


def git_list(tmp: Path, data: bytes) -> list[tuple[str, str | None]] | None:
    """What the host's git reads from ``data``; None where it refuses the file."""
    path = tmp / "config"
    path.write_bytes(data)
    r = subprocess.run(["git", "config", "--file", str(path), "--list", "-z", "--no-includes"],
                       capture_output=True, env=host_env(tmp / "home"))
    if r.returncode:
        return None
    out: list[tuple[str, str | None]] = []
    for item in r.stdout.split(b"\0")[:-1]:
        key, nl, value = item.partition(b"\n")
        out.append((key.decode("utf-8", "surrogateescape"),
                    value.decode("utf-8", "surrogateescape") if nl else None))
    return out


SYNTAX = [
    b"[core]\n\tfsmonitor = x\n",
    b"[core]\r\n\tfsmonitor = x\r\n",
    b"\xef\xbb\xbf[core]\n\tpager = x\n",
    b"\xef\xbb[core]\n",                                   # a partial byte order mark
    b'[core]\n#\r[remote "y"]\n\tfsmonitor = x\n',
    b'[core]\n;\x0b[remote "y"]\n\tfsmonitor = x\n',
    b'[core]\n#\xe2\x80\xa8[remote "y"]\n\tfsmonitor = x\n',
    b'[core] #\xc2\x85[remote "y"]\n\tfsmonitor = x\n',
    b'[core]\n\tpager = a\\\n[remote "y"]\n\tfsmonitor = x\n',   # continuation
    b'[core]\n\tpager = a\\\r\n\tb\n',
    b'[core]\n\tpager = "a\\"b" c ; comment\n',
    b'[core]\n\tpager = "a;#b" \n',
    b'[core]\n\tpager = a\\tb\\nc\\bd\\\\\n',
    b'[core]\n\tpager = a\\q\n',                             # an unknown escape
    b'[core]\n\tpager = "open\n',                            # a quote left open
    b'[core]fsmonitor=x\n',                                  # a key after the header
    b'[Core.Sub]\n\tK = v\n[CORE "Sub"]\n\tK = v\n[a "b\\"c\\\\d"]\n\tk\n',
    b'[core "\\x"]\n\tk = v\n',
    b'[core\n]\n',
    b'[ "x"]\n\tk = v\n',
    b'[]\n',
    b'k = top\n',
    b'[core]\n\t9k = v\n',
    b'[core]\n\tk\r = v\n',
    b'[core]\n\tpager = a\rb\n',
    b'[core]\n\tpager = a\x00b\n',
    b'[core "a\x00b"]\n\tpager = v\n',
    b'[core]\n\tpager = a \t \n',
    b'[core]\n\tpager = "a\tb" c\td\n',
    b'[core]\n\tpager = \\\n',
    b'[core]\n\tpager',
]


@pytest.mark.parametrize("data", SYNTAX, ids=range(len(SYNTAX)))
def test_reader_reads_as_git_does(tmp_path: Path, data: bytes) -> None:
    want = git_list(tmp_path, data)
    try:
        got: list[tuple[str, str | None]] | None = gitconfig.read(
            data, old_blanks=git_version() < (2, 45))
    except gitconfig.ConfigSyntaxError:
        got = None
    assert got == want


def test_reader_line_breaks_control(tmp_path: Path) -> None:
    """Control: git reads core.fsmonitor from each line-break form, where a reader
    splitting lines as Python does sees only a remote section."""
    for data in SYNTAX[4:8]:
        assert ("core.fsmonitor", "x") in (git_list(tmp_path, data) or [])
        naive = [line.strip() for line in data.decode("utf-8", "replace").splitlines()]
        assert '[remote "y"]' in naive
        assert ("core.fsmonitor", "x") in gitconfig.read(data)


@pytest.mark.parametrize("data", [b"[core]\n\tpager = a\rb\n", b"[core]\n\tk = a\x00b\n",
                                  b"[core]\n\tk = \x1b[0m\n", b'[remote "\x0c"]\n\turl = x\n',
                                  b"[core]\n\tk = v\x7f\n"])
def test_judge_refuses_what_it_cannot_read_exactly(tmp_path: Path, data: bytes) -> None:
    """git reads these files (the control), the judge of a new repository refuses them."""
    assert git_list(tmp_path, data) is not None
    assert gitconfig.unreadable(data)
    assert gitconfig.unreadable(b"[core]\r\n\tbare = false\r\n") is None


# --- the planner and the judges over a fake filesystem (pure) --------------------

P = CWD  # the writable root of these plans


class Fs(FakeFs):
    """The fake filesystem, resolving ``..`` as the real one does (no link on the way)."""

    def realpath(self, path: str) -> str:
        return super().realpath(posixpath.normpath(path))

RW = {"filesystem": {"allowWrite": ["."]}}


def _plan(entries: dict[str, str], links: dict[str, str] | None = None,
          contents: dict[str, bytes] | None = None) -> bw.Plan:
    fs = Fs({**BASE, **entries}, links)
    fs.contents.update(contents or {})
    return bw.plan(parse(RW), home=HOME, cwd=CWD, fs=fs)


def test_every_worktree_config_is_kept_from_appearing() -> None:
    """The main worktree's config.worktree and a linked one's, absent, get a
    read-only placeholder; the control: an existing one is read-only as it is."""
    p = _plan({f"{P}/.git/HEAD": "f", f"{P}/.git/config": "f",
               f"{P}/.git/worktrees/wt/HEAD": "f", f"{P}/.git/worktrees/wt/commondir": "f",
               f"{P}/.git/worktrees/wt/gitdir": "f", f"{P}/.git/modules/m/HEAD": "f"},
              contents={f"{P}/.git/worktrees/wt/commondir": b"../..\n"})
    held = dict(p.absent)
    for path in (f"{P}/.git/config.worktree", f"{P}/.git/worktrees/wt/config.worktree",
                 f"{P}/.git/modules/m/config.worktree"):
        assert held.get(path) == "f" and ("ro", path) in ops(p), path
    p = _plan({f"{P}/.git/HEAD": "f", f"{P}/.git/config.worktree": "f"})
    assert ("ro", f"{P}/.git/config.worktree") in ops(p)
    assert f"{P}/.git/config.worktree" not in dict(p.absent)


@pytest.mark.parametrize("shape", ["head-link", "commondir", "gitdir", "head-dir"])
def test_a_folder_git_may_take_for_a_git_directory(shape: str) -> None:
    entries = {f"{P}/x/config": "f", f"{P}/x/objects/o": "f", f"{P}/x/refs/r": "f"}
    links: dict[str, str] = {}
    if shape == "head-link":
        links[f"{P}/x/HEAD"] = f"{P}/x/refs/heads/main"
        entries[f"{P}/x/HEAD"] = "l"  # the fake's walk lists its entries only
    elif shape == "head-dir":
        entries[f"{P}/x/HEAD/y"] = "f"
    else:
        entries[f"{P}/x/{shape}"] = "f"
    o = ops(_plan(entries, links))
    assert ("ro", f"{P}/x/config") in o
    assert ("ro", f"{P}/x/hooks") in o  # a placeholder
    # the control: the same folder without any of the three names is not one
    o = ops(_plan({f"{P}/y/config": "f", f"{P}/y/objects/o": "f", f"{P}/y/refs/r": "f"}))
    assert ("ro", f"{P}/y/config") not in o


def test_commondir_is_followed() -> None:
    """A git directory's configuration and hooks are its common directory's."""
    p = _plan({f"{P}/x/HEAD": "f", f"{P}/x/commondir": "f", f"{P}/common/config": "f",
               f"{P}/common/objects/o": "f", f"{P}/common/refs/r": "f"},
              contents={f"{P}/x/commondir": b"../common\r\n"})
    assert ("ro", f"{P}/common/config") in ops(p)
    assert dict(p.absent).get(f"{P}/common/hooks") == "f"
    assert dict(p.absent).get(f"{P}/common/config.worktree") == "f"


def test_a_gitdir_file_pointing_at_nothing_keeps_it_from_appearing() -> None:
    p = _plan({f"{P}/sub/.git": "f"}, contents={f"{P}/sub/.git": b"gitdir: ../.store\n"})
    assert dict(p.absent).get(f"{P}/.store") == "f"
    # as git reads it: the space after "gitdir:" is part of the form, the rest verbatim
    p = _plan({f"{P}/sub/.git": "f"}, contents={f"{P}/sub/.git": b"gitdir:  ../.s \n"})
    assert dict(p.absent).get(f"{P}/sub/ ../.s ") == "f"


def test_new_worktree_judge() -> None:
    g = f"{P}/.git"
    fs = Fs({f"{g}/HEAD": "f", f"{g}/worktrees/a/commondir": "f",
                 f"{g}/worktrees/a/HEAD": "f", f"{g}/worktrees/b/commondir": "f",
                 f"{g}/worktrees/c/commondir": "f", f"{g}/worktrees/c/config.worktree": "f",
                 f"{g}/worktrees/d/commondir": "f", f"{g}/worktrees/d/config.worktree": "f"})
    fs.contents.update({f"{g}/worktrees/a/commondir": b"../..\n",
                        f"{g}/worktrees/b/commondir": b"../../../evil\n",
                        f"{g}/worktrees/c/commondir": b"../..\n",
                        f"{g}/worktrees/c/config.worktree": b"[core]\n\tsparseCheckout = true\n",
                        f"{g}/worktrees/d/commondir": b"../..\n",
                        f"{g}/worktrees/d/config.worktree": b"[core]\n#\r[remote \"y\"]\n"
                                                            b"\tfsmonitor = /x\n"})
    assert gitmeta.check_new_worktree(fs, f"{g}/worktrees/a", g) is None
    assert gitmeta.check_new_worktree(fs, f"{g}/worktrees/c", g) is None
    assert "commondir" in (gitmeta.check_new_worktree(fs, f"{g}/worktrees/b", g) or "")
    assert "control byte" in (gitmeta.check_new_worktree(fs, f"{g}/worktrees/d", g) or "")


# --- end-to-end: a writable root, the host's git after the run -------------------

# Each case: what the host sets up first, what the command does inside, and where
# (and how) the host's git runs after. {work} is the writable root, {evil} the
# command's program; the judge's marker lies outside the root.
FSMON = "printf '[core]\\n\\tfsmonitor = {work}/evil.sh\\n'"
PAGER = "printf '[core]\\n\\tpager = {work}/evil.sh\\n'"
BREAK = ("printf '[core]\\n\\trepositoryformatversion = 0\\n#{sep}[remote \"y\"]\\n"
         "\\t{key} = {work}/evil.sh\\n'")


def _git(cwd: Path, home: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, env=host_env(home), check=True, capture_output=True)


def _repo(work: Path, home: Path, name: str = "repo", worktree_config: bool = False) -> Path:
    repo = work / name
    _git(work, home, "init", "-q", name)
    _git(repo, home, "-c", "user.name=u", "-c", "user.email=u@x", "commit", "-q",
         "--allow-empty", "-m", "i")
    if worktree_config:
        _git(repo, home, "config", "extensions.worktreeConfig", "true")
    return repo


def _stale_worktree(work: Path, home: Path) -> None:
    """A linked worktree whose git directory is gone (removed by hand): its .git
    file still points at repo/.git/worktrees/wt."""
    _repo(work, home, worktree_config=True)
    _git(work / "repo", home, "worktree", "add", "-q", "../wt")
    _git(work / "repo", home, "worktree", "lock", "wt")  # kept, not pruned
    subprocess.run(["rm", "-rf", str(work / "repo/.git/worktrees/wt")], check=True)


def _stale_submodule(work: Path, home: Path) -> None:
    """A checked-out submodule whose git directory is gone: sub/.git points at
    repo/.git/modules/sub."""
    _repo(work, home)
    (work / "repo/sub").mkdir()
    (work / "repo/sub/.git").write_text("gitdir: ../.git/modules/sub\n")


def _separate(work: Path, home: Path) -> None:
    """A work tree w whose git directory lives beside it (``--separate-git-dir``)."""
    _git(work, home, "init", "-q", "--separate-git-dir=store", "w")


def _meta(work: Path, home: Path) -> None:
    """A --git-dir layout: the git directory ``meta`` beside the files, named on
    every command line (``git --git-dir=meta --work-tree=.``)."""
    _git(work, home, "init", "-q", "--bare", "meta")
    _git(work, home, "--git-dir=meta", "config", "extensions.worktreeConfig", "true")


HEX = "0" * 40
CASES: dict[str, tuple] = {
    # class 1: line breaks a line-based reader sees and git does not
    "break-vt": (None, "git init -q n && " + BREAK.format(sep="\\013", key="fsmonitor",
                 work="{work}") + " > n/.git/config", "n", ("status",)),
    "break-gs": (None, "git init -q n && " + BREAK.format(sep="\\035", key="fsmonitor",
                 work="{work}") + " > n/.git/config", "n", ("status",)),
    "break-rs": (None, "git init -q n && " + BREAK.format(sep="\\036", key="fsmonitor",
                 work="{work}") + " > n/.git/config", "n", ("status",)),
    "break-nel": (None, "git init -q n && " + BREAK.format(sep="\\302\\205", key="fsmonitor",
                  work="{work}") + " > n/.git/config", "n", ("status",)),
    "break-ls": (None, "git init -q n && " + BREAK.format(sep="\\342\\200\\250",
                 key="fsmonitor", work="{work}") + " > n/.git/config", "n", ("status",)),
    "break-ps": (None, "git init -q n && " + BREAK.format(sep="\\342\\200\\251",
                 key="fsmonitor", work="{work}") + " > n/.git/config", "n", ("status",)),
    "break-bare-pager": (None, "git init -q --bare b.git && " + BREAK.format(
        sep="\\r", key="pager", work="{work}") + " > b.git/config", "b.git", ("branch", "tty")),
    "break-submodule": (_stale_submodule, "git init -q --bare repo/.git/modules/sub && "
                        + BREAK.format(sep="\\r", key="fsmonitor", work="{work}")
                        + " > repo/.git/modules/sub/config && printf '\\tworktree = ../../../sub"
                        "\\n' >> repo/.git/modules/sub/config", "repo/sub", ("status",)),
    # class 2: git directories of other shapes
    "objects-file": (None, f"mkdir -p src/refs && touch src/objects && chmod +x src/objects && "
                     f"echo {HEX} > src/HEAD && " + PAGER + " > src/config", "src",
                     ("branch", "tty")),
    "refs-link-head-hex": (None, f"mkdir -p .r src/objects && ln -s ../.r src/refs && "
                           f"echo {HEX} > src/HEAD && " + PAGER + " > src/config", "src",
                           ("branch", "tty")),
    "bare-in-subfolder": (None, "git init -q --bare a/b/c.git && git -C a/b/c.git config "
                          "core.pager {work}/evil.sh", "a/b/c.git", ("branch", "tty")),
    "gitdir-file-new": (None, "mkdir -p w2 && git init -q --bare .store2 && " + FSMON
                        + " >> .store2/config && printf '\\tbare = false\\n\\tworktree = "
                        "../w2\\n' >> .store2/config && echo 'gitdir: ../.store2' > w2/.git",
                        "w2", ("status",)),
    "gitdir-file-commondir": (_separate, "mkdir -p evil/objects evil/refs && " + FSMON
                              + " > evil/config && echo ../evil > store/commondir",
                              "w", ("status",)),
    "git-dir-layout-commondir": (_meta, "mkdir -p evil/objects evil/refs && " + FSMON
                                 + " > evil/config && echo ../evil > meta/commondir",
                                 ".", ("--git-dir=meta", "--work-tree=.", "status")),
    "git-dir-layout-worktree-config": (_meta, FSMON + " > meta/config.worktree", ".",
                                       ("--git-dir=meta", "--work-tree=.", "status")),
    "submodule-head-link": (_stale_submodule, "m=repo/.git/modules/sub && mkdir -p $m/refs/heads "
                            "$m/.o && ln -s .o $m/objects && ln -s refs/heads/main $m/HEAD && "
                            + FSMON + " > $m/config && printf '\\tworktree = ../../../sub\\n' "
                            ">> $m/config", "repo/sub", ("status",)),
    # class 3: worktrees
    "worktree-made-in-run": (lambda w, h: _repo(w, h, worktree_config=True),
                             "git -C repo worktree add -q ../wt2 && " + FSMON
                             + " > repo/.git/worktrees/wt2/config.worktree", "wt2", ("status",)),
    "worktree-admin-again": (_stale_worktree, "a=repo/.git/worktrees/wt && mkdir -p $a && "
                             "echo ../.. > $a/commondir && echo {work}/wt/.git > $a/gitdir && "
                             "git -C repo rev-parse HEAD > $a/HEAD && " + FSMON
                             + " > $a/config.worktree", "wt", ("status",)),
    "worktree-admin-commondir": (_stale_worktree, "a=repo/.git/worktrees/wt && mkdir -p $a "
                                 "evil/objects evil/refs && echo ../../../../evil > $a/commondir"
                                 " && git -C repo rev-parse HEAD > $a/HEAD && " + FSMON
                                 + " > evil/config", "wt", ("status",)),
}


def _run_case(tmp_path: Path, name: str, sandbox: bool) -> Path:
    setup, attack, where, args = CASES[name]
    work = tmp_path / "work"
    work.mkdir()
    home = tmp_path / "home"
    home.mkdir()
    marker = tmp_path / "ran"
    if setup is not None:
        setup(work, home)
    script = evil(work, marker) + attack.format(work=work)
    if sandbox:
        r = sandboxed(work, settings_for(tmp_path, work), "(" + script + ") || echo refused")
        assert r.returncode == 0, r.stderr
    else:
        unsandboxed(work, script)
    if sandbox and not (work / where).is_dir():
        return marker  # refused before the folder git would run in was made: nothing to fire
    tty = args[-1] == "tty"
    host_git(work / where, home, *(args[:-1] if tty else args), tty=tty)
    return marker


@pytest.mark.parametrize("name", sorted(CASES))
def test_git_metadata_form(tmp_path: Path, name: str) -> None:
    marker = _run_case(tmp_path, name, sandbox=True)
    assert not marker.exists(), f"host git ran the command's program ({name})"


@pytest.mark.parametrize("name", sorted(CASES))
def test_git_metadata_form_control(tmp_path: Path, name: str) -> None:
    marker = _run_case(tmp_path, name, sandbox=False)
    assert marker.exists(), f"the judge cannot see the attack ({name})"
