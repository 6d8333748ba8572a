"""The protected set: files that host tools execute or load later, in one place.

A sandboxed command is hostile, and so is every byte it can write. These are the
names that, written from inside a sandbox, would make a later host-side process
(a login shell, git, an editor, an agent, a package manager, Python) run the
command's code outside the sandbox. Each entry names the tool that executes it.

Every consumer reads this module: the bwrap planner (read-only mounts and
placeholders in every writable root), the post-run sweep (what a run may not
create), the policy engine (paths an agent's tool call may not write), the
macOS and Windows renderers, and the srt settings' ``mandatoryDenyWrite``.
It includes srt's own mandatory list (``DANGEROUS_FILES``,
``DANGEROUS_DIRECTORIES``) and what Codex keeps read-only (``.git``, ``.codex``).

Git metadata is special: a repository's object store, refs, index and HEAD must
stay writable so that ``git add``/``commit``/``checkout`` work inside, while
everything that changes what git executes (``GIT_EXECUTABLE``) is protected in
every repository, submodule and worktree below a writable root.

Python is special too (``PYTHON_STARTUP``): what an interpreter runs at every
start, in any virtual environment or site folder below a writable root, and
every bytecode file, are patterns rather than names. A virtualenv the user
made is inside the boundary for its start-up (``pyvenv.cfg``, the interpreter
links in ``bin/``, the activate scripts, ``.pth`` files,
``sitecustomize``/``usercustomize``, and the modules an existing ``.pth``
imports) and outside it for its packages: ``pip install`` inside a sandbox
keeps working for plain packages, a new ``.pth`` is refused, and a package's
code (like the repository's own) is the command's to change. One a sandboxed
run made is the command's, whole (the bubblewrap broker decides by who made the
folder: ``runtime.broker.judge``).

Stdlib only, and one read of its small catalogue (through ``quickjson``):
importing this module must stay cheap (the hook and ``sandbox exec`` start with it).
"""

from __future__ import annotations

# The data is the catalogue of implicit triggers (``triggers.json``, package data):
# each entry a tool, the files it runs or loads on its own, what the user does
# that fires it, its documentation and its proof. Its files, by where they lie:
#
# - ANY_DEPTH: names at any depth below a writable root (a repository inside a
#   home folder has its own .vscode);
# - HOME_ONLY: below the home folder only (relative to it);
# - GIT_EXECUTABLE: inside every git directory (a repository's .git, a
#   submodule's .git/modules/NAME, a worktree's .git/worktrees/NAME): what
#   changes the programs git runs, or which configuration it reads; the object
#   store, refs, index, HEAD and logs stay writable;
# - PYTHON_STARTUP: Python's start-up, in any virtual environment or site
#   folder below a writable root: patterns, not names (a ``*`` in the last
#   component matches any text, a leading folder name must be the parent);
# - CWD_MODULES: modules Python imports from the working folder before the
#   standard library's (the interactive interpreter's readline, ``-m venv``):
#   ``NAME.*`` and ``NAME/__init__.*`` in any folder are start-up files;
# - ENV_FILES: environment variables naming a file a shell reads ($ENV);
# - RELATIVE_PATH / GIT_USER_KEYS: resolved when a run starts (a relative
#   entry of $PATH, a relative ``core.hooksPath`` of the user's git).
#
# Each tuple: (relative path, kind "f" file or "d" directory, what runs it).


def _catalogue() -> dict[str, list[tuple[str, str, str]]]:
    import os

    from .quickjson import loads

    with open(os.path.join(os.path.dirname(__file__), "triggers.json"), "rb") as fh:
        doc = loads(fh.read())
    out: dict[str, list[tuple[str, str, str]]] = {}
    for entry in doc["entries"]:
        what = f"{entry['tool']} ({entry['fires_on']})" if entry["fires_on"] else entry["tool"]
        for path, kind, where in entry["files"]:
            out.setdefault(where, []).append((path, kind, what))
    return out


_BY_WHERE = _catalogue()
ANY_DEPTH: tuple[tuple[str, str, str], ...] = tuple(_BY_WHERE.get("any", ()))
HOME_ONLY: tuple[tuple[str, str, str], ...] = tuple(_BY_WHERE.get("home", ()))
GIT_EXECUTABLE: tuple[tuple[str, str, str], ...] = tuple(_BY_WHERE.get("git-dir", ()))
PYTHON_STARTUP: tuple[tuple[str, str, str], ...] = tuple(_BY_WHERE.get("python", ()))
CWD_MODULES: frozenset[str] = frozenset(p for p, _, _ in _BY_WHERE.get("cwd-module", ()))
ENV_FILES: tuple[str, ...] = tuple(p for p, _, _ in _BY_WHERE.get("env", ()))
RELATIVE_PATH: bool = bool(_BY_WHERE.get("env-path"))
GIT_USER_KEYS: tuple[str, ...] = tuple(p.lower() for p, _, _ in _BY_WHERE.get("git-user-key", ()))

# Names that only matter as symlinks: a link named site-packages makes the
# folder it points to a site folder (its .pth files run) though no folder of
# that name holds them. Judged by the sweep (new or changed: quarantined); a
# real folder of that name stays writable.
PYTHON_SITE_DIRS: tuple[str, ...] = ("site-packages", "dist-packages")

# Configuration keys of a repository whose values name programs or files git
# runs or reads; a value that is a path below a writable root is protected too.
GIT_PATH_KEYS: tuple[str, ...] = (
    "core.hookspath", "core.fsmonitor", "core.sshcommand", "core.editor", "core.pager",
    "core.askpass", "core.attributesfile", "core.excludesfile", "include.path",
    "init.templatedir",  # git init and clone copy its hooks into the new repository
    "sequence.editor", "diff.external", "gpg.program", "credential.helper",
    # drivers and commands named per subsection (``filter.<name>.clean``) or per
    # command (``pager.log``, ``alias.x = !cmd``): ``gitmeta._config_key``
    "filter.clean", "filter.smudge", "filter.process", "diff.textconv", "diff.command",
    "merge.driver", "difftool.cmd", "mergetool.cmd", "pager", "alias",
    "difftool.path", "mergetool.path", "gpg.defaultkeycommand", "interactive.difffilter",
    "core.gitproxy", "remote.uploadpack", "remote.receivepack", "man.path", "man.cmd",
    "browser.path", "browser.cmd",
)

# Entries that belong to the repository whose work tree holds them: git reads
# them there alone (``.gitmodules``: its submodules' URLs and paths), so in a
# repository a sandboxed run made (its ``.git`` is the run's) they are the run's,
# like the rest of that repository (``runtime.broker.files``).
REPOSITORY_OWN = frozenset({".gitmodules"})

# Directory names never entered when searching for other protected names: the
# git directory is handled through GIT_EXECUTABLE.
GIT_DIR = ".git"


def names() -> frozenset[str]:
    """Last components of every any-depth entry, plus ``.git`` (the walk's targets)."""
    return frozenset({p.rsplit("/", 1)[-1] for p, _, _ in ANY_DEPTH} | {GIT_DIR})


def any_depth_rules() -> tuple[str, ...]:
    """The any-depth entries as ``**/`` path rules (srt's glob form)."""
    out: list[str] = []
    for path, kind, _ in ANY_DEPTH:
        out.append(f"**/{path}/**" if kind == "d" else f"**/{path}")
        if kind == "d":
            out.append(f"**/{path}")
    for sub, kind, _ in GIT_EXECUTABLE:
        out.append(f"**/{GIT_DIR}/{sub}/**" if kind == "d" else f"**/{GIT_DIR}/{sub}")
    out.append(f"**/{GIT_DIR}/modules/**/config")
    out.append(f"**/{GIT_DIR}/modules/**/hooks/**")
    out.append(f"**/{GIT_DIR}/worktrees/*/config.worktree")
    out.append(f"**/{GIT_DIR}/worktrees/*/commondir")
    out += python_rules()
    return tuple(dict.fromkeys(out))


def python_rules() -> tuple[str, ...]:
    """The Python start-up entries as ``**/`` path rules (srt's glob form)."""
    out: list[str] = []
    for path, kind, _ in PYTHON_STARTUP:
        out.append(f"**/{path}")
        if kind == "d":
            out.append(f"**/{path}/**")
    return tuple(out)


# What every name python_kind answers for ends or starts with (a quick test first).
PYTHON_ENDS: tuple[str, ...] = (".pyc", ".pth", "-packages", ".cfg")
PYTHON_STARTS: tuple[str, ...] = ("sitecustomize", "usercustomize", "python", "activate",
                                  "Activate", "__init__.", *CWD_MODULES)


def python_kind(path: str, kind: str) -> str | None:
    """How one walked entry (``kind``: 'f', 'd', 'l' or 's') belongs to the Python
    start-up entries: 'c' bytecode in ``__pycache__`` (a cache), 'b' other
    bytecode, 'p' another start-up file, 'k' a site folder's name as a link,
    None when it is none of them. Plain string tests: the planner asks it of
    every entry of every walk."""
    name = path.rsplit("/", 1)[-1]
    if name.endswith(".pyc"):
        if kind == "d":
            return None
        return "c" if "/__pycache__/" in path else "b"
    if name in PYTHON_SITE_DIRS:
        return "k" if kind == "l" else None
    if name.endswith(".pth"):
        parent = path.rsplit("/", 2)[-2] if path.count("/") > 1 else ""
        return "p" if parent in PYTHON_SITE_DIRS else None
    if name.startswith(("sitecustomize", "usercustomize")):
        stem = name[13:]
        return "p" if stem == "" or stem.startswith(".") else None
    if name == "pyvenv.cfg" or cwd_module(path) is not None:
        return "p"
    if name.startswith(("python", "activate", "Activate")):
        parent = path.rsplit("/", 2)[-2] if path.count("/") > 1 else ""
        return "p" if parent in ("bin", "Scripts") else None
    return None


def cwd_module(path: str) -> str | None:
    """For a module Python imports from the working folder (``CWD_MODULES``): 'f'
    for ``NAME.py``, ``.pyc``, an extension module, decided by its folder; 'm'
    for ``NAME/__init__.*``, decided by the folder above the package; else None.
    A folder of that name alone imports nothing (``python -m venv venv``)."""
    return {"module": "f", "package": "m"}.get(imported_as(path, CWD_MODULES) or "")


def imported_as(path: str, names: frozenset[str]) -> str | None:
    """'module' for ``NAME.py`` (bytecode, an extension module) and 'package' for
    ``NAME/__init__.*``, NAME in ``names``: what the import system loads (``pip.conf``
    is none of it); else None."""
    head, _, name = path.rpartition("/")
    stem, _, rest = name.partition(".")
    if not (rest in ("py", "pyc", "pyw") or name.endswith((".so", ".pyd"))):
        return None
    if stem in names or (names is _SHADOWABLE_SET and stem.startswith("_sysconfigdata_")):
        return "module"
    if stem == "__init__" and head.rpartition("/")[2] in names:
        return "package"
    return None


# Protected names a sandboxed command may not remove either, though removing a
# protected name plants nothing: their settings switch something off (npm's, yarn's
# and bun's install scripts, ``ignore-scripts``), which their absence switches on
REMOVAL_GUARDED = frozenset({".npmrc", ".yarnrc", ".yarnrc.yml", "bunfig.toml", ".bunfig.toml",
                             ".pnpmrc"})


# A folder that is the top of a project: where a user runs ``python3 -m venv``,
# ``-m pip``, ``-m pytest`` or the REPL, which import the standard library's
# modules from the working folder first (``stdlib_shadow``)
PROJECT_MARKERS: tuple[str, ...] = (".git", "pyproject.toml", "setup.py", "setup.cfg",
                                    "requirements.txt")


def stdlib_shadow(path: str) -> str | None:
    """For a module named like one of the standard library's: 't' for ``NAME.py``
    (or bytecode, an extension), 'u' for ``NAME/__init__.*``; else None. Python
    start-up only in a folder that is no package (no ``__init__.py``), where Python
    run in it imports the module first, which the broker decides when the call is
    made: inside a package, its own ``types.py`` is its code."""
    _shadowable()
    return {"module": "t", "package": "u"}.get(imported_as(path, _SHADOWABLE_SET) or "")


_SHADOWABLE: list[frozenset[str]] = []
_SHADOWABLE_SET: frozenset[str] = frozenset()  # ``_shadowable()``, once made
# standard-library names no tool imports on its own and projects do use: a file of
# the project's (``test.py``), never start-up
_PROJECT_NAMES = frozenset({"test", "this", "antigravity", "idlelib", "turtledemo"})
# modules later Pythons added that the interpreter imports on its own (3.13's REPL:
# ``_pyrepl``, ``_colorize``): a host's python3 may be newer than the runtime's
_NEWER = frozenset({"_pyrepl", "_colorize", "_opcode_metadata", "_interpqueues",
                    "_interpreters", "_interpchannels", "_suggestions", "_sysconfig",
                    "_apple_support", "annotationlib", "compression", "string"})
# modules the standard library imports from outside it, found in the working folder
# first: copy and pickle try Jython's ``org``; the distutils shim setuptools installs
# imports ``setuptools`` when ``distutils`` is; sysconfig imports a name computed at
# run time, ``_sysconfigdata_*`` (``python3 -m venv``)
_OUTSIDE = frozenset({"org", "setuptools", "pkg_resources", "_distutils_system_mod",
                      "_distutils_hack"})


def _shadowable() -> frozenset[str]:
    """The standard library's modules a file in the working folder can stand for:
    not the built-in and frozen ones (found before any folder is searched)."""
    if not _SHADOWABLE:
        import _imp
        import sys

        global _SHADOWABLE_SET
        _SHADOWABLE_SET = frozenset(
            m for m in sys.stdlib_module_names | _NEWER | _OUTSIDE
            if m not in sys.builtin_module_names and not _imp.is_frozen(m)
            and m not in _PROJECT_NAMES)
        _SHADOWABLE.append(_SHADOWABLE_SET)
    return _SHADOWABLE[0]


def pth_imports(data: bytes | None) -> set[str]:
    """The words of a ``.pth`` file's text when it has an import line (site runs
    those), each a module name it may import; none for path lines only."""
    if not data or not any(line.startswith((b"import ", b"import\t"))
                           for line in data.splitlines()):
        return set()
    words: set[str] = set()
    word: list[str] = []
    for ch in data.decode("latin-1"):
        if ch.isalnum() or ch == "_":
            word.append(ch)
        elif word:
            words.add("".join(word))
            word = []
    if word:
        words.add("".join(word))
    return words


def home_rules(home: str) -> tuple[str, ...]:
    """The home-only entries as absolute path rules."""
    home = home.rstrip("/") or "/"
    out: list[str] = []
    for path, kind, _ in HOME_ONLY:
        full = f"{home}/{path}" if home != "/" else f"/{path}"
        out.append(full)
        if kind == "d":
            out.append(f"{full}/**")
    return tuple(out)
