"""Git metadata that changes what git executes, found for the planner and the sweep.

A repository below a writable root keeps its object store, refs, index, HEAD and
logs writable (``git add``, ``commit`` and ``checkout`` work inside a sandbox),
while everything that decides which programs git runs or which configuration it
reads stays read-only (``protected.GIT_EXECUTABLE``): in the repository's git
directory, in every submodule's (``modules/**``) and worktree's
(``worktrees/*``) git directory, behind a ``.git`` file (``gitdir:``), and at
every path a protected configuration names (``core.hooksPath`` such as
``.husky/``, ``include.path``, ``core.fsmonitor``, editors, pagers...).

``check_new_git_dir`` judges a git directory the command created during a run
(``git init`` works inside): it passes only what ``git init`` and ordinary git
use would write; anything else is quarantined by the sweep.

Pure over an ``FsView`` (``bwrap.FsView``): it reads small files through it and
never writes.
"""

from __future__ import annotations

import posixpath

from agent_sandbox.errors import SandboxError
from agent_sandbox.protected import GIT_EXECUTABLE, GIT_PATH_KEYS

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .bwrap import FsView

MAX_DEPTH = 16  # nested submodules and includes followed this deep, then refused
READ_LIMIT = 1 << 20


class GitMetaError(SandboxError, ValueError):
    """Git metadata that cannot be judged (too deep, unreadable): the run refuses."""


def gitdir_of_file(fs: FsView, dotgit: str) -> str | None:
    """The git directory a ``.git`` file points to (``gitdir: PATH``), resolved."""
    data = fs.read(dotgit, 4096)
    if data is None:
        return None
    text = data.decode("utf-8", "replace").strip()
    if not text.startswith("gitdir:"):
        return None
    target = text[len("gitdir:"):].strip()
    if not target:
        return None
    return fs.realpath(posixpath.join(posixpath.dirname(dotgit), target))


def parse_config(data: bytes) -> list[tuple[str, str]]:
    """(``section[.sub].key`` lowercased but the subsection, value) pairs of a git
    config file; tolerant, like git's reader, of what it does not need."""
    out: list[tuple[str, str]] = []
    section = ""
    for raw in data.decode("utf-8", "replace").splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            end = line.find("]")
            head = line[1:end if end > 0 else len(line)].strip()
            if '"' in head:
                name, _, sub = head.partition('"')
                section = name.strip().lower() + "." + sub.rstrip('"')
            else:
                section = head.lower()
            line = line[end + 1:].strip() if end > 0 else ""
            if not line:
                continue
        key, eq, value = line.partition("=")
        value = value.strip() if eq else "true"
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1]
        out.append((f"{section}.{key.strip().lower()}", value))
    return out


def _config_key(full: str) -> str:
    """``includeif.gitdir:x.path`` -> ``include.path``; ``core.x`` unchanged."""
    section, _, rest = full.partition(".")
    if section in ("include", "includeif"):
        return "include.path" if full.endswith(".path") else full
    if "." in rest and section in ("credential",):
        return f"{section}.{rest.rsplit('.', 1)[-1]}"
    return full


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
    out: list[tuple[str, str]] = []
    for full, value in parse_config(data):
        key = _config_key(full)
        if key not in GIT_PATH_KEYS or not value:
            continue
        words = [value] if key in ("core.hookspath", "include.path") else value.split()
        for word in words:
            if key not in ("core.hookspath", "include.path") and "/" not in word:
                continue
            if word.startswith("!"):
                word = word[1:]
            if word.startswith("~/") and home:
                word = posixpath.join(home, word[2:])
            elif word.startswith(("~", "$", "%(")):
                continue  # another user's home, or expanded by a shell at run time
            rel_to = posixpath.dirname(config) if key == "include.path" else base
            path = posixpath.normpath(posixpath.join(rel_to, word))
            kind = "d" if key == "core.hookspath" else "f"
            out.append((path, kind))
            if key == "include.path" and fs.kind(path) == "f":
                out += named_paths(fs, path, base, depth + 1, home)
    return out


def protect_git_dir(fs: FsView, gitdir: str, worktree: str, depth: int = 0,
                    home: str | None = None) -> tuple[list[str], list[tuple[str, str]]]:
    """(existing paths to keep read-only, absent ones to protect with a placeholder)
    for one git directory and every git directory inside it."""
    if depth > MAX_DEPTH:
        raise GitMetaError(f"{gitdir}: git directories nested deeper than {MAX_DEPTH}")
    ro: list[str] = []
    absent: list[tuple[str, str]] = []
    for sub, _kind, _ in GIT_EXECUTABLE:
        p = posixpath.join(gitdir, sub)
        if fs.lkind(p) is not None:
            ro.append(p)
        elif sub == "hooks":
            absent.append((p, "d"))  # git runs what appears here: keep it from appearing
    for config in ("config", "config.worktree"):
        for path, kind in named_paths(fs, posixpath.join(gitdir, config), worktree, home=home):
            if fs.lkind(path) is not None:
                ro.append(path)
            else:
                absent.append((path, kind))
    modules = posixpath.join(gitdir, "modules")
    if fs.kind(modules) == "d":
        for path, kind in fs.walk(modules):
            if kind == "d" and fs.lkind(posixpath.join(path, "HEAD")) == "f":
                r, a = protect_git_dir(fs, path, path, depth + 1, home)
                ro += r
                absent += a
    worktrees = posixpath.join(gitdir, "worktrees")
    if fs.kind(worktrees) == "d":
        for path, kind in fs.walk(worktrees):
            if kind == "d" and posixpath.dirname(path) == worktrees:
                for sub in ("config.worktree", "commondir", "gitdir"):
                    p = posixpath.join(path, sub)
                    if fs.lkind(p) is not None:
                        ro.append(p)
    return ro, absent


# What ``git init``, ``clone`` and ordinary use write into a new repository's
# configuration: nothing that names a program or a file to load.
SAFE_NEW_KEYS = frozenset({
    "core.repositoryformatversion", "core.filemode", "core.bare", "core.logallrefupdates",
    "core.ignorecase", "core.precomposeunicode", "core.symlinks", "core.autocrlf",
    "core.eol", "core.sharedrepository", "init.defaultbranch", "user.name", "user.email",
    "extensions.objectformat", "extensions.refstorage", "extensions.worktreeconfig",
    "gc.auto", "pull.rebase", "pull.ff", "push.default", "fetch.prune", "advice.detachedhead",
})
SAFE_NEW_SECTIONS = ("remote.", "branch.")
UNSAFE_REMOTE_KEYS = ("uploadpack", "receivepack", "vcs", "proxy")


def check_new_git_dir(fs: FsView, gitdir: str, depth: int = 0) -> str | None:
    """Why a git directory created during a run is unsafe for host-side git, or None."""
    if depth > MAX_DEPTH:
        return "git directories nested too deep"
    for sub in ("commondir", "config.worktree"):
        if fs.lkind(posixpath.join(gitdir, sub)) is not None:
            return f"it has {sub}"
    hooks = posixpath.join(gitdir, "hooks")
    hk = fs.lkind(hooks)
    if hk not in (None, "d"):
        return "hooks is not a folder"
    if hk == "d":
        for path, kind in fs.walk(hooks):
            if kind != "f" or not path.endswith(".sample") or posixpath.dirname(path) != hooks:
                return f"it has the hook {path}"
    config = posixpath.join(gitdir, "config")
    ck = fs.lkind(config)
    if ck not in (None, "f"):
        return "config is not a file"
    if ck == "f":
        data = fs.read(config, READ_LIMIT)
        if data is None:
            return "config cannot be read"
        for key, _ in parse_config(data):
            if key in SAFE_NEW_KEYS:
                continue
            if key.startswith(SAFE_NEW_SECTIONS) and not key.endswith(UNSAFE_REMOTE_KEYS):
                continue
            return f"its config sets {key}"
    modules = posixpath.join(gitdir, "modules")
    if fs.lkind(modules) == "d":
        for path, kind in fs.walk(modules):
            if kind == "d" and fs.lkind(posixpath.join(path, "HEAD")) == "f":
                why = check_new_git_dir(fs, path, depth + 1)
                if why:
                    return why
    if fs.lkind(posixpath.join(gitdir, "worktrees")) is not None:
        return "it has worktrees"
    return None
