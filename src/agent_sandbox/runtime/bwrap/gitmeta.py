"""Git metadata that changes what git executes, found for the planner and the sweep.

A repository below a writable root keeps its object store, refs, index, HEAD and
logs writable (``git add``, ``commit`` and ``checkout`` work inside a sandbox),
while everything that decides which programs git runs or which configuration it
reads stays read-only (``protected.GIT_EXECUTABLE``): in the repository's git
directory, in every submodule's (``modules/**``) and worktree's
(``worktrees/*``) git directory, behind a ``.git`` file (``gitdir:``), and at
every path a protected configuration names (``core.hooksPath`` such as
``.husky/``, ``include.path``, ``core.fsmonitor``, editors, pagers...).

A git directory is what git's own test takes for one, or wider
(``looks_like_git_dir``): a folder with a ``HEAD`` (a file or a link, whatever
it holds), a ``commondir`` or a ``gitdir`` entry; git also wants ``objects``
and ``refs``, but finds them through links and through ``commondir``, so
their kinds decide nothing here. ``commondir`` is followed: the configuration
and hooks git reads are the common directory's, protected as well. Every
worktree's ``config.worktree`` (the main one's in the common directory, each
linked one's in ``worktrees/NAME``) is protected whether it exists or not.

``check_new_git_dir`` judges a git directory the command created during a run
(``git init`` works inside): it passes only what ``git init`` and ordinary git
use would write; anything else is quarantined by the sweep.
``check_new_worktree`` does the same for a linked worktree's folder
(``worktrees/NAME``) the run created. Configuration is read by ``gitconfig``,
as git reads it; a judge refuses what it cannot read exactly.

Pure over an ``FsView`` (``fsview.FsView``): it reads small files through it and
never writes.
"""

from __future__ import annotations

import posixpath

from agent_sandbox.errors import SandboxError
from agent_sandbox.protected import GIT_DIR, GIT_EXECUTABLE, GIT_PATH_KEYS

from . import gitconfig

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .fsview import FsView

MAX_DEPTH = 16  # nested submodules and includes followed this deep, then refused
READ_LIMIT = 1 << 20


class GitMetaError(SandboxError, ValueError):
    """Git metadata that cannot be judged (too deep, unreadable): the run refuses."""


def gitdir_of_file(fs: FsView, dotgit: str) -> str | None:
    """The git directory a ``.git`` file points to, resolved, read as git reads it:
    a regular file (links followed) starting ``gitdir: ``, the rest verbatim but
    the line ends and what follows a NUL, relative to the file's folder."""
    data = fs.read(dotgit, READ_LIMIT + 1)
    if data is None or len(data) > READ_LIMIT or not data.startswith(b"gitdir: "):
        return None
    target = data[len(b"gitdir: "):].rstrip(b"\r\n").split(b"\0", 1)[0]
    if not target:
        return None
    return fs.realpath(posixpath.join(posixpath.dirname(dotgit),
                                      target.decode("utf-8", "surrogateescape")))


def commondir_of(fs: FsView, gitdir: str) -> str | None:
    """The common directory a ``commondir`` file names (git: line ends stripped,
    relative to the git directory), resolved; None without one."""
    data = fs.read(posixpath.join(gitdir, "commondir"), 4096)
    if not data:
        return None
    target = data.rstrip(b"\r\n").split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
    return fs.realpath(posixpath.join(gitdir, target)) if target else None


GIT_DIR_MARKS = ("HEAD", "commondir", "gitdir")


def looks_like_git_dir(fs: FsView, path: str) -> bool:
    """Whether git may take ``path`` for a git directory (see the module's notes)."""
    return any(fs.lkind(posixpath.join(path, m)) is not None for m in GIT_DIR_MARKS)


def parse_config(data: bytes, old_blanks: bool = False) -> list[tuple[str, str]]:
    """(``section[.sub].key`` lowercased but the subsection, value) pairs of a git
    config file, read as git reads it (``gitconfig.read``), up to where git would
    stop; a key without ``=`` has the value ``true``."""
    try:
        entries = gitconfig.read(data, old_blanks)
    except gitconfig.ConfigSyntaxError as exc:
        entries = exc.entries  # git dies there, having read only these
    return [(k, "true" if v is None else v) for k, v in entries]


def _path_entries(data: bytes) -> list[tuple[str, str]]:
    """The entries of keys that name paths, as any git version reads them: a tab
    or CR inside a value is kept by git 2.45 and later, a space before."""
    out = [(k, v) for k, v in parse_config(data) if _config_key(k) in GIT_PATH_KEYS]
    if any("\t" in v or "\r" in v for _, v in out):
        out += [e for e in parse_config(data, old_blanks=True)
                if _config_key(e[0]) in GIT_PATH_KEYS and e not in out]
    return out


_PER_SUBSECTION = frozenset({"credential", "filter", "diff", "merge", "difftool", "mergetool",
                             "gpg", "remote", "man", "browser"})


def _config_key(full: str) -> str:
    """``includeif.gitdir:x.path`` -> ``include.path``; ``filter.x.clean`` ->
    ``filter.clean``; ``pager.log`` -> ``pager``; ``core.x`` unchanged."""
    section, _, rest = full.partition(".")
    if section in ("include", "includeif"):
        return "include.path" if full.endswith(".path") else full
    if "." in rest and section in _PER_SUBSECTION:
        return f"{section}.{rest.rsplit('.', 1)[-1]}"
    if section in ("pager", "alias"):
        return section
    return full


def _command_words(value: str) -> list[str]:
    """The words of a command a configuration value holds, as the shell splits them,
    a quoted script's words too (``sh -c 'tools/conv.sh "$0"'``)."""
    import shlex

    try:
        words = shlex.split(value)
    except ValueError:
        return value.split()
    out: list[str] = []
    for w in words:
        out += _command_words(w) if any(c.isspace() for c in w) and w != value else [w]
    return out


# keys whose whole value is one path (a command's words are split)
_ONE_PATH = ("core.hookspath", "include.path", "init.templatedir")


def named_paths(fs: FsView, config: str, base: str, depth: int = 0,
                home: str | None = None) -> list[tuple[str, str]]:
    """Paths (with kind) that a config file names in keys that run or load things,
    includes followed; relative values resolved against ``base`` (the worktree),
    ``~/`` against ``home`` (git expands it in path values)."""
    if depth > MAX_DEPTH:
        raise GitMetaError(f"{config}: includes nested deeper than {MAX_DEPTH}")
    data = fs.read(config, READ_LIMIT)
    if data is None:
        return []
    if len(data) >= READ_LIMIT:
        raise GitMetaError(f"{config}: larger than {READ_LIMIT} bytes, too large to judge")
    out: list[tuple[str, str]] = []
    for full, value in _path_entries(data):
        key = _config_key(full)
        if not value:
            continue
        words = [value] if key in _ONE_PATH else _command_words(value)
        for i, word in enumerate(words):
            if word.startswith("!"):
                word = word[1:]
            if key not in _ONE_PATH and "/" not in word and (
                    i == 0 or word.startswith(("-", "%")) or ("." not in word and
                    fs.lkind(posixpath.join(base, word)) is None)):
                # a program git finds on PATH, an option, what git fills in (%f); a
                # bare word is a file (``python3 strip.py``) when it looks like one
                continue
            for pwd in ("$PWD/", "${PWD}/", "$(pwd)/"):  # the worktree git runs it in
                if word.startswith(pwd):
                    word = word[len(pwd):]
            if word.startswith("~/") and home:
                word = posixpath.join(home, word[2:])
            elif word.startswith(("~", "$", "%(")):
                continue  # another user's home, or expanded by a shell at run time
            rel_to = posixpath.dirname(config) if key == "include.path" else base
            path = posixpath.normpath(posixpath.join(rel_to, word))
            kind = "d" if key in ("core.hookspath", "init.templatedir") else "f"
            out.append((path, kind))
            if key == "include.path" and fs.kind(path) == "f":
                out += named_paths(fs, path, base, depth + 1, home)
    return out


def protect_git_dir(fs: FsView, gitdir: str, worktree: str, depth: int = 0,
                    home: str | None = None, seen: set[str] | None = None
                    ) -> tuple[list[str], list[tuple[str, str]]]:
    """(existing paths to keep read-only, absent ones to protect with a placeholder)
    for one git directory, its common directory and every git directory inside."""
    if depth > MAX_DEPTH:
        raise GitMetaError(f"{gitdir}: git directories nested deeper than {MAX_DEPTH}")
    seen = set() if seen is None else seen
    if gitdir in seen:
        return [], []
    seen.add(gitdir)
    ro: list[str] = []
    absent: list[tuple[str, str]] = []
    for sub, _kind, _ in GIT_EXECUTABLE:
        p = posixpath.join(gitdir, sub)
        if fs.lkind(p) is not None:
            ro.append(p)
        elif sub in ("hooks", "config.worktree"):
            # git runs what appears in hooks/, and reads config.worktree once
            # extensions.worktreeConfig is on: keep them from appearing
            absent.append((p, "d" if sub == "hooks" else "f"))
    def named(config: str, common_of: str) -> None:
        """The paths ``config`` names (existing: read-only; absent: kept from
        appearing), then the git directory ``common_of``'s commondir points at."""
        for path, kind in named_paths(fs, config, worktree, home=home):
            if fs.lkind(path) is not None:
                ro.append(path)
            else:
                absent.append((path, kind))
        common = commondir_of(fs, common_of) if common_of else None
        if common is not None and fs.kind(common) == "d":
            r, a = protect_git_dir(fs, common, worktree, depth + 1, home, seen)
            ro.extend(r)
            absent.extend(a)

    named(posixpath.join(gitdir, "config"), "")
    named(posixpath.join(gitdir, "config.worktree"), gitdir)
    modules = posixpath.join(gitdir, "modules")
    if fs.kind(modules) == "d":
        for path, kind in fs.walk(modules):
            if kind == "d" and looks_like_git_dir(fs, path):
                r, a = protect_git_dir(fs, path, path, depth + 1, home, seen)
                ro += r
                absent += a
    worktrees = posixpath.join(gitdir, "worktrees")
    if fs.kind(worktrees) == "d":
        for path, kind in fs.walk(worktrees):
            if kind != "d" or posixpath.dirname(path) != worktrees:
                continue
            # a linked worktree's own git directory: its config.worktree (read for
            # that worktree), commondir (where its config and hooks come from)
            for sub in ("config.worktree", "commondir", "gitdir"):
                p = posixpath.join(path, sub)
                if fs.lkind(p) is not None:
                    ro.append(p)
                elif sub == "config.worktree":
                    absent.append((p, "f"))
            named(posixpath.join(path, "config.worktree"), path)
    return ro, absent


# What ``git init``, ``clone`` and ordinary use write into a new repository's
# configuration: nothing that names a program or a file to load.
SAFE_NEW_KEYS = frozenset({
    "core.repositoryformatversion", "core.filemode", "core.bare", "core.logallrefupdates",
    "core.ignorecase", "core.precomposeunicode", "core.symlinks", "core.autocrlf",
    "core.eol", "core.sharedrepository", "init.defaultbranch", "user.name", "user.email",
    "extensions.objectformat", "extensions.refstorage", "extensions.worktreeconfig",
    "gc.auto", "pull.rebase", "pull.ff", "push.default", "fetch.prune", "advice.detachedhead",
    "core.sparsecheckout", "core.sparsecheckoutcone",
})
SAFE_NEW_SECTIONS = ("remote.", "branch.")
# what ``git submodule add`` and ``init`` write of a submodule (never ``update``,
# whose ``!command`` form git runs)
SUBMODULE_KEYS = frozenset({"url", "active", "branch", "ignore", "fetchrecursesubmodules",
                            "shallow"})
UNSAFE_REMOTE_KEYS = ("uploadpack", "receivepack", "vcs", "proxy")


def _config_why(fs: FsView, path: str, what: str) -> str | None:
    """Why a configuration file made during a run is unsafe for host-side git:
    unreadable exactly as git reads it, or a key outside what git writes itself."""
    kind = fs.lkind(path)
    if kind is None:
        return None
    if kind != "f":
        return f"{what} is not a file"
    data = fs.read(path, READ_LIMIT)
    if data is None:
        return f"{what} cannot be read"
    return config_text_why(data, what, posixpath.dirname(path))


def config_text_why(data: bytes, what: str, gitdir: str | None = None) -> str | None:
    """Why a configuration's text, new from a run, is unsafe for host-side git (as
    ``_config_why`` judges a file), or None. ``gitdir``: the git folder it is the
    configuration of (a submodule's may name its work tree: ``_submodule_tree``)."""
    why = gitconfig.unreadable(data, READ_LIMIT)
    if why:
        return f"its {what} cannot be judged: {why}"
    for key, value in gitconfig.read(data):
        if key in SAFE_NEW_KEYS:
            continue
        if key.startswith(SAFE_NEW_SECTIONS) and not key.endswith(UNSAFE_REMOTE_KEYS):
            continue
        if key.startswith("submodule.") and key.rpartition(".")[2] in SUBMODULE_KEYS:
            continue
        if key == "core.worktree" and gitdir is not None and _submodule_tree(gitdir, value):
            continue
        return f"its {what} sets {key}"
    return None


def superproject_of(gitdir: str) -> str | None:
    """R, the work tree of the superproject, when ``gitdir`` is a submodule's git
    folder (``R/.git/modules/NAME``, a name may hold slashes); else None."""
    parts = gitdir.rstrip("/").split("/")
    if GIT_DIR not in parts:
        return None
    top = parts.index(GIT_DIR)
    if len(parts) < top + 3 or parts[top + 1] != "modules":
        return None
    return "/".join(parts[:top]) or "/"


def _submodule_tree(gitdir: str, value: str | None) -> bool:
    """``core.worktree`` as ``git submodule`` writes it in a submodule's git folder
    (``R/.git/modules/NAME``): a folder inside R's work tree, outside any ``.git``."""
    work = superproject_of(gitdir)
    if work is None or not value:
        return False
    target = posixpath.normpath(posixpath.join(gitdir, value))
    inside = target.startswith(work.rstrip("/") + "/")
    return inside and GIT_DIR not in target[len(work):].split("/")


def _hooks_why(fs: FsView, gitdir: str) -> str | None:
    hooks = posixpath.join(gitdir, "hooks")
    hk = fs.lkind(hooks)
    if hk not in (None, "d"):
        return "hooks is not a folder"
    if hk == "d":
        for path, kind in fs.walk(hooks):
            if kind != "f" or not path.endswith(".sample") or posixpath.dirname(path) != hooks:
                return f"it has the hook {path}"
    return None


def check_new_git_dir(fs: FsView, gitdir: str, depth: int = 0) -> str | None:
    """Why a git directory created during a run is unsafe for host-side git, or None."""
    if depth > MAX_DEPTH:
        return "git directories nested too deep"
    for sub in ("commondir", "config.worktree"):
        if fs.lkind(posixpath.join(gitdir, sub)) is not None:
            return f"it has {sub}"
    why = _hooks_why(fs, gitdir) or _config_why(fs, posixpath.join(gitdir, "config"), "config")
    if why:
        return why
    modules = posixpath.join(gitdir, "modules")
    if fs.lkind(modules) == "d":
        for path, kind in fs.walk(modules):
            if kind == "d" and looks_like_git_dir(fs, path):
                why = check_new_git_dir(fs, path, depth + 1)
                if why:
                    return why
    elif fs.lkind(modules) is not None:
        return "modules is not a folder"
    worktrees = posixpath.join(gitdir, "worktrees")
    held = fs.lkind(worktrees)
    if held not in (None, "d"):
        return "worktrees is not a folder"
    for name in (fs.listdir(worktrees) or []) if held == "d" else ():
        why = check_new_worktree(fs, posixpath.join(worktrees, name), gitdir)
        if why:
            return f"its worktree {name}: {why}"
    return None


def check_new_worktree(fs: FsView, admin: str, gitdir: str) -> str | None:
    """Why a linked worktree's git directory (``gitdir/worktrees/NAME``) created
    during a run is unsafe, or None: what ``git worktree add`` writes passes (a
    ``commondir`` naming ``gitdir``, a ``config.worktree`` with safe keys)."""
    if fs.lkind(admin) != "d":
        return "it is not a folder"
    if fs.lkind(posixpath.join(admin, "commondir")) not in (None, "f"):
        return "its commondir is not a file"
    common = commondir_of(fs, admin)
    if common is not None and common != fs.realpath(gitdir):
        return f"its commondir names {common}"
    for sub in ("modules", "worktrees"):
        if fs.lkind(posixpath.join(admin, sub)) is not None:
            return f"it has {sub}"
    return (_hooks_why(fs, admin)
            or _config_why(fs, posixpath.join(admin, "config"), "config")
            or _config_why(fs, posixpath.join(admin, "config.worktree"), "config.worktree"))
