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

Stdlib only, no I/O: importing this module must stay cheap (the hook and
``sandbox exec`` start with it).
"""

from __future__ import annotations

# (relative path, kind: "f" file or "d" directory, what executes or loads it).
# Names match at any depth below a writable root (a repository inside a home
# folder has its own .vscode); a name that does not exist yet at the top of a
# writable root is created as an empty read-only placeholder for the run.
ANY_DEPTH: tuple[tuple[str, str, str], ...] = (
    # shells
    (".bashrc", "f", "bash (interactive shells)"),
    (".bash_profile", "f", "bash (login shells)"),
    (".bash_login", "f", "bash (login shells)"),
    (".bash_logout", "f", "bash (login shells, at exit)"),
    (".bash_aliases", "f", "bash (sourced by the default .bashrc)"),
    (".profile", "f", "sh, dash, bash (login shells)"),
    (".zshrc", "f", "zsh"),
    (".zshenv", "f", "zsh (every zsh, scripts included)"),
    (".zprofile", "f", "zsh (login shells)"),
    (".zlogin", "f", "zsh (login shells)"),
    (".zlogout", "f", "zsh (login shells, at exit)"),
    (".kshrc", "f", "ksh, mksh"),
    (".mkshrc", "f", "mksh"),
    (".tcshrc", "f", "tcsh"),
    (".cshrc", "f", "csh, tcsh"),
    (".inputrc", "f", "readline (key bindings of every readline program)"),
    (".config/fish", "d", "fish"),
    # git (the repository metadata itself: see GIT_EXECUTABLE)
    (".gitconfig", "f", "git (user configuration: hooks, fsmonitor, aliases, pagers)"),
    (".config/git", "d", "git (XDG configuration and attributes)"),
    (".gitmodules", "f", "git (submodule URLs and paths)"),
    (".husky", "d", "git through core.hooksPath (husky)"),
    # editors
    (".vscode", "d", "VS Code (tasks, launch, settings, extensions)"),
    (".idea", "d", "JetBrains IDEs (run configurations, startup tasks)"),
    (".zed", "d", "Zed (tasks, settings)"),
    (".devcontainer", "d", "dev containers (initializeCommand runs on the host)"),
    (".devcontainer.json", "f", "dev containers (initializeCommand runs on the host)"),
    (".exrc", "f", "vi, vim, neovim with 'exrc'"),
    (".nvimrc", "f", "neovim with 'exrc'"),
    (".nvim.lua", "f", "neovim with 'exrc'"),
    (".vimrc", "f", "vim"),
    (".gvimrc", "f", "gvim"),
    (".dir-locals.el", "f", "Emacs (directory-local variables, eval forms)"),
    # agents and this project
    (".claude", "d", "Claude Code (settings, hooks, commands, agents)"),
    (".codex", "d", "Codex CLI (config, hooks)"),
    (".cursor", "d", "Cursor (hooks, MCP servers)"),
    (".gemini", "d", "Gemini CLI (settings, hooks)"),
    (".windsurf", "d", "Windsurf (MCP servers, workflows)"),
    (".agents", "d", "Codex and other agents (skills: instructions and their scripts)"),
    (".mcp.json", "f", "Claude Code and others (MCP servers, started as processes)"),
    (".sandbox", "d", "agent-sandbox (policy, queue, audit)"),
    # tools that run code from their configuration
    (".ripgreprc", "f", "ripgrep (--pre runs a program per file)"),
    (".envrc", "f", "direnv (sourced by the shell on cd)"),
    (".npmrc", "f", "npm (script-shell, node-options)"),
    (".yarnrc", "f", "yarn 1 (yarn-path runs a script)"),
    (".yarnrc.yml", "f", "yarn 2+ (yarnPath runs a script)"),
    (".pnpmfile.cjs", "f", "pnpm (runs it on every install)"),
    (".mise.toml", "f", "mise (hooks and env scripts)"),
)

# Below the home folder only (relative to it): per-user start-up and
# configuration that runs commands.
HOME_ONLY: tuple[tuple[str, str, str], ...] = (
    (".ssh", "d", "ssh (config: ProxyCommand, LocalCommand; rc; authorized_keys)"),
    (".claude.json", "f", "Claude Code (user MCP servers)"),
    (".srt-settings.json", "f", "srt and sandbox exec (the user's sandbox settings)"),
    (".config/agent-sandbox", "d", "agent-sandbox (user configuration)"),
    (".local/state/agent-sandbox", "d", "agent-sandbox (audit, queue, locks, keys)"),
    (".config/containers", "d", "podman (containers.conf: conmon, hooks, runtimes; "
                                "storage.conf)"),
    (".config/systemd", "d", "systemd --user (units started at login)"),
    (".config/autostart", "d", "desktop sessions (autostart entries)"),
    (".config/environment.d", "d", "systemd --user (session environment)"),
    (".config/nvim", "d", "neovim (init.lua)"),
    (".vim", "d", "vim (plugins, vimrc)"),
    (".emacs", "f", "Emacs (init file)"),
    (".emacs.d", "d", "Emacs (init files)"),
    (".config/Code/User", "d", "VS Code (user settings, tasks)"),
    (".xprofile", "f", "X sessions"),
    (".xinitrc", "f", "X sessions (startx)"),
    (".xsession", "f", "X sessions"),
    (".pam_environment", "f", "PAM (session environment)"),
    (".kube/config", "f", "kubectl (exec credential plugins)"),
    (".aws/config", "f", "AWS CLI and SDKs (credential_process)"),
    (".docker/config.json", "f", "docker (credential helpers)"),
    (".local/bin", "d", "every shell (first on PATH in most distributions)"),
    (".local/lib", "d", "Python (user site-packages: .pth files, usercustomize)"),
    ("bin", "d", "every shell (on PATH when it exists, in most distributions)"),
)

# Inside every git directory (a repository's .git, a submodule's
# .git/modules/NAME, a worktree's .git/worktrees/NAME): what changes the
# programs git runs, or which configuration it reads. Kept read-only; the
# object store, refs, index, HEAD and logs stay writable.
GIT_EXECUTABLE: tuple[tuple[str, str, str], ...] = (
    ("config", "f", "git (hooksPath, fsmonitor, aliases, pager, editor, drivers, includes)"),
    ("config.worktree", "f", "git (per-worktree configuration)"),
    ("hooks", "d", "git (hooks run by commit, checkout, merge, push...)"),
    ("commondir", "f", "git (where the configuration and hooks are read from)"),
)

# Python's start-up, in any virtual environment or site folder below a writable
# root (a repository's own .venv included): what an interpreter runs or reads
# each time it starts, before any script of the user's, and what editors start
# on their own when they open the folder. Patterns, not names: a ``*`` in the
# last component matches any text, a leading folder name must be the parent.
# Matched at any depth; those that exist are read-only for the run, new ones are
# quarantined after it (no placeholders: a site folder must stay creatable, and
# ``pip install`` of a plain package keeps writing its own folders there).
# The planner keeps read-only too the modules an existing ``.pth`` file names
# (setuptools' ``distutils-precedence.pth`` imports ``_distutils_hack`` at every
# start): a rule cannot name them, so they are the planner's alone.
PYTHON_STARTUP: tuple[tuple[str, str, str], ...] = (
    ("site-packages/*.pth", "f", "Python (site: a .pth file's import lines run at every start)"),
    ("dist-packages/*.pth", "f", "Python (site, Debian layout: .pth import lines at every start)"),
    ("sitecustomize.*", "f", "Python (site imports sitecustomize at every start: source, "
     "bytecode or an extension module)"),
    ("sitecustomize", "d", "Python (sitecustomize as a package)"),
    ("usercustomize.*", "f", "Python (site imports usercustomize at every start)"),
    ("usercustomize", "d", "Python (usercustomize as a package)"),
    ("pyvenv.cfg", "f", "Python (a virtual environment: home = picks the interpreter and "
     "standard library it runs)"),
    ("bin/python*", "f", "editors (VS Code's Python extension starts a folder's "
     ".venv/bin/python on opening it), and every use of the environment"),
    ("bin/activate*", "f", "shells (source .venv/bin/activate), direnv layouts"),
    ("bin/Activate*", "f", "PowerShell (Activate.ps1)"),
    ("Scripts/python*", "f", "editors and shells on Windows (a venv's Scripts folder)"),
    ("Scripts/activate*", "f", "cmd.exe and PowerShell on Windows (activate.bat)"),
    ("Scripts/Activate*", "f", "PowerShell on Windows (Activate.ps1)"),
    ("*.pyc", "f", "Python (bytecode: run instead of the source beside it in __pycache__, "
     "or without any source beside a script or in a package)"),
)

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
    "sequence.editor", "diff.external", "gpg.program", "credential.helper",
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
                                  "Activate")


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
    if name == "pyvenv.cfg":
        return "p"
    if name.startswith(("python", "activate", "Activate")):
        parent = path.rsplit("/", 2)[-2] if path.count("/") > 1 else ""
        return "p" if parent in ("bin", "Scripts") else None
    return None


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
