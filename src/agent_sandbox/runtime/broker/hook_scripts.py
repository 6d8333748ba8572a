"""What a repository's hooks run from its work tree, read from their text.

A hook is protected; what it runs must be too. git runs a hook at the top of the
work tree, and the hooks tools install name what they run there:

- lefthook's (``npm i -D lefthook``) runs
  ``"$dir/node_modules/lefthook-${osArch}-${cpuArch}/bin/lefthook"``, and the
  absolute path of the binary that installed it;
- pre-commit's runs ``$INSTALL_PYTHON -mpre_commit``: Python with the working
  folder first on its module path, so a ``cfgv.py`` at the top of the work tree
  is imported in place of the installed one.

``HookScripts.reads`` gives, per hooks folder (read again when the folder or one
of its hooks changes): the paths its hooks name, relative to the work tree or
absolute (a variable at a word's start, ``$dir/``, ``$(git rev-parse
--show-toplevel)/``, stands for the work tree's top; one inside a word for any
part: ``*``), and the top-level module names installed for the interpreters that
run Python there with the working folder first (``python -m``, ``-c``), which a
module at the work tree's top would stand for. It protects more than a hook
runs, never less.
"""

from __future__ import annotations

import os
import posixpath

from .configs import names as relative_names

TYPE_CHECKING = False
if TYPE_CHECKING:
    import re

READ_LIMIT = 1 << 16
_VAR = "__VAR__"
_RE: list[re.Pattern[str]] = []  # compiled on first use: the launcher's start stays light


def _patterns() -> tuple[re.Pattern[str], ...]:
    import re

    if not _RE:
        _RE.extend((
            # a variable (or the top's command substitution) opening a path: the top
            re.compile(r"(?<![^\s\"'=(:;])(?:\$\{[^}\s]*\}|\$\w+|\$\((?:git rev-parse "
                       r"--show-toplevel|pwd)\))/"),
            re.compile(r"\$\{[^}\s]*\}|\$\w+"),  # one inside a word: any part
            re.compile(r"(?<![^\s\"'=:;(])(/(?:[\w.@+-]+/)+[\w.@+-]+)"),  # an absolute path
            re.compile(r"(?:^|[\s\"'])-(?:m\s*[A-Za-z_]|c\b)"),  # Python's -m or -c
            re.compile(r"(?<![\w.-])(/[^\s\"'=;]*python[\d.]*)(?![\w/])"),  # its path
            re.compile(r"(?<![\w./-])python[\d.]*(?![\w/.-])"),  # python on PATH
            re.compile(r"(?<![\w$])PATH=([\"']?)([^\"'\s;]*)\1"),  # PATH=...
            re.compile(r"[A-Za-z_][\w.+-]*"),  # a word: perhaps a program it runs
            # a package runner's program: ``npx lefthook``, ``yarn lint-staged``
            re.compile(r"(?<![\w/.-])(?:(?:npm|pnpm|yarn) exec|bun x|npx|bunx|pnpx|yarn|pnpm)"
                       r"\s+(?:-[\w-]+(?:=\S+)?\s+)*([@A-Za-z][\w@./+-]*)"),
        ))
    return tuple(_RE)


class Read:
    """What hooks' texts say: ``paths`` they name (relative ones to the work tree,
    ``*`` for a variable's part), ``pythons``, the interpreters that run Python
    with the working folder first ("python3": one found on PATH), ``path_dirs``,
    the relative folders a ``PATH=`` puts on PATH (``node_modules/.bin``: husky),
    and ``words``, what may be a program they run by name."""

    __slots__ = ("path_dirs", "paths", "pythons", "words")

    def __init__(self, paths: list[str], pythons: list[str], path_dirs: list[str],
                 words: set[str]) -> None:
        self.paths, self.pythons, self.path_dirs, self.words = paths, pythons, path_dirs, words


def hook_reads(text: str) -> Read:
    """What one hook's text says (pure)."""
    top, inner, absolute, minus_m, interp, bare, assign, word, runner = _patterns()
    # what a package runner starts: node_modules/.bin/NAME of the work tree
    runs = [f"node_modules/.bin/{m.rsplit('/', 1)[-1]}" for m in runner.findall(text)]
    path_dirs = [e for m in assign.findall(text) for e in m[1].split(":")
                 if e and not e.startswith(("/", "$", "~"))]
    words = set(word.findall(text))
    text = assign.sub("", text)  # a PATH entry names no program (its programs: path_dirs)
    text = top.sub("", text)
    text = inner.sub(_VAR, text)
    paths = runs + [p.replace(_VAR, "*") for p in relative_names(text)]
    paths += [m.replace(_VAR, "*") for m in absolute.findall(text)]
    pythons: list[str] = []
    if minus_m.search(text):
        pythons = [p for p in interp.findall(text) if _VAR not in p]
        if not pythons and bare.search(text):
            pythons = ["python3"]
    # a pattern whose first part is any (``$x/$y``) would name everything: left out
    paths = [p for p in paths if not p.lstrip("/").startswith("*")]
    return Read(sorted(set(paths)), pythons, [posixpath.normpath(d) for d in path_dirs], words)


def matches(path: str, pattern: str, above: bool = False) -> bool:
    """``path`` is what ``pattern`` names or below it (``*``: one part); ``above``:
    or a folder above it."""
    want, have = pattern.split("/"), path.split("/")
    n = min(len(want), len(have))
    if len(have) < len(want) and not above:
        return False
    return all(_part(have[i], want[i]) for i in range(n))


def _part(name: str, pattern: str) -> bool:
    """``name`` matches ``pattern``, whose ``*`` stands for any characters."""
    if "*" not in pattern:
        return name == pattern
    pieces = pattern.split("*")
    if not (name.startswith(pieces[0]) and name.endswith(pieces[-1])) or \
            len(name) < len(pieces[0]) + len(pieces[-1]):
        return False
    at, end = len(pieces[0]), len(name) - len(pieces[-1])
    for piece in pieces[1:-1]:
        found = name.find(piece, at, end)
        if found < 0:
            return False
        at = found + len(piece)
    return True


def identity(path: str) -> tuple[int, ...] | None:
    """What says a file or folder changed (device, inode, times, size), None when
    it is not there: a cache keyed by it misses the next change."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size)


def _site_folders(interp: str, home: str) -> list[str]:
    """The folders ``interp`` imports installed packages from, found without
    running it: its virtualenv's (and the system's, when the virtualenv includes
    them), or its prefix's, ``/usr``'s, ``/usr/local``'s and the user's."""
    import glob

    if "/" not in interp:
        interp = f"/usr/bin/{interp}"
    prefixes = {posixpath.dirname(posixpath.dirname(interp)),
                posixpath.dirname(posixpath.dirname(os.path.realpath(interp)))}
    cfg = next((f"{p}/pyvenv.cfg" for p in prefixes if os.path.exists(f"{p}/pyvenv.cfg")), None)
    if cfg is None or _system_too(cfg):
        prefixes |= {"/usr", "/usr/local"}
        if cfg is None:
            prefixes.add(f"{home}/.local")
    out: list[str] = []
    for p in sorted(prefixes):
        for pattern in ("lib*/python3*/site-packages", "lib*/python3*/dist-packages",
                        "lib/python3/dist-packages"):
            out += glob.glob(f"{p}/{pattern}")
    return out


def _system_too(cfg: str) -> bool:
    try:
        with open(cfg, encoding="utf-8", errors="replace") as f:
            return any(line.replace(" ", "").lower() == "include-system-site-packages=true"
                       for line in f.read(1 << 14).splitlines())
    except OSError:
        return False


def _top_names(site: str) -> set[str]:
    """The top-level names a site folder provides (modules, packages, extensions)."""
    out: set[str] = set()
    try:
        entries = os.listdir(site)
    except OSError:
        return out
    for n in entries:
        if n.endswith((".dist-info", ".egg-info", ".pth", ".egg-link")) or n == "__pycache__":
            continue
        stem = n.split(".", 1)[0]
        if stem and (n == stem or n.endswith((".py", ".so", ".pyc"))):
            out.add(stem)
    return out


class Hooks:
    """What the hooks of one hooks folder run: ``paths`` (absolute, ``*`` for any
    part), ``modules`` a module at the work tree's top stands for, ``path_dirs``
    (absolute) and ``programs``, the names of the host's programs they run, which a
    file of that name in one of ``path_dirs`` would stand for."""

    __slots__ = ("modules", "path_dirs", "paths", "programs")

    def __init__(self, paths: list[str], modules: frozenset[str], path_dirs: list[str],
                 programs: frozenset[str]) -> None:
        self.paths, self.modules, self.path_dirs, self.programs = (
            paths, modules, path_dirs, programs)


_NONE = Hooks([], frozenset(), [], frozenset())
# programs the programs a hook names start by name in their turn (npx's and
# lint-staged's ``#!/usr/bin/env node``, lint-staged's ``git``): kept on a PATH
# folder a hook adds, named in its text or not
_STARTED = frozenset({"node", "nodejs", "sh", "bash", "dash", "env", "git", "python", "python3",
                      "npm", "npx", "yarn", "pnpm", "corepack", "bun", "deno"})
_MAX_FILES = 64


class HookScripts:
    """The hooks folders of the repositories around written paths, each read once
    per identity of the folder and its hooks."""

    def __init__(self, home: str) -> None:
        self.home = home
        # (hooks, work tree): the folders' identities, the hooks, theirs, what they run
        self._read: dict[tuple[str, str], tuple[object, list[str], tuple[object, ...], Hooks]] = {}
        self._sites: dict[str, list[str]] = {}
        self._names: dict[str, tuple[object, frozenset[str]]] = {}
        self._programs: frozenset[str] | None = None

    def reads(self, hooks: str, worktree: str) -> Hooks:
        """What the hooks in ``hooks`` run in ``worktree``. A hooks folder inside
        the work tree (``core.hooksPath``) is read with the folder that holds it:
        husky's ``.husky/_/h`` runs ``.husky/pre-commit``."""
        up = posixpath.dirname(hooks)
        with_up = up != worktree and up.startswith(worktree.rstrip("/") + "/")
        folders = (identity(hooks), identity(up) if with_up else None)
        if folders[0] is None:
            return _NONE
        cached = self._read.get((hooks, worktree))
        if cached is not None and cached[0] == folders:  # the same hooks: are they changed?
            files, idents, found = cached[1:]
            if tuple(identity(f) for f in files) == idents:
                return found
        files = _files(hooks) + (_files(up) if with_up else [])
        idents = tuple(identity(f) for f in files)
        paths: set[str] = set()
        pythons: set[str] = set()
        dirs: set[str] = set()
        words: set[str] = set()
        for f in files:
            text = _text(f)
            if text:
                got = hook_reads(text)
                paths.update(p if p.startswith("/") else posixpath.join(worktree, p)
                             for p in got.paths)
                pythons.update(got.pythons)
                dirs.update(posixpath.join(worktree, d) for d in got.path_dirs)
                words |= got.words
        modules: set[str] = set()
        for interp in sorted(pythons):
            modules |= self._installed(interp)
        found = Hooks(sorted(posixpath.normpath(p) for p in paths), frozenset(modules),
                      sorted(posixpath.normpath(d) for d in dirs),
                      frozenset((words | _STARTED) & self.programs()) if dirs else frozenset())
        self._read[(hooks, worktree)] = (folders, files, idents, found)
        return found

    def programs(self) -> frozenset[str]:
        """The names of the programs on the caller's PATH."""
        if self._programs is None:
            from ..bwrap.path_entries import tool_dirs

            names: set[str] = set()
            for d in tool_dirs():
                try:
                    names.update(os.listdir(d))
                except OSError:
                    continue
            self._programs = frozenset(names)
        return self._programs

    def _installed(self, interp: str) -> frozenset[str]:
        sites = self._sites.get(interp)
        if sites is None:
            sites = self._sites[interp] = _site_folders(interp, self.home)
        names: set[str] = set()
        for site in sites:
            ident = identity(site)
            cached = self._names.get(site)
            if cached is None or cached[0] != ident:
                cached = self._names[site] = (ident, frozenset(_top_names(site)))
            names |= cached[1]
        return frozenset(names)


def _files(folder: str) -> list[str]:
    """The hooks in ``folder`` (not git's samples), at most ``_MAX_FILES``."""
    try:
        with os.scandir(folder) as entries:
            names = sorted(e.name for e in entries if not e.name.endswith(".sample")
                           and e.is_file(follow_symlinks=False))
    except OSError:
        return []
    return [posixpath.join(folder, n) for n in names[:_MAX_FILES]]


def _text(path: str) -> str | None:
    """A hook's text (its first 64 KiB, not through a link), None for a binary."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        import stat

        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = os.read(fd, READ_LIMIT)
    except OSError:
        return None
    finally:
        os.close(fd)
    return None if b"\0" in data else data.decode("utf-8", "replace")
