"""The bubblewrap argv builder: settings in, argv out, nothing executed.

``plan(settings, ...)`` turns srt-format settings into an ordered list of mount
operations and ``build_argv`` turns that into a ``bwrap`` command line. Both are
pure given a ``FsView`` (what exists on disk); the runtime passes a view of the
real filesystem, tests pass a dictionary.

The layout:

- the host root read-only (``--ro-bind / /``; nothing at all when ``denyRead``
  holds ``/``, then only ``allowRead`` and the writable roots are bound), a
  fresh ``/dev`` and ``/proc``;
- denied reads hidden (an empty read-only tmpfs over a directory, ``/dev/null``
  over a file), allowed reads inside them bound back;
- each ``allowWrite`` root bound read-write, ``denyWrite``, the runtime's own
  state and the protected set (``agent_sandbox.protected``) bound read-only
  inside them. Protected names that do not exist yet at the top of a writable
  root, and ``denyWrite`` paths that do not exist yet, get an empty placeholder
  file on the host (for folders too) so a read-only mount can sit on them: the
  command cannot create them, nor anything below them. Git metadata that
  changes what git runs is read-only in every repository below a writable root
  (``gitmeta``); the rest of ``.git`` stays writable, and a missing ``.git``
  may be created (the sweep judges it after);
- every namespace unshared (user, pid, net, ipc, uts, cgroup), user namespaces
  disabled inside, all capabilities dropped, a new session (no TIOCSTI), and
  ``--die-with-parent``.

With unix sockets allowed by path (seccomp cannot read a ``connect()``'s path),
the folders where sockets live are hidden, the listed sockets bound back, and
every other socket the sandbox could still see is masked: each one the kernel
lists as bound (``FsView.sockets``) and each one the walks find.

Operations are applied shallow to deep, so the most specific rule for a path
wins, and on the same path in the order hide < allow-read < write < deny-write:
deny beats allow. Every path is resolved (symlinks followed) before it is
mounted, so a symlink cannot redirect a rule; an ``allowWrite`` entry that is a
symlink grants nothing (srt's rule), and a symlink loop refuses the run.

Walks are complete: every glob matches at any depth below its roots, nothing is
skipped, and a walk that cannot finish (``WALK_LIMIT`` entries) refuses the run;
a folder that cannot be listed is bound read-only whole. It must never produce
an argv that is looser than the settings.
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat

from agent_sandbox import protected
from agent_sandbox.contract import PROXY_HTTP_PORT, PROXY_SOCKS_PORT
from agent_sandbox.spec.paths import covers as _glob_covers
from agent_sandbox.spec.paths import expand, is_glob

from . import gitmeta
from .settings import Settings, SettingsError, _Record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence
    from typing import Protocol

    class FsView(Protocol):
        """What the builder needs to know about the filesystem (read-only questions)."""

        def kind(self, path: str) -> str | None:
            """'d', 'f' (anything not a directory) or None when absent (symlinks
            followed); raises ``SettingsError`` on a symlink loop."""

        def lkind(self, path: str) -> str | None:
            """'d', 'f', 'l' (a symlink) or None when absent (not followed)."""

        def realpath(self, path: str) -> str: ...

        def walk(self, root: str) -> list[tuple[str, str]]:
            """Every (path, kind) below ``root``, complete: kind is 'd', 'f', 'l',
            's' (socket, fifo, device) or 'u' for a folder that cannot be listed;
            raises ``WalkError``."""

        def read(self, path: str, limit: int) -> bytes | None:
            """The first ``limit`` bytes of a regular file, or None."""

        def nlink(self, path: str) -> int:
            """How many names the file has (hard links); 1 when unknown."""

        def readlink(self, path: str) -> str | None:
            """A symlink's target as written, or None."""

        def listdir(self, path: str) -> list[str] | None:
            """The names in a folder, or None when it cannot be listed."""

        def sockets(self) -> list[str]:
            """Paths at which a bound unix socket can be reached (``unix_sockets``)."""

__all__ = ["PROXY_HTTP_PORT", "PROXY_SOCKS_PORT"]

# Folders hidden (an empty tmpfs) when the settings allow unix sockets by path:
# seccomp cannot see a connect()'s path, so the sockets must not be visible.
UNIX_SOCKET_DIRS = ("/tmp", "/var/tmp", "/run", "/dev/shm")
WALK_LIMIT = 2_000_000  # entries below one root; beyond it the run refuses to start

_ORDER = {"link": 0, "hide": 0, "show": 1, "rw": 2, "ro": 3, "sock": 4}


class WalkError(SettingsError):
    """A walk that decides protection cannot finish: the run must not start."""


class Mount(_Record):
    """One mount operation: op is hide | show | rw | ro | sock | link; kind is d | f
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
    """The mounts, the placeholders to create on the host first, the writable roots,
    the environment variables removed (the settings' credentials), the
    protected entries that existed before the run with their identities (what the
    sweep must never move), and the sockets masked (a socket may go away before
    its mount: ``bwrap_run`` then plans again)."""

    __slots__ = ("before", "hide_root", "hide_unix_dirs", "masked_sockets", "mounts",
                 "placeholders", "unset_env", "writable_roots")
    mounts: tuple[Mount, ...]
    placeholders: tuple[tuple[str, str], ...]
    writable_roots: tuple[str, ...]
    hide_unix_dirs: bool
    hide_root: bool
    unset_env: tuple[str, ...]
    before: tuple[str, ...]
    masked_sockets: tuple[str, ...]
    _masked_sockets: tuple[str, ...] = ()
    _hide_unix_dirs = False
    _hide_root = False
    _unset_env: tuple[str, ...] = ()
    _before: tuple[str, ...] = ()


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
    """``FsView`` over the real filesystem: complete walks, no writes.

    A walk visits everything below its root (symlinks are not followed) but the
    insides of ``.git`` folders (``gitmeta`` judges those), and is done once per
    root; past ``limit`` entries it raises ``WalkError``.
    """

    def __init__(self, limit: int = WALK_LIMIT, skip: Sequence[str] = ()) -> None:
        self.limit = limit
        self.skip = frozenset(skip)  # folders never walked into (the runtime's own)
        self._walked: dict[str, list[tuple[str, str]]] = {}

    def kind(self, path: str) -> str | None:
        try:
            st = os.stat(path)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise SettingsError(f"{path}: a symlink loop; remove it") from None
            return None
        except ValueError:
            return None
        return "d" if stat.S_ISDIR(st.st_mode) else "f"

    def lkind(self, path: str) -> str | None:
        try:
            st = os.lstat(path)
        except (OSError, ValueError):
            return None
        if stat.S_ISLNK(st.st_mode):
            return "l"
        return "d" if stat.S_ISDIR(st.st_mode) else "f"

    def realpath(self, path: str) -> str:
        return os.path.realpath(path)

    def read(self, path: str, limit: int) -> bytes | None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
        except OSError:
            return None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            return os.read(fd, limit)
        except OSError:
            return None
        finally:
            os.close(fd)

    def nlink(self, path: str) -> int:
        try:
            return os.stat(path).st_nlink
        except (OSError, ValueError):
            return 1

    def readlink(self, path: str) -> str | None:
        try:
            return os.readlink(path)
        except (OSError, ValueError):
            return None

    def listdir(self, path: str) -> list[str] | None:
        try:
            return os.listdir(path)
        except (OSError, ValueError):
            return None

    def sockets(self) -> list[str]:
        from .unix_sockets import bound_sockets, device_mount_points, moved_sockets

        found, lost = moved_sockets()
        # a socket that left its bind-time name and was not found near it cannot be
        # masked; unless its filesystem shows only inside the folders hidden for
        # sockets, the run is refused rather than started with it reachable
        for name, dev in lost:
            points = device_mount_points(dev)
            if not points or not all(any(_under(p, d) for d in UNIX_SOCKET_DIRS)
                                     for p in points):
                raise SettingsError(
                    f"unix sockets are allowed by path, but a bound socket is no longer at "
                    f"the name it was bound to ({name!r}) and was not found near it, so it "
                    "cannot be masked; stop the program that owns it, or run with "
                    "--backend gvisor")
        return [*bound_sockets(), *found]

    def walk(self, root: str) -> list[tuple[str, str]]:
        if root not in self._walked:
            self._walked[root] = self._walk(root)
        return self._walked[root]

    def _walk(self, root: str) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        stack = [root]
        while stack:
            d = stack.pop()
            try:
                with os.scandir(d) as it:
                    entries = list(it)
            except OSError:
                out.append((d, "u"))  # cannot be listed: protected whole by the planner
                continue
            for e in entries:
                try:
                    if e.is_symlink():
                        kind = "l"
                    elif e.is_dir(follow_symlinks=False):
                        kind = "d"
                    elif e.is_file(follow_symlinks=False):
                        kind = "f"
                    else:
                        kind = "s"  # a socket, fifo or device node
                except OSError:
                    kind = "u"
                if len(out) >= self.limit:
                    raise WalkError(
                        f"{root} holds more than {self.limit} entries, too many to check "
                        "for protected and denied paths; make a smaller folder writable "
                        "or run from a smaller one")
                # a git directory's insides are judged by ``gitmeta`` (its object
                # store alone can hold more entries than the rest of the tree)
                if kind == "d" and e.path not in self.skip and (
                        e.name != protected.GIT_DIR or (d == root and root.endswith("/.git"))):
                    stack.append(e.path)
                out.append((e.path, kind))
        return out


def _glob(fs: FsView, pattern: str, roots: Sequence[str]) -> list[str]:
    """Existing paths matching an absolute or ``**/``-anchored glob (outermost only)."""
    if pattern.startswith("/"):
        lit: list[str] = []
        for part in pattern.split("/")[1:]:
            if is_glob(part):
                break
            lit.append(part)
        base = "/" + "/".join(lit)
        search = [base] if fs.kind(base) == "d" else []
    else:
        search = list(roots)
    match = _matcher(pattern)
    out: list[str] = []
    for r in search:
        if match(r):
            out.append(r)
            continue
        matched: list[str] = []
        for p, _ in fs.walk(r):
            if match(p) and not any(_under(p, m) for m in matched):
                matched.append(p)
        out += matched
    return out


def _under(path: str, root: str) -> bool:
    return root == "/" or path == root or path.startswith(root.rstrip("/") + "/")


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


def _visible(path: str, index: dict[str, list[Mount]], hide_root: bool) -> bool:
    """Whether the sandbox sees the host's file at ``path`` (pure; ``index`` is the
    plan's mounts by path): the mount applied last over it decides (the plan's
    mounts go on shallow to deep, after the empty folders over
    ``UNIX_SOCKET_DIRS``); a hidden region shows nothing."""
    over = _over(path, index)
    if over:
        return max(over, key=Mount.key).op != "hide"
    return not hide_root and not any(_under(path, d) for d in UNIX_SOCKET_DIRS)


def _links_on_the_way(fs: FsView, path: str) -> list[str]:
    """Every symlink that resolving ``path`` goes through (their own paths)."""
    out: list[str] = []
    todo = [x for x in path.split("/") if x]
    cur = "/"
    while todo:
        part = todo.pop(0)
        if part == ".":
            continue
        if part == "..":
            cur = posixpath.dirname(cur)
            continue
        nxt = posixpath.join(cur, part)
        if fs.lkind(nxt) != "l":
            cur = nxt
            continue
        out.append(nxt)
        target = fs.readlink(nxt)
        if target is None or len(out) > 40:
            raise SettingsError(f"{path}: a symlink loop or an unreadable link; remove it")
        if target.startswith("/"):
            cur = "/"
        todo = [x for x in target.split("/") if x] + todo
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
    list ('u', protected whole), and each bytecode cache file ('c')."""
    last: dict[str, list[str]] = {}
    for rel, _kind, _ in protected.ANY_DEPTH:
        last.setdefault(rel.rsplit("/", 1)[-1], []).append(rel)
    out: list[tuple[str, str]] = []
    walked = fs.walk(root)
    # a folder git takes for a git directory (HEAD, objects/, refs/) whatever its
    # name: git run inside or below it reads its config (a bare repository)
    kinds = dict(walked)
    for path, kind in [(root, "d"), *walked]:
        if kind == "d" and posixpath.basename(path) != protected.GIT_DIR and (
                kinds.get(posixpath.join(path, "HEAD")) == "f"
                and kinds.get(posixpath.join(path, "objects")) == "d"
                and kinds.get(posixpath.join(path, "refs")) == "d"):
            out.append((path, "g"))
    for path, kind in walked:
        if kind == "u":
            out.append((path, "u"))
            continue
        if kind == "f" and path.endswith(".pyc") and "/__pycache__/" in path:
            out.append((path, "c"))  # bytecode Python runs instead of its source
            continue
        name = path.rsplit("/", 1)[-1]
        if name == protected.GIT_DIR:
            out.append((path, kind))
            continue
        for rel in last.get(name, ()):
            if path.endswith("/" + rel) and _under(path, root) and path != root:
                out.append((path, kind))
    if _under(home, root) or _under(root, home):
        for rel, _, _ in protected.HOME_ONLY:
            p = posixpath.join(home, rel)
            if _under(p, root) and fs.lkind(p) is not None:
                out.append((p, fs.lkind(p) or "f"))
    return out


def plan(settings: Settings, *, home: str, cwd: str, fs: FsView,
         protect: Sequence[str] = (), tools: Sequence[str] = (),
         opened: Sequence[str] = ()) -> Plan:
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
    """
    f, n = settings.filesystem, settings.network
    mounts: dict[tuple[str, str], Mount] = {}
    placeholders: dict[str, str] = {}

    def add(op: str, path: str) -> None:
        kind = fs.kind(path)
        if kind is None:
            return
        mounts[(op, path)] = Mount(op, path, kind)

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

    writable = [w for w in dict.fromkeys(writable_in) if not is_protected(w)]
    roots = [w for w in writable if fs.kind(w) == "d"]
    opened_roots = opened_real.intersection(roots)  # opened, listed and not denied
    search_roots = list(dict.fromkeys([cwd, *roots]))
    hide_root = False
    for p in _concrete(f.deny_read, home, cwd, fs, search_roots):
        rp = fs.realpath(p)
        if rp == "/":
            hide_root = True
            continue
        add("hide", rp)
    hidden = [m.path for m in mounts.values() if m.op == "hide"]
    # credentials are hidden like denyRead, and no allowRead opens them again
    creds = [fs.realpath(p) for p in _concrete(settings.credential_files, home, cwd, fs,
                                                   search_roots)]
    for rp in creds:
        add("hide", rp)
    # a denied file with a second name (a hard link made in an earlier run) would be
    # readable through it: refuse the run rather than guess where the names are
    for m in mounts.values():
        if m.op == "hide" and m.kind == "f" and fs.nlink(m.path) > 1:
            raise SettingsError(
                f"{m.path} is denied for reading but has {fs.nlink(m.path)} hard links: "
                "another name could read it; remove the extra links (find -samefile)")
    for p in _concrete(f.allow_read, home, cwd, fs, search_roots):
        rp = fs.realpath(p)
        if hide_root and p != rp and fs.lkind(p) == "l":
            # with nothing of the host's root bound, a link allowed for reading (/bin
            # on merged-/usr systems) is made again, pointing where it points
            target = os.readlink(p) if isinstance(fs, RealFs) else rp
            mounts[("link", p)] = Mount("link", p, target)
            continue
        # only where a deny hides it (elsewhere a read-only bind would take away writes)
        if (hide_root or any(_under(rp, h) for h in hidden)) and not any(
                _under(rp, c) for c in creds):
            add("show", rp)
    for w in writable:
        add("rw", w)

    def protect_path(path: str, kind: str) -> None:
        """Read-only if it exists; a placeholder if it could be created inside.

        A placeholder is an empty file whatever the protected entry's kind: a
        read-only file holds the name as well as a folder does (nothing can be
        created at it or below it), and a folder costs a disk block whose release
        is slow on filesystems mounted with ``discard``."""
        target = _absent_target(fs, path)
        if target in opened_roots:
            return  # opened by the caller: a writable root with its own protection
        if fs.kind(target) is not None:
            add("ro", fs.realpath(target))
        elif any(_under(target, w) and target != w for w in roots):
            placeholders.setdefault(target, "f")
            mounts[("ro", target)] = Mount("ro", target, "f")

    # denyWrite and the runtime's own paths: existing ones read-only, absent ones
    # (and dangling symlinks' targets) kept from being created
    for rule in [*f.deny_write, *protect]:
        path = expand(rule, home=home, cwd=cwd)
        if is_glob(path):
            for c in _concrete([path], home, cwd, fs, search_roots):
                if any(_under(fs.realpath(c), w) for w in writable):
                    add("ro", fs.realpath(c))
            continue
        if any(_under(path, w) for w in writable) or any(
                _under(fs.realpath(path), w) for w in writable):
            protect_path(path, "f")
    for t in tools:
        if any(_under(t, w) and t != w for w in writable):
            protect_path(t, "d")
    # the protected set, at every depth of every writable root
    before: list[str] = []
    for w in roots:
        for path, kind in _protected_entries(fs, w, home):
            before.append(path)
            if kind == "c":
                continue  # the sweep removes what the run wrote (see sweep)
            if kind == "u":
                add("ro", path)  # cannot be listed: protected whole
                continue
            name = path.rsplit("/", 1)[-1]
            if name == protected.GIT_DIR or kind == "g":
                gitdir = path if kind in "dg" else gitmeta.gitdir_of_file(fs, path)
                if kind not in "dg":
                    mounts[("ro", path)] = Mount("ro", path, "f")
                if gitdir is None or fs.kind(gitdir) != "d":
                    continue
                for sub in ("modules", "worktrees"):
                    if fs.lkind(posixpath.join(gitdir, sub)) is not None:
                        before.append(posixpath.join(gitdir, sub))
                worktree = path if kind == "g" else posixpath.dirname(path)
                ro, absent = gitmeta.protect_git_dir(fs, gitdir, worktree, home=home)
                for p in ro:
                    add("ro", fs.realpath(p))
                    before.append(p)
                for p, k in absent:
                    protect_path(p, k)
                continue
            if fs.realpath(path) in opened_roots:
                continue  # opened by the caller: a writable root with its own walk
            add("ro", fs.realpath(path))
        for rel, kind, _ in protected.ANY_DEPTH:
            protect_path(posixpath.join(w, rel), kind)
        if _under(home, w) or _under(w, home):
            for rel, kind, _ in protected.HOME_ONLY:
                p = posixpath.join(home, rel)
                if _under(p, w):
                    protect_path(p, kind)
    # the user's git configuration names paths too
    for config in (posixpath.join(home, ".gitconfig"),
                   posixpath.join(home, ".config/git/config")):
        for p, k in gitmeta.named_paths(fs, config, home, home=home):
            if any(_under(p, w) for w in writable):
                protect_path(p, k)
    # Pin every directory between a writable root and a read-only or hidden mount
    # inside it (bind it onto itself): a mount point cannot be renamed (EBUSY), so
    # moving a parent away and recreating the protected path beneath a new one fails.
    locked = [m for m in mounts.values() if m.op in ("hide", "ro")]
    for m in list(locked):
        for w in writable:
            if not _under(m.path, w) or m.path == w:
                continue
            a = posixpath.dirname(m.path)
            while a != w and _under(a, w):
                if not any(_under(a, x.path) for x in locked):
                    mounts[("rw", a)] = Mount("rw", a, "d")
                a = posixpath.dirname(a)
    # A read-only bind under a hidden (or shown read-only) region would expose what
    # the deny hides: it is needed only where the nearest mount above is writable.
    opening = _by_path(m for m in mounts.values() if m.op in ("hide", "show", "rw"))
    for key, m in list(mounts.items()):
        if m.op != "ro":
            continue
        above = _over(m.path, opening)
        if hide_root and not above:
            del mounts[key]
            continue
        if above and max(above, key=Mount.key).op != "rw":
            del mounts[key]
    hide_unix = False
    masked: list[str] = []
    if n.allow_unix_sockets and not n.allow_all_unix_sockets:
        hide_unix = True
        carved = [m.path for m in mounts.values() if m.op in ("ro", "hide")]

        def writable_here(path: str) -> bool:
            return any(_under(path, w) for w in writable) and not any(
                _under(path, c) for c in carved)

        for s in n.allow_unix_sockets:
            p = expand(s, home=home, cwd=cwd)
            if fs.kind(p) is None:
                continue
            rp = fs.realpath(p)
            # an entry the command can also write is dropped (srt's rule): it could put
            # its own socket, or a link to another, where the allowed one was; so is one
            # whose resolution passes through a link the command can write
            if any(writable_here(x) for x in (p, rp, *_links_on_the_way(fs, p))):
                continue
            mounts[("sock", rp)] = Mount("sock", rp, "f")
        # the runtime's own installation and files, wherever they are (a checkout under
        # /tmp), stay visible read-only in the folders hidden for sockets
        for r in protect:
            if any(_under(r, d) for d in UNIX_SOCKET_DIRS) and not any(
                    _under(r, w) for w in writable) and fs.kind(r) is not None:
                add("show", fs.realpath(r))
        # seccomp cannot read a connect()'s path, so every socket the sandbox could see
        # that the list does not name is masked (/dev/null over it): each one the kernel
        # lists as bound (``unix_sockets``), and each one the walks of the writable roots
        # found (a daemon's socket in a writable root, a hard link made by an earlier run)
        allowed = [m.path for m in mounts.values() if m.op == "sock"]
        found = [path for w in roots for path, kind in fs.walk(w) if kind == "s"]
        index = _by_path(m for m in mounts.values() if m.op != "link")
        to_mask = [path for path in dict.fromkeys(fs.realpath(x)
                                                  for x in [*fs.sockets(), *found])
                   if not any(_under(path, a) for a in allowed)
                   and _visible(path, index, hide_root)]
        # a folder outside the writable roots that holds nothing but sockets to mask is
        # hidden whole: one mount instead of one per socket (bwrap's cost per mount
        # grows with the number of mounts), and a socket bound there later is hidden too
        folders: dict[str, list[str]] = {}
        for path in to_mask:
            folders.setdefault(posixpath.dirname(path), []).append(path)
        for folder, paths in folders.items():
            if (len(paths) > 1 and folder != "/" and not any(_under(folder, w) for w in writable)
                    and sorted(fs.listdir(folder) or ()) == sorted(
                        posixpath.basename(x) for x in paths)
                    and not any(_under(m.path, folder) for m in mounts.values())):
                mounts[("hide", folder)] = Mount("hide", folder, "d")
                masked.append(folder)
                continue
            for path in paths:
                for key in [k for k in mounts if k[1] == path]:
                    del mounts[key]  # nothing else may be mounted at a masked socket
                mounts[("hide", path)] = Mount("hide", path, "f")
                masked.append(path)
    ordered = tuple(sorted(mounts.values(), key=Mount.key))
    return Plan(mounts=ordered, placeholders=tuple(placeholders.items()),
                writable_roots=tuple(writable), hide_unix_dirs=hide_unix, hide_root=hide_root,
                unset_env=settings.credential_env, before=tuple(dict.fromkeys(before)),
                masked_sockets=tuple(masked))


def without(p: Plan, paths: set[str]) -> Plan:
    """The plan minus the placeholders (and their mounts) that could not be created."""
    if not paths:
        return p
    return Plan(mounts=tuple(m for m in p.mounts if m.path not in paths),
                placeholders=tuple(x for x in p.placeholders if x[0] not in paths),
                writable_roots=p.writable_roots, hide_unix_dirs=p.hide_unix_dirs,
                hide_root=p.hide_root, unset_env=p.unset_env, before=p.before,
                masked_sockets=tuple(x for x in p.masked_sockets if x not in paths))


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
    overlays: Sequence[tuple[str, str, bool]] = (),
) -> list[str]:
    """The ``bwrap`` command line for a plan (pure).

    ``new_session=False`` keeps an interactive command on its terminal; only
    safe with the seccomp filter, which refuses TIOCSTI and TIOCLINUX.
    ``overlays``: ``(source, target, writable)`` binds over the plan's mounts, in
    order (``sandbox agent``'s private state folder, ``runtime.agent_state``).
    """
    argv = [bwrap] if p.hide_root else [bwrap, "--ro-bind", "/", "/"]
    argv += ["--dev", "/dev", "--proc", "/proc"]
    # the sandbox's pid 1 is bwrap's own init, which runs without the seccomp
    # filter: its memory must not be writable by the command
    for mem in ("/proc/1/mem", "/proc/1/task/1/mem"):
        argv += ["--ro-bind", "/dev/null", mem]
    if p.hide_unix_dirs:  # where sockets live; the allowed ones are bound back ("sock")
        for d in UNIX_SOCKET_DIRS:
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
            # read-only: connect() needs no writable mount, and a listed folder must
            # not become a writable place outside allowWrite
            argv += ["--ro-bind", m.path, m.path]
        elif m.op == "link":
            argv += ["--symlink", m.kind, m.path]
    for source, target, writable in overlays:
        argv += ["--bind" if writable else "--ro-bind", source, target]
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
    argv += ["--chdir", cwd, "--", *gated(command, fds.gate, fds.ready)]
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


def gated(command: Sequence[str], gate: int | None, ready: int | None) -> list[str]:
    """The command behind the start gate (unchanged without the gate's fds)."""
    if gate is None or ready is None:
        return list(command)
    script = GATE_SCRIPT.format(gate=int(gate), ready=int(ready))
    # bash, not sh: dash takes only single-digit descriptors in redirections;
    # -p skips BASH_ENV, so nothing of the caller's runs before the gate opens.
    return [GATE_SHELL, "-p", "-c", script, "sandbox-gate", *command]


GATE_SHELL = "/bin/bash"


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
