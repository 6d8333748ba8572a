"""The bubblewrap mount planner: settings in, a plan of mounts out, nothing executed.

``plan(settings, ...)`` turns srt-format settings into an ordered list of mount
operations; ``bwrap.argv.build_argv`` turns that into a ``bwrap`` command line.
The planner is pure given a ``FsView`` (what exists on disk): the runtime passes
``fsview.RealFs``, a view of the real filesystem, tests pass a dictionary.

The layout:

- the host root read-only (``--ro-bind / /``; nothing at all when ``denyRead``
  holds ``/``, then only ``allowRead`` and the writable roots are bound), a
  fresh ``/dev`` and ``/proc``;
- denied reads hidden (an empty read-only tmpfs over a directory, ``/dev/null``
  over a file), allowed reads inside them bound back;
- each ``allowWrite`` root bound read-write, ``denyWrite``, the runtime's own
  state and the protected set (``agent_sandbox.protected``) bound read-only
  inside them. Protected names that do not exist yet are listed in
  ``Plan.absent``: with a broker (every run's), refused when a call would create
  them, nothing made on the host; unbrokered (srt's settings), read-only mounts
  of empty files the caller makes. Git metadata that
  changes what git runs is read-only in every repository below a writable root
  (``gitmeta``); the rest of ``.git`` stays writable, and a missing ``.git``
  may be created (the sweep judges it after);
- every namespace unshared (user, pid, net, ipc, uts, cgroup), user namespaces
  disabled inside, all capabilities dropped, a new session (no TIOCSTI), and
  ``--die-with-parent``.

With unix sockets allowed by path, nothing is mounted for them (``sockets``): each
``connect()`` is judged when it is made (``brokered_connect``); the plan carries
the places allowed (``Plan.unix_sockets``).

Operations are applied shallow to deep, so the most specific rule for a path
wins, and on the same path in the order hide < allow-read < write < deny-write:
deny beats allow. Every path is resolved (symlinks followed) before it is
mounted, so a symlink cannot redirect a rule; an ``allowWrite`` entry that is a
symlink grants nothing (srt's rule), and a symlink loop refuses the run.

Walks are complete: every glob matches at any depth below its roots, nothing is
skipped, and a walk that cannot finish (``fsview.WALK_LIMIT`` entries) refuses the run;
a folder that cannot be listed is bound read-only whole. It must never produce
an argv that is looser than the settings.
"""

from __future__ import annotations

import os
import posixpath

from agent_sandbox import protected
from agent_sandbox.spec.paths import expand, is_glob

from ..settings import Settings, SettingsError, _Record
from . import gitmeta
from .globs import _any_depth_literal, covers
from .globs import existing as _glob
from .globs import under as _under
from .sockets import unix_sockets

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from .fsview import FsView

_ORDER = {"link": 0, "hide": 0, "show": 1, "rw": 2, "ro": 3}


class Mount(_Record):
    """One mount operation: op is hide | show | rw | ro | link; kind is d | f
    (for link: the symlink's target, recreated in an empty root)."""

    __slots__ = ("kind", "op", "path")
    op: str
    path: str
    kind: str

    def __init__(self, op: str, path: str, kind: str) -> None:
        super().__init__(op=op, path=path, kind=kind)

    def key(self) -> tuple[int, int, str]:
        return (self.path.count("/") if self.path != "/" else 0, _ORDER[self.op], self.path)


class Plan(_Record):
    """The mounts, the protected names that do not exist yet (``absent``: the broker
    refuses their creation; unbrokered, read-only mounts of them), the writable roots,
    the environment variables removed (the settings' credentials), the
    protected entries that existed before the run with their identities (what the
    sweep must never move), and with unix sockets allowed by path the resolved
    places allowed (``unix_sockets``; None: no connection is judged by path)."""

    __slots__ = ("absent", "before", "hide_root", "mounts", "read_rules",
                 "unix_sockets", "unset_env", "writable_roots")
    mounts: tuple[Mount, ...]
    absent: tuple[tuple[str, str], ...]
    writable_roots: tuple[str, ...]
    hide_root: bool
    unset_env: tuple[str, ...]
    before: tuple[str, ...]
    unix_sockets: tuple[str, ...] | None
    _unix_sockets: tuple[str, ...] | None = None
    _hide_root = False
    _unset_env: tuple[str, ...] = ()
    _before: tuple[str, ...] = ()
    # with a broker: the globs judged when a file is opened (``broker.judge.ReadRules``:
    # denyRead globs, allowRead rules, credential globs, none walked for,
    # and the folders a ``**/`` glob looks below)
    read_rules: tuple[tuple[str, ...], ...]
    _read_rules: tuple[tuple[str, ...], ...] = ((), (), (), ())


def _by_path(mounts: Iterable[Mount]) -> dict[str, list[Mount]]:
    out: dict[str, list[Mount]] = {}
    for m in mounts:
        out.setdefault(posixpath.normpath(m.path), []).append(m)
    return out


def _over(path: str, index: dict[str, list[Mount]]) -> list[Mount]:
    """The mounts of ``index`` (``_by_path``) at ``path`` or at a folder above it."""
    path = posixpath.normpath(path)
    out = list(index.get(path, ()))
    while path != "/":
        path = posixpath.dirname(path)
        out += index.get(path, ())
    return out


def _concrete(rules: Iterable[str], home: str, cwd: str, fs: FsView,
              roots: Sequence[str]) -> list[str]:
    """Expanded, existing paths for a list of rules (globs expanded), each with its
    resolved form too when a symlink leads elsewhere."""
    out: list[str] = []
    for rule in rules:
        path = expand(rule, home=home, cwd=cwd)
        cands = _glob(fs, path, roots) if is_glob(path) else [path]
        for c in cands:
            if fs.kind(c) is None:
                continue
            out.append(c)
            real = fs.realpath(c)
            if real != c:
                out.append(real)
    return list(dict.fromkeys(out))


def _absent_target(fs: FsView, path: str) -> str:
    """Where a path that does not exist would be created: a dangling symlink's
    target (followed to its end), or the path itself."""
    for _ in range(40):
        if fs.lkind(path) != "l":
            return path
        real = fs.realpath(path)
        if real == path:
            return path
        path = real
    raise SettingsError(f"{path}: a symlink loop; remove it")


def _protected_entries(fs: FsView, root: str, home: str) -> list[tuple[str, str]]:
    """Existing protected entries below one writable root: (path, kind) of each
    any-depth name (its whole relative path matched), each home-only entry, each
    folder git takes for a git directory ('g'), each folder the walk could not
    list ('u', protected whole), each bytecode cache file ('c'), and Python's
    start-up (``protected.python_kind``): other bytecode ('b'), a site folder's
    name as a link ('k'), another start-up file ('p'), and each module an
    existing ``.pth`` file names ('m', see ``_pth_modules``)."""
    last: dict[str, list[str]] = {}
    for rel, _kind, _ in protected.ANY_DEPTH:
        last.setdefault(rel.rsplit("/", 1)[-1], []).append(rel)
    out: list[tuple[str, str]] = []
    walked = fs.walk(root)
    # a folder git may take for a git directory whatever its name (a bare
    # repository, a worktree's or submodule's git directory moved out): one
    # holding a HEAD, commondir or gitdir entry of any kind (``gitmeta``)
    marks = gitmeta.GIT_DIR_MARKS
    marked: dict[str, None] = {}
    for path, kind in walked:
        if kind == "u":
            out.append((path, "u"))
            continue
        name = path.rsplit("/", 1)[-1]
        py = (protected.python_kind(path, kind)
              if name.endswith(protected.PYTHON_ENDS) or name.startswith(protected.PYTHON_STARTS)
              else None)
        if py is not None:  # bytecode, or what Python runs at every start
            out.append((path, py))
            if py == "p" and kind == "f" and path.endswith(".pth"):
                out += _pth_modules(fs, path)
            continue
        if name == protected.GIT_DIR:
            out.append((path, kind))
            continue
        if name in marks:
            marked[path[:-len(name) - 1] or "/"] = None
        for rel in last.get(name, ()):
            if path.endswith("/" + rel) and _under(path, root) and path != root:
                out.append((path, kind))
    if marked:
        kinds = dict(walked)
        kinds[root] = "d"
        out += [(p, "g") for p in marked
                if kinds.get(p) == "d" and posixpath.basename(p) != protected.GIT_DIR]
    if _under(home, root) or _under(root, home):
        for rel, _, _ in protected.HOME_ONLY:
            p = posixpath.join(home, rel)
            if _under(p, root) and fs.lkind(p) is not None:
                out.append((p, fs.lkind(p) or "f"))
    return out


def _pth_modules(fs: FsView, pth: str) -> list[tuple[str, str]]:
    """The entries of a site folder that a ``.pth`` file in it may import at every
    start ('m'): each one whose module name appears as a word in the file, when
    the file has an import line (site runs those). Read to make the plan
    stricter only: a word that names nothing adds nothing."""
    words = protected.pth_imports(fs.read(pth, 1 << 16))
    if not words:
        return []
    site = posixpath.dirname(pth)
    out: list[tuple[str, str]] = []
    for name in fs.listdir(site) or ():
        if name.split(".", 1)[0] in words and not name.endswith(".pth"):
            out.append((posixpath.join(site, name), "m"))
    return out


def plan(settings: Settings, *, home: str, cwd: str, fs: FsView,
         protect: Sequence[str] = (), tools: Sequence[str] = (),
         opened: Sequence[str] = (), private: Sequence[str] = (),
         brokered: bool = False, reads_at_open: bool = True) -> Plan:
    """The mount plan for these settings (pure given ``fs``).

    ``protect``: absolute paths the runtime itself keeps read-only in every
    sandbox, like ``denyWrite`` entries (its state folders, its installation,
    the settings file). ``tools``: folders of programs the user runs (the PATH):
    read-only, or kept from being created, where they lie inside a writable root,
    without ever making a writable root itself read-only. ``opened``: writable
    roots the caller opens inside the protected set (an agent client's own state
    folder under ``sandbox agent``): exactly these folders, when ``allowWrite``
    lists them, the protected set's names and every ``denyWrite`` entry inside
    them still read-only, and never one under ``denyWrite`` or ``protect``.
    ``private``: absolute paths hidden whatever the settings allow
    (``contract.private_paths``), like credentials. ``brokered``: a broker judges
    every write when it is made (``runtime.broker``): the missing protected paths
    are still listed (``Plan.absent``, refused by the broker), with no mount
    and nothing made for them, and the writable roots are not walked for the
    protected entries that exist (the broker refuses those by name and by what
    surrounds them; the start costs the same in any tree). ``reads_at_open``
    (with ``brokered``): the ``denyRead`` globs are judged at open too; without
    it (a backend that judges writes after the run, ``broker.publish``, and no
    open), they are found by a walk and hidden.
    """
    b = _Build(settings, home, cwd, fs, brokered)
    b.reads_at_open = brokered and reads_at_open
    _writable_roots(b, protect, opened)
    judged, judged_creds = _reads(b, private)
    for w in b.writable:
        b.add("rw", w)
    _deny_writes(b, protect, tools)
    for w in b.roots:
        _protected_set(b, w)
    # the user's git configuration names paths too
    for config in (posixpath.join(home, ".gitconfig"),
                   posixpath.join(home, ".config/git/config")):
        for p, k in gitmeta.named_paths(fs, config, home, home=home):
            if any(_under(p, w) for w in b.writable):
                b.protect_path(p, k)
    _pin_parents(b)
    _drop_hidden_ro(b)
    sockets = unix_sockets(settings.network, home, cwd, fs, b.writable,
                           [m.path for m in b.mounts.values() if m.op in ("ro", "hide")],
                           b.private_real)
    ordered = tuple(sorted(b.mounts.values(), key=Mount.key))
    f = settings.filesystem
    return Plan(mounts=ordered, absent=tuple(b.absent.items()),
                writable_roots=tuple(b.writable), hide_root=b.hide_root,
                unset_env=settings.credential_env, before=tuple(dict.fromkeys(b.before)),
                unix_sockets=sockets, read_rules=(
                    tuple(judged), tuple(expand(r, home=home, cwd=cwd) for r in f.allow_read)
                    if judged else (), tuple(judged_creds), tuple(b.search_roots)))


class _Build:
    """A plan being built, phase by phase (``plan``): its mounts and absent protected names,
    the protected entries seen, and what one phase finds for the next."""

    def __init__(self, settings: Settings, home: str, cwd: str, fs: FsView,
                 brokered: bool) -> None:
        self.settings, self.home, self.cwd, self.fs = settings, home, cwd, fs
        self.brokered = brokered
        self.reads_at_open = brokered
        self.mounts: dict[tuple[str, str], Mount] = {}
        self.absent: dict[str, str] = {}
        self.before: list[str] = []
        self.writable: list[str] = []  # the writable roots, none inside a denied path
        self.roots: list[str] = []  # those that are folders
        self.opened_roots: set[str] = set()  # opened, listed and not denied
        self.search_roots: list[str] = []  # where globs are walked for
        self.hide_root = False
        self.private_real: list[str] = []

    def add(self, op: str, path: str) -> None:
        kind = self.fs.kind(path)
        if kind is None:
            return
        self.mounts[(op, path)] = Mount(op, path, kind)

    def protect_path(self, path: str, kind: str) -> None:
        """Read-only if it exists; listed as absent if it could be created inside.

        An absent name is held as a file whatever the protected entry's kind:
        nothing can be created at it or below it."""
        target = _absent_target(self.fs, path)
        if target in self.opened_roots:
            return  # opened by the caller: a writable root with its own protection
        if self.fs.kind(target) is not None:
            self.add("ro", self.fs.realpath(target))
        elif any(_under(target, w) and target != w for w in self.roots):
            self.absent.setdefault(target, "f")
            if not self.brokered:
                self.mounts[("ro", target)] = Mount("ro", target, "f")


def _writable_roots(b: _Build, protect: Sequence[str], opened: Sequence[str]) -> None:
    """The ``allowWrite`` roots that are writable: existing, no symlink, and none
    inside a denied or protected path (deny beats allow)."""
    settings, home, cwd, fs = b.settings, b.home, b.cwd, b.fs
    f = settings.filesystem
    writable_in: list[str] = []
    for rule in f.allow_write:
        path = expand(rule, home=home, cwd=cwd)
        for c in (_glob(fs, path, [cwd]) if is_glob(path) else [path]):
            if fs.kind(c) is None:
                continue
            real = fs.realpath(c)
            if real != c:
                continue  # a symlink (or one on the way) grants nothing: srt's rule
            writable_in.append(real)
    if "/" in writable_in:
        raise SettingsError(
            f"{settings.source}: filesystem.allowWrite makes '/' writable; list the "
            "directories the command may write instead"
        )
    # deny beats allow: a writable root inside a denied or protected path stays read-only
    deny_rules = [expand(r, home=home, cwd=cwd) for r in f.deny_write]
    # the protected set's ``**/name`` forms (a writable root is a folder: the git
    # metadata rules with inner globs name files inside .git, covered by **/.git)
    mandatory = (*(r for r in protected.any_depth_rules() if _any_depth_literal(r)),
                 *(r for r in protected.home_rules(home) if not is_glob(r)))
    deny_real = [fs.realpath(d) for d in [*deny_rules, *protect, *mandatory] if not is_glob(d)]

    opened_real = {fs.realpath(o) for o in opened}
    strict = [fs.realpath(d) for d in [*deny_rules, *protect] if not is_glob(d)]

    def is_protected(w: str) -> bool:
        if w in opened_real:
            return any(_under(w, d) for d in strict)
        inside = w.rstrip("/") + "/_"
        return (any(_under(w, d) for d in deny_real)
                or any(covers(r, w) or covers(r, inside)
                       for r in (*deny_rules, *mandatory) if is_glob(r)))

    b.writable = [w for w in dict.fromkeys(writable_in) if not is_protected(w)]
    b.roots = [w for w in b.writable if fs.kind(w) == "d"]
    b.opened_roots = opened_real.intersection(b.roots)
    b.search_roots = list(dict.fromkeys([cwd, *b.roots]))


def _reads(b: _Build, private: Sequence[str]) -> tuple[list[str], list[str]]:
    """Denied reads and credentials hidden, allowed reads shown again inside them;
    (the denyRead globs, the credential globs) judged at open instead, with a broker."""
    settings, home, cwd, fs = b.settings, b.home, b.cwd, b.fs
    f = settings.filesystem
    # with a broker, a glob is judged when a file is opened (``broker.reads``), never
    # walked for: the start costs the same in any tree, and a file that appears
    # during the run is judged like the rest
    deny_read, judged = _judged_at_open(f.deny_read, home, cwd) if b.reads_at_open else (
        list(f.deny_read), [])
    cred_rules, judged_creds = _judged_at_open(settings.credential_files, home, cwd) \
        if b.reads_at_open else (list(settings.credential_files), [])
    for p in _concrete(deny_read, home, cwd, fs, b.search_roots):
        rp = fs.realpath(p)
        if rp == "/":
            b.hide_root = True
            continue
        b.add("hide", rp)
    hidden = [m.path for m in b.mounts.values() if m.op == "hide"]
    # credentials are hidden like denyRead, and no allowRead opens them again
    creds = [fs.realpath(p) for p in _concrete(cred_rules, home, cwd, fs, b.search_roots)]
    b.private_real = [fs.realpath(p) for p in private]
    creds += b.private_real
    for rp in creds:
        b.add("hide", rp)
    # a denied file with a second name (a hard link made in an earlier run) would be
    # readable through it: refuse the run rather than guess where the names are
    for m in b.mounts.values():
        if m.op == "hide" and m.kind == "f" and fs.nlink(m.path) > 1:
            raise SettingsError(
                f"{m.path} is denied for reading but has {fs.nlink(m.path)} hard links: "
                "another name could read it; remove the extra links (find -samefile)")
    for p in _concrete(f.allow_read, home, cwd, fs, b.search_roots):
        rp = fs.realpath(p)
        if b.hide_root and p != rp and fs.lkind(p) == "l":
            # with nothing of the host's root bound, a link allowed for reading (/bin
            # on merged-/usr systems) is made again, pointing where it points
            from .fsview import RealFs

            target = os.readlink(p) if isinstance(fs, RealFs) else rp
            b.mounts[("link", p)] = Mount("link", p, target)
            continue
        # only where a deny hides it (elsewhere a read-only bind would take away writes)
        if (b.hide_root or any(_under(rp, h) for h in hidden)) and not any(
                _under(rp, c) for c in creds):
            b.add("show", rp)
    return judged, judged_creds


def _deny_writes(b: _Build, protect: Sequence[str], tools: Sequence[str]) -> None:
    """``denyWrite`` and the runtime's own paths: existing ones read-only, absent
    ones (and dangling symlinks' targets) kept from being created; the tools'
    folders inside a writable root likewise."""
    home, cwd, fs = b.home, b.cwd, b.fs
    for rule in [*b.settings.filesystem.deny_write, *protect]:
        path = expand(rule, home=home, cwd=cwd)
        if is_glob(path):
            for c in _concrete([path], home, cwd, fs, b.search_roots):
                if any(_under(fs.realpath(c), w) for w in b.writable):
                    b.add("ro", fs.realpath(c))
            continue
        if any(_under(path, w) for w in b.writable) or any(
                _under(fs.realpath(path), w) for w in b.writable):
            b.protect_path(path, "f")
    for t in tools:
        if any(_under(t, w) and t != w for w in b.writable):
            b.protect_path(t, "d")


def _protected_set(b: _Build, w: str) -> None:
    """The protected set at every depth of the writable root ``w``: the entries
    that exist read-only (not walked for with a broker), the absent ones kept from
    being created."""
    fs, home = b.fs, b.home
    for path, kind in () if b.brokered else _protected_entries(fs, w, home):
        b.before.append(path)
        if kind in ("c", "b", "k"):
            continue  # bytecode and links: the sweep judges them (see sweep)
        if kind == "p" and fs.lkind(path) == "l":
            # a link (.venv/bin/python): the sweep judges the link; its target
            # is bound only where the command could change it
            real = fs.realpath(path)
            if any(_under(real, x) for x in b.roots):
                b.add("ro", real)
            continue
        if kind == "u":
            b.add("ro", path)  # cannot be listed: protected whole
            continue
        name = path.rsplit("/", 1)[-1]
        if name == protected.GIT_DIR or kind == "g":
            _protected_git(b, path, kind)
            continue
        if fs.realpath(path) in b.opened_roots:
            continue  # opened by the caller: a writable root with its own walk
        b.add("ro", fs.realpath(path))
    for rel, kind, _ in protected.ANY_DEPTH:
        first = rel.split("/", 1)[0]
        if first != rel and first != ".config" and fs.lkind(posixpath.join(w, first)) is None:
            # no folder made for a placeholder: `.hg/`, `.mvn/`, `.jj/` would make the
            # root a repository or a project to the tools (the sweep judges them)
            continue
        b.protect_path(posixpath.join(w, rel), kind)
    if _under(home, w) or _under(w, home):
        for rel, kind, _ in protected.HOME_ONLY:
            p = posixpath.join(home, rel)
            if _under(p, w):
                b.protect_path(p, kind)


def _protected_git(b: _Build, path: str, kind: str) -> None:
    """A ``.git`` entry (a folder, a file naming one, or a git folder by its
    marks): the metadata that changes what git runs read-only."""
    fs = b.fs
    gitdir = path if kind in "dg" else gitmeta.gitdir_of_file(fs, path)
    if kind not in "dg":
        b.mounts[("ro", path)] = Mount("ro", path, "f")
    if gitdir is not None and fs.lkind(gitdir) is None:
        b.protect_path(gitdir, "d")  # git would take what appears there
    if gitdir is None or fs.kind(gitdir) != "d":
        return
    for sub in ("modules", "worktrees"):
        if fs.lkind(posixpath.join(gitdir, sub)) is not None:
            b.before.append(posixpath.join(gitdir, sub))
    worktree = path if kind == "g" else posixpath.dirname(path)
    ro, absent = gitmeta.protect_git_dir(fs, gitdir, worktree, home=b.home)
    for p in ro:
        b.add("ro", fs.realpath(p))
        b.before.append(p)
    for p, k in absent:
        b.protect_path(p, k)


def _pin_parents(b: _Build) -> None:
    """Pin every directory between a writable root and a read-only or hidden mount
    inside it (bind it onto itself): a mount point cannot be renamed (EBUSY), so
    moving a parent away and recreating the protected path beneath a new one fails."""
    locked = [m for m in b.mounts.values() if m.op in ("hide", "ro")]
    for m in list(locked):
        for w in b.writable:
            if not _under(m.path, w) or m.path == w:
                continue
            a = posixpath.dirname(m.path)
            while a != w and _under(a, w):
                if not any(_under(a, x.path) for x in locked):
                    b.mounts[("rw", a)] = Mount("rw", a, "d")
                a = posixpath.dirname(a)


def _drop_hidden_ro(b: _Build) -> None:
    """A read-only bind under a hidden (or shown read-only) region would expose what
    the deny hides: it is kept only where the nearest mount above is writable."""
    opening = _by_path(m for m in b.mounts.values() if m.op in ("hide", "show", "rw"))
    for key, m in list(b.mounts.items()):
        if m.op != "ro":
            continue
        above = _over(m.path, opening)
        if b.hide_root and not above:
            del b.mounts[key]
            continue
        if above and max(above, key=Mount.key).op != "rw":
            del b.mounts[key]


def _judged_at_open(rules: Iterable[str], home: str, cwd: str) -> tuple[list[str], list[str]]:
    """(rules the plan hides with mounts, expanded globs judged at open): a glob
    is judged at open unless it would hide the root itself."""
    mounted, judged = [], []
    for rule in rules:
        path = expand(rule, home=home, cwd=cwd)
        if is_glob(path) and not covers(path, "/"):
            judged.append(path)
        else:
            mounted.append(rule)
    return mounted, judged


def without(p: Plan, paths: set[str]) -> Plan:
    """The plan minus the absent names (and their mounts) at ``paths``."""
    if not paths:
        return p
    return Plan(mounts=tuple(m for m in p.mounts if m.path not in paths),
                absent=tuple(x for x in p.absent if x[0] not in paths),
                writable_roots=p.writable_roots, hide_root=p.hide_root,
                unset_env=p.unset_env, before=p.before, unix_sockets=p.unix_sockets,
                read_rules=p.read_rules)
