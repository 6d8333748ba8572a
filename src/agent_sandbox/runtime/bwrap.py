"""The bubblewrap argv builder: settings in, argv out, nothing executed.

``plan(settings, ...)`` turns srt-format settings into an ordered list of mount
operations and ``build_argv`` turns that into a ``bwrap`` command line. Both are
pure given a ``FsView`` (what exists on disk); the runtime passes a view of the
real filesystem, tests pass a dictionary.

The layout:

- the host root read-only (``--ro-bind / /``), a fresh ``/dev`` and ``/proc``;
- denied reads hidden (an empty read-only tmpfs over a directory, ``/dev/null``
  over a file), allowed reads inside them bound back;
- each ``allowWrite`` root bound read-write, ``denyWrite`` and the mandatory
  protected set bound read-only inside them. Protected names that do not exist
  yet at the top of a writable root (``.git``, ``.claude``, ``.bashrc``...) get an
  empty placeholder on the host so a read-only mount can sit on it: the command
  cannot create them (``git init`` then ``.git/hooks/...`` fails);
- every namespace unshared (user, pid, net, ipc, uts, cgroup), user namespaces
  disabled inside, all capabilities dropped, a new session (no TIOCSTI), and
  ``--die-with-parent``.

Operations are applied shallow to deep, so the most specific rule for a path
wins, and on the same path in the order hide < allow-read < write < deny-write:
deny beats allow. Every path is resolved (symlinks followed) before it is
mounted, so a symlink cannot redirect a rule.

It must never produce an argv that is looser than the settings: unknown or
unresolvable paths are skipped only when there is nothing on disk to protect.
"""

from __future__ import annotations

import os
import posixpath
import stat

from agent_sandbox.spec.paths import MANDATORY_DENY_WRITE, expand, is_glob
from agent_sandbox.spec.paths import covers as _glob_covers

from .settings import Settings, SettingsError, _Record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence
    from typing import Protocol

    class FsView(Protocol):
        """What the builder needs to know about the filesystem (read-only questions)."""

        def kind(self, path: str) -> str | None:
            """'d', 'f' (anything not a directory) or None when absent (symlinks followed)."""

        def realpath(self, path: str) -> str: ...

        def glob(self, pattern: str, roots: Sequence[str], depth: int) -> list[str]:
            """Existing paths matching an absolute or ``**/``-anchored glob."""

        def find(self, root: str, names: frozenset[str], depth: int) -> list[str]:
            """Existing paths below ``root`` whose last component is in ``names``."""

# Protected names that a placeholder is made for at the top of each writable root
# when they do not exist yet (kind: "f" file, "d" directory).
PLACEHOLDERS: tuple[tuple[str, str], ...] = (
    (".bashrc", "f"), (".bash_profile", "f"), (".bash_login", "f"), (".profile", "f"),
    (".zshrc", "f"), (".zshenv", "f"), (".zprofile", "f"), (".zlogin", "f"),
    (".gitconfig", "f"), (".gitmodules", "f"), (".mcp.json", "f"),
    (".git", "d"), (".claude", "d"), (".codex", "d"), (".cursor", "d"), (".gemini", "d"),
    (".vscode", "d"), (".idea", "d"), (".sandbox", "d"),
)
# Names searched for (existing) below each writable root, to a bounded depth.
PROTECTED_NAMES = frozenset(n for n, _ in PLACEHOLDERS) | {"fish", "git"}
SEARCH_DEPTH = 5
WALK_BUDGET = 20_000
# Large trees that hold no agent or shell configuration worth the walk.
SKIP_DIRS = frozenset({"node_modules", ".git", ".venv", "venv", "__pycache__", ".tox",
                       ".mypy_cache", ".ruff_cache", ".pytest_cache"})

PROXY_HTTP_PORT = 3128
PROXY_SOCKS_PORT = 1080

_ORDER = {"hide": 0, "show": 1, "rw": 2, "ro": 3, "sock": 4}


class Mount(_Record):
    """One mount operation: op is hide | show | rw | ro | sock; kind is d | f."""

    __slots__ = ("kind", "op", "path")
    op: str
    path: str
    kind: str

    def __init__(self, op: str, path: str, kind: str) -> None:
        super().__init__(op=op, path=path, kind=kind)

    def key(self) -> tuple[int, int, str]:
        return (self.path.count("/") if self.path != "/" else 0, _ORDER[self.op], self.path)


class Plan(_Record):
    """The mounts, the placeholders to create on the host first, the writable roots,
    the environment variables unset inside (the settings' credentials)."""

    __slots__ = ("hide_unix_dirs", "mounts", "placeholders", "unset_env", "writable_roots")
    mounts: tuple[Mount, ...]
    placeholders: tuple[tuple[str, str], ...]
    writable_roots: tuple[str, ...]
    hide_unix_dirs: bool
    unset_env: tuple[str, ...]
    _hide_unix_dirs = False
    _unset_env: tuple[str, ...] = ()


def _any_depth_literal(rule: str) -> tuple[tuple[str, ...], bool] | None:
    """``**/a/b`` or ``**/a/b/**`` as (components, with_subtree); None for other globs."""
    if not rule.startswith("**/"):
        return None
    body, subtree = rule[3:], False
    if body.endswith("/**"):
        body, subtree = body[:-3], True
    if not body or is_glob(body):
        return None
    return tuple(body.split("/")), subtree


def covers(rule: str, path: str) -> bool:
    """``spec.paths.covers``, answering the common ``**/name`` forms without ``re``."""
    lit = _any_depth_literal(rule)
    if lit is None:
        return _glob_covers(rule, path)
    names, subtree = lit
    parts = path.split("/")
    n = len(names)
    for i in range(1, len(parts) - n + 1):
        if tuple(parts[i:i + n]) == names:
            rest = len(parts) - (i + n)
            if rest > 0 or not subtree:
                return True
    return False


def _matcher(rule: str) -> Callable[[str], bool]:
    """``covers(rule, path)`` as a function prepared once for many paths."""
    lit = _any_depth_literal(rule)
    if lit is not None and len(lit[0]) == 1 and not lit[1]:
        name = "/" + lit[0][0]
        return lambda path: path.endswith(name)
    if lit is not None:
        return lambda path: covers(rule, path)
    from agent_sandbox.spec.paths import glob_regex

    rx = glob_regex(rule)
    return lambda path: rx.match(path) is not None


class RealFs:
    """``FsView`` over the real filesystem (bounded walks, no writes).

    Each walk stops after ``budget`` entries (a ``**/.env`` rule run from ``/``
    would otherwise read the whole disk at every start); ``notes`` says where a
    walk stopped, so the caller can tell the user that deeper matches are not
    covered.
    """

    def __init__(self, budget: int = WALK_BUDGET, skip: Sequence[str] = ()) -> None:
        self.budget = budget
        self.skip = frozenset(skip)  # folders never walked into (the runtime's own)
        self.notes: list[str] = []
        self._walked: dict[tuple[str, int], list[str]] = {}

    def kind(self, path: str) -> str | None:
        try:
            st = os.stat(path)
        except (OSError, ValueError):
            return None
        return "d" if stat.S_ISDIR(st.st_mode) else "f"

    def realpath(self, path: str) -> str:
        return os.path.realpath(path)

    def _walk(self, root: str, depth: int) -> list[str]:
        """Paths below root to a depth (walked once per root and depth)."""
        key = (root, depth)
        if key not in self._walked:
            self._walked[key] = list(self._walk_uncached(root, depth))
        return self._walked[key]

    def _walk_uncached(self, root: str, depth: int) -> Iterable[str]:
        stack = [(root, 0)]
        seen = 0
        while stack:
            d, level = stack.pop()
            try:
                with os.scandir(d) as it:
                    entries = list(it)
            except OSError:
                continue
            for e in entries:
                seen += 1
                if seen > self.budget:
                    note = (f"sandbox: stopped searching {root} for protected and denied "
                            f"names after {self.budget} entries; run from a smaller "
                            "directory for full coverage\n")
                    if note not in self.notes:
                        self.notes.append(note)
                    return
                yield e.path
                if level + 1 < depth and e.name not in SKIP_DIRS and e.path not in self.skip:
                    try:
                        if e.is_dir(follow_symlinks=False):
                            stack.append((e.path, level + 1))
                    except OSError:
                        pass

    def glob(self, pattern: str, roots: Sequence[str], depth: int) -> list[str]:
        out: list[str] = []
        if pattern.startswith("/"):
            # walk from the longest literal prefix
            parts = pattern.split("/")
            lit: list[str] = []
            for p in parts[1:]:
                if is_glob(p):
                    break
                lit.append(p)
            base = "/" + "/".join(lit)
            search = [base] if self.kind(base) == "d" else []
        else:
            search = list(roots)
        match = _matcher(pattern)
        for r in search:
            for p in self._walk(r, depth):
                if match(p) and not any(match(q) for q in _parents(p, r)):
                    out.append(p)
        return out

    def find(self, root: str, names: frozenset[str], depth: int) -> list[str]:
        return [p for p in self._walk(root, depth) if posixpath.basename(p) in names]


def _parents(path: str, stop: str) -> list[str]:
    out = []
    p = posixpath.dirname(path)
    while p.startswith(stop) and p != stop and p != "/":
        out.append(p)
        p = posixpath.dirname(p)
    return out


def _concrete(rules: Iterable[str], home: str, cwd: str, fs: FsView,
              roots: Sequence[str], depth: int = SEARCH_DEPTH) -> list[str]:
    """Expanded, existing, resolved paths for a list of rules (globs expanded)."""
    out: list[str] = []
    for rule in rules:
        path = expand(rule, home=home, cwd=cwd)
        cands = fs.glob(path, roots, depth) if is_glob(path) else [path]
        for c in cands:
            if fs.kind(c) is None:
                continue
            out.append(c)
            real = fs.realpath(c)
            if real != c:
                out.append(real)
    return list(dict.fromkeys(out))


def _under(path: str, root: str) -> bool:
    return root == "/" or path == root or path.startswith(root.rstrip("/") + "/")


def plan(settings: Settings, *, home: str, cwd: str, fs: FsView,
         protect: Sequence[str] = ()) -> Plan:
    """The mount plan for these settings (pure given ``fs``).

    ``protect``: absolute paths the runtime itself keeps read-only in every
    sandbox, like ``denyWrite`` entries (the per-user lock and plan folder).
    """
    f, n = settings.filesystem, settings.network
    # srt's mandatoryDenySearchDepth may ask for a deeper search, never a shallower one
    depth = max(SEARCH_DEPTH, settings.search_depth or 0)
    mounts: dict[tuple[str, str], Mount] = {}

    def add(op: str, path: str) -> None:
        kind = fs.kind(path)
        if kind is None:
            return
        mounts[(op, path)] = Mount(op, path, kind)

    writable_in = [fs.realpath(p) for p in _concrete(f.allow_write, home, cwd, fs, [cwd])]
    if "/" in writable_in:
        raise SettingsError(
            f"{settings.source}: filesystem.allowWrite makes '/' writable; list the "
            "directories the command may write instead"
        )
    # deny beats allow: a writable root inside a denied or protected path stays read-only
    deny_rules = [expand(r, home=home, cwd=cwd) for r in f.deny_write]
    deny_real = [fs.realpath(d) for d in [*deny_rules, *protect] if not is_glob(d)]

    def protected(w: str) -> bool:
        inside = w.rstrip("/") + "/_"
        return (any(_under(w, d) for d in deny_real)
                or any(covers(r, w) or covers(r, inside)
                       for r in (*deny_rules, *MANDATORY_DENY_WRITE) if is_glob(r)))

    writable = [w for w in dict.fromkeys(writable_in) if not protected(w)]
    search_roots = list(dict.fromkeys([cwd, *[w for w in writable if fs.kind(w) == "d"]]))
    for p in _concrete(f.deny_read, home, cwd, fs, search_roots, depth):
        add("hide", fs.realpath(p))
    hidden = [m.path for m in mounts.values() if m.op == "hide"]
    # credentials are hidden like denyRead, and no allowRead opens them again
    creds = [fs.realpath(p) for p in _concrete(settings.credential_files, home, cwd, fs,
                                                   search_roots, depth)]
    for rp in creds:
        add("hide", rp)
    for p in _concrete(f.allow_read, home, cwd, fs, search_roots, depth):
        rp = fs.realpath(p)
        # only where a deny hides it (elsewhere a read-only bind would take away writes)
        if any(_under(rp, h) for h in hidden) and not any(_under(rp, c) for c in creds):
            add("show", rp)
    for w in writable:
        add("rw", w)
    deny_write = _concrete([*f.deny_write, *protect], home, cwd, fs, search_roots, depth)
    for p in deny_write:
        rp = fs.realpath(p)
        if any(_under(rp, w) for w in writable):
            add("ro", rp)
    # the mandatory protected set, inside every writable root
    placeholders: list[tuple[str, str]] = []
    for w in writable:
        if fs.kind(w) != "d":
            continue
        for p in fs.find(w, PROTECTED_NAMES, depth):
            if posixpath.basename(p) in ("fish", "git") and not p.endswith(
                    ("/.config/fish", "/.config/git")):
                continue
            rp = fs.realpath(p)
            if posixpath.basename(p) == ".git" and fs.kind(rp) == "d":
                for sub, kind in (("hooks", "d"), ("config", "f")):
                    target = posixpath.join(rp, sub)
                    if fs.kind(target) is None:
                        placeholders.append((target, kind))
                        mounts[("ro", target)] = Mount("ro", target, kind)
                    else:
                        add("ro", target)
                continue
            add("ro", rp)
        for name, kind in PLACEHOLDERS:
            target = posixpath.join(w, name)
            if fs.kind(target) is None and fs.realpath(target) == target:
                placeholders.append((target, kind))
                mounts[("ro", target)] = Mount("ro", target, kind)
    # Pin every directory between a writable root and a read-only mount inside it
    # (bind it onto itself): a mount point cannot be renamed (EBUSY), so moving a
    # parent away and recreating the protected path beneath a new one fails.
    locked = [m for m in mounts.values() if m.op in ("hide", "ro")]
    for m in list(locked):
        if m.op != "ro":
            continue
        for w in writable:
            if not _under(m.path, w) or m.path == w:
                continue
            a = posixpath.dirname(m.path)
            while a != w and _under(a, w):
                if not any(_under(a, x.path) for x in locked):
                    mounts[("rw", a)] = Mount("rw", a, "d")
                a = posixpath.dirname(a)
    hide_unix = False
    if n.allow_unix_sockets and not n.allow_all_unix_sockets:
        hide_unix = True
        for s in n.allow_unix_sockets:
            p = expand(s, home=home, cwd=cwd)
            if fs.kind(p) is not None:
                mounts[("sock", fs.realpath(p))] = Mount("sock", fs.realpath(p), "f")
    ordered = tuple(sorted(mounts.values(), key=Mount.key))
    return Plan(mounts=ordered, placeholders=tuple(placeholders),
                writable_roots=tuple(writable), hide_unix_dirs=hide_unix,
                unset_env=settings.credential_env)


def without(p: Plan, paths: set[str]) -> Plan:
    """The plan minus the placeholders (and their mounts) that could not be created."""
    if not paths:
        return p
    return Plan(mounts=tuple(m for m in p.mounts if m.path not in paths),
                placeholders=tuple(x for x in p.placeholders if x[0] not in paths),
                writable_roots=p.writable_roots, hide_unix_dirs=p.hide_unix_dirs,
                unset_env=p.unset_env)


class Fds(_Record):
    """Descriptors handed to bwrap: the seccomp program, info and block pipes, and
    the start gate read inside the sandbox (see ``gated``)."""

    __slots__ = ("block", "gate", "info", "ready", "seccomp")
    seccomp: int | None
    info: int | None
    block: int | None
    gate: int | None
    ready: int | None
    _seccomp = _info = _block = _gate = _ready = None

    def __init__(self, seccomp: int | None = None, info: int | None = None,
                 block: int | None = None, gate: int | None = None,
                 ready: int | None = None) -> None:
        super().__init__(seccomp=seccomp, info=info, block=block, gate=gate, ready=ready)


def build_argv(
    p: Plan,
    command: Sequence[str],
    *,
    cwd: str,
    fds: Fds | None = None,
    bwrap: str = "bwrap",
    is_root: bool = False,
    new_session: bool = True,
    gate: str | None = None,
) -> list[str]:
    """The ``bwrap`` command line for a plan (pure).

    ``gate``: the native launcher, when it can be the start gate (see ``gated``).

    ``new_session=False`` keeps an interactive command on its terminal; only
    safe with the seccomp filter, which refuses TIOCSTI and TIOCLINUX.
    """
    argv = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    if p.hide_unix_dirs:
        for d in ("/run", "/tmp"):
            argv += ["--tmpfs", d]
    remount: list[str] = []
    for m in p.mounts:
        if m.op == "hide":
            if m.kind == "d":
                argv += ["--tmpfs", m.path]
                remount.append(m.path)  # after the mounts inside it are in place
            else:
                argv += ["--ro-bind", "/dev/null", m.path]
        elif m.op in ("show", "ro"):
            argv += ["--ro-bind", m.path, m.path]
        elif m.op == "rw":
            argv += ["--bind", m.path, m.path]
        elif m.op == "sock":
            argv += ["--bind", m.path, m.path]
    for path in remount:
        argv += ["--remount-ro", path]
    fds = fds or Fds()
    argv += [
        "--unshare-user", "--disable-userns", "--unshare-pid", "--unshare-net",
        "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
        "--die-with-parent", "--cap-drop", "ALL",
    ]
    if new_session or fds.seccomp is None:
        argv.append("--new-session")
    if fds.seccomp is not None:
        argv += ["--seccomp", str(fds.seccomp)]
    if fds.info is not None:
        argv += ["--info-fd", str(fds.info)]
    if fds.block is not None:
        argv += ["--block-fd", str(fds.block)]
    for name in p.unset_env:
        argv += ["--unsetenv", name]
    argv += ["--chdir", cwd, "--", *gated(command, fds.gate, fds.ready, gate)]
    return argv


# The start gate. bwrap's --block-fd treats end-of-file as "go", and the inner
# bwrap processes arm their parent-death signal late in their setup: a caller
# that dies during start-up could leave the command running unsupervised (no
# proxy, nobody to end it). So the command runs behind a two-step gate: once
# every bwrap level has finished its setup (parent-death signals armed), the
# gate says "ready"; only then does the live caller answer "go". End-of-file
# (the caller died) or anything else ends the sandbox before the command runs.
GATE_SCRIPT = ('echo ready >&{ready}; exec {ready}>&-; '
               'read -r go <&{gate} && [ "$go" = go ] || exit 125; '
               'exec {gate}<&-; exec "$@"')


def gated(command: Sequence[str], gate: int | None, ready: int | None,
          program: str | None = None) -> list[str]:
    """The command behind the start gate (unchanged without the gate's fds).

    ``program``: the native launcher, whose ``__gate`` mode does what the shell
    script does without starting a shell (about a millisecond less).
    """
    if gate is None or ready is None:
        return list(command)
    if program:
        return [program, "__gate", str(int(ready)), str(int(gate)), "--", *command]
    script = GATE_SCRIPT.format(gate=int(gate), ready=int(ready))
    # bash, not sh: dash takes only single-digit descriptors in redirections;
    # -p skips BASH_ENV, so nothing of the caller's runs before the gate opens.
    return [GATE_SHELL, "-p", "-c", script, "sandbox-gate", *command]


GATE_SHELL = "/bin/bash"


def gate_program(p: Plan, candidate: str) -> str | None:
    """``candidate`` (the native launcher) when it can serve as the start gate: an
    executable that the sandbox still sees (not under a hidden folder)."""
    try:
        with open(candidate, "rb") as fh:
            if fh.read(4) != b"\x7fELF":
                return None
    except OSError:
        return None
    real = os.path.realpath(candidate)
    if any(m.op == "hide" and _under(real, m.path) for m in p.mounts):
        return None
    return real


def proxy_env(http_port: int = PROXY_HTTP_PORT, socks_port: int = PROXY_SOCKS_PORT,
              connect_helper: Sequence[str] | None = None) -> dict[str, str]:
    """The proxy variables set inside the sandbox (both cases; loopback bypasses)."""
    http = f"http://127.0.0.1:{http_port}"
    socks = f"socks5h://127.0.0.1:{socks_port}"
    env: dict[str, str] = {}
    for k, v in (("HTTP_PROXY", http), ("HTTPS_PROXY", http), ("ALL_PROXY", socks),
                 ("FTP_PROXY", http), ("NO_PROXY", "localhost,127.0.0.1,::1")):
        env[k] = v
        env[k.lower()] = v
    env["GRPC_PROXY"] = http
    env["grpc_proxy"] = http
    env["SANDBOX_RUNTIME"] = "1"
    if connect_helper:
        cmd = " ".join(connect_helper)
        env["GIT_SSH_COMMAND"] = f"ssh -o ProxyCommand='{cmd} %h %p'"
    return env
