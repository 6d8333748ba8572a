"""After a run: disarm protected names the command created in a writable root.

Under bubblewrap the broker refuses every protected name when a call would
write it, and records the git folders the command made (``made_repos``): only
those are judged, a repository staying when ``gitmeta.check_new_git_dir`` finds
nothing that would make host-side git run a program (what ``git init``
writes). The gVisor backend, which has no broker, walks the writable roots
(``find_new``) and compares with the identities recorded before the run
(``identity``: device and inode, and for anything but a folder its change time
and size, which no unprivileged process can set back): an entry with the same
identity is never touched; bytecode in ``__pycache__`` the run wrote is
removed (a cache); anything else new is judged like any protected name.

What is disarmed is renamed to ``<name>.sandbox-quarantine-<time>``: an inert
name no agent, shell or git will load, kept as evidence, never deleted. It
never touches a path outside the writable roots. A run killed before its sweep
leaves it owed (``owe``), with its record, in the lock folder no sandbox can
write; the next run of the user to finish does it (``settle``).
"""

from __future__ import annotations

import errno
import os
import stat
import time

from agent_sandbox import protected

from ..process import suppress
from . import gitmeta
from .fsview import RealFs, SweepFs
from .globs import under as _under
from .made_repos import made_repos
from .plan import _protected_entries

TYPE_CHECKING = False  # collections.abc would load collections on the exec fast path
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

    from .plan import Plan

    Recorder = Callable[[dict[str, object]], None]

Identity = tuple[int, ...]
# A bytecode file the run wrote: Python would run it instead of the unchanged
# source beside it (a change no diff shows). Removed, not kept: it is a cache.
CACHE = "bytecode written during the run"
# Bytecode outside __pycache__: imported when no source is beside it (a
# sourceless json.pyc beside a script shadows the standard library). Kept.
BYTECODE = "bytecode made or changed during the run (Python imports it without a source)"
SITE_LINK = "a link named as a site folder, made or changed during the run"


def identity(st: os.stat_result) -> Identity:
    """What makes an entry the one recorded, from its ``lstat``: (device, inode,
    change time, size). An inode number alone is no identity: a file rewritten
    in place keeps it, and a freed one is handed out again to the next file
    made. The change time is set by the kernel on every change of content, link
    count, mode or name, and no unprivileged process can set it back.

    A folder is (device, inode, 0, 0): its change time moves with every entry
    made in it (a git directory's on each commit, an editor's folder when the
    user saves on the host) and what is inside is judged entry by entry; every
    protected folder that existed is a mount point for the run (a read-only
    bind, or the bind onto itself that pins a folder holding one), which can be
    neither removed nor renamed, so its inode number is never freed."""
    if stat.S_ISDIR(st.st_mode):
        return (st.st_dev, st.st_ino, 0, 0)
    return (st.st_dev, st.st_ino, st.st_ctime_ns, st.st_size)


def identities(paths: Iterable[str]) -> dict[str, Identity]:
    """``identity`` of each path that exists, taken through folders opened one by one
    without following symlinks (a path with a link in it, or one that changes
    while it is taken, has none: it is not what was listed below its root)."""
    out: dict[str, Identity] = {}
    fds: dict[str, int | None] = {}

    def folder(d: str) -> int | None:
        if d in fds:
            return fds[d]
        fd: int | None = None
        try:
            if d == "/":
                fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            else:
                up = folder(os.path.dirname(d))
                if up is not None:
                    fd = os.open(os.path.basename(d), _DIR_FLAGS, dir_fd=up)
        except OSError:
            fd = None
        fds[d] = fd
        return fd

    try:
        for p in paths:
            if not p.startswith("/") or p in out:
                continue
            p = os.path.normpath(p)
            d, name = os.path.split(p)
            fd = folder(d) if name else None
            if fd is None:
                continue
            try:
                out[p] = identity(os.stat(name, dir_fd=fd, follow_symlinks=False))
            except OSError:
                continue
    finally:
        for fd in fds.values():
            if fd is not None:
                os.close(fd)
    return out


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def measure(plan: Plan, relied: Iterable[str]) -> tuple[set[str], dict[str, Identity]]:
    """What a run's sweep judges by, taken when it is planned: the absent
    protected names its read-only mounts sit on (its own and those it relies on: one
    removed meanwhile takes its mount with it, and what stands there afterwards is
    the command's), and the identities of those and of the protected entries the
    plan found."""
    guarded = {x for x, _ in plan.absent} | set(relied)
    return guarded, identities([*plan.before, *sorted(guarded - set(plan.before))])


def spared(plan: Plan, guarded: Iterable[str]) -> list[str]:
    """The paths a run's sweep never judges as new (``find_new``'s ``skip``), the
    same for its own sweep, the owed one of a killed run and gVisor's: where its
    read-only and hidden mounts sat (the command could not write there: a change
    there is the host's own), but not the placeholders it guards (``measure``)."""
    held = set(guarded)
    return [m.path for m in plan.mounts if m.op in ("ro", "hide") and m.path not in held]


def find_new(roots: Sequence[str], before: Mapping[str, Identity], home: str,
             skip: Iterable[str] = ()) -> list[tuple[str, str]]:
    """(path, why) of each protected entry the run created that must be disarmed.
    An entry that cannot be judged (a loop, nesting too deep) is disarmed too."""
    skipped = set(skip)
    fs = SweepFs()
    found: list[tuple[str, str]] = []
    entries = [(p, k) for w in roots if os.path.isdir(w)
               for p, k in _protected_entries(fs, w, home)]
    kinds = dict(entries)
    now = identities(p for p, _ in entries)
    # folders that existed, wherever they are now: a folder is judged by its inode
    # (see ``identity``), and one recorded before the run is never new
    existed = {i for i in before.values() if i[2:] == (0, 0)}
    for path, ident in now.items():
        kind = kinds.get(path)
        if kind == "c":
            if before.get(path) != ident:
                found.append((path, CACHE))
            continue
        if kind == "m":
            continue  # kept read-only by the plan when it existed (see bwrap._pth_modules)
        if kind in ("b", "k"):
            if before.get(path) != ident:
                found.append((path, BYTECODE if kind == "b" else SITE_LINK))
            continue
        gitdir = kinds.get(path) == "g" or (
            os.path.basename(path) == protected.GIT_DIR and os.path.isdir(path)
            and not os.path.islink(path))
        if ident in existed and before.get(path) != ident and path not in skipped:
            continue  # a folder that existed under another name: never moved
        if path in skipped or before.get(path) == ident:
            if gitdir:
                try:
                    found += _new_inside(fs, path, before, skipped)
                except (gitmeta.GitMetaError, OSError, RecursionError) as exc:
                    found += [(p, f"git metadata that cannot be judged ({exc})")
                              for p in _unjudged(path, before)]
            continue
        if gitdir:
            try:
                why = gitmeta.check_new_git_dir(fs, path)
            except (gitmeta.GitMetaError, OSError, RecursionError) as exc:
                why = f"it cannot be judged ({exc})"
            if why and kinds.get(path) == "g":
                # a bare repository: git needs its HEAD (and takes objects/ and refs/
                # through commondir); the rest of the folder stays where it is
                marks = [os.path.join(path, m) for m in gitmeta.GIT_DIR_MARKS
                         if os.path.lexists(os.path.join(path, m))]
                found += [(m, f"a git directory made during the run: {why}") for m in marks]
            elif why:
                found.append((path, f"a repository made during the run: {why}"))
            continue
        if os.path.basename(path) == protected.GIT_DIR:
            found.append((path, "a .git file or link made during the run"))
            continue
        if kind == "p" and _plain_venv_file(path, roots):
            continue  # what ``python -m venv`` makes: the host's own interpreter
        found.append((path, "a protected name made during the run"))
    return found


# Line breaks Python's readers see besides "\n" (str.splitlines, universal newlines)
_OTHER_BREAKS = frozenset("\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029\x00")


def _resolved(path: str) -> str | None:
    """Where ``path`` leads, or None when the kernel would not follow it there: a
    chain of more links than it follows (40), which Python's ``realpath`` still
    walks, one stack frame per link, until it raises ``RecursionError``."""
    try:
        os.stat(path)  # ELOOP past the kernel's limit
        return os.path.realpath(path)
    except (OSError, ValueError, RecursionError):
        return None


def _installed_pythons() -> tuple[str, ...]:
    """Where the host's own Pythons live: the system's (``/usr``) and the one
    running this (``sys.base_prefix``). Never merely "outside this run's roots":
    another repository, or a client's private view under ``sandbox agent``, is
    outside them and still written by sandboxed commands."""
    import sys

    return tuple(p for p in dict.fromkeys(("/usr", os.path.realpath(sys.base_prefix)))
                 if p != "/")


def _plain_venv_file(path: str, roots: Sequence[str]) -> bool:
    """Whether a virtualenv's start-up file the run made runs nothing the command
    chose, so that a virtualenv made inside a run stays usable: an interpreter
    link (``bin/python3``) that resolves to an installed Python of the host
    (``_installed_pythons``) outside every writable root, or a ``pyvenv.cfg`` whose
    every ``home`` is such a folder. Read to judge only; anything else (activate
    scripts, a copied interpreter, a Python elsewhere) is quarantined."""
    name = os.path.basename(path)
    installed = _installed_pythons()

    def outside(p: str) -> bool:
        real = _resolved(p)
        return (real is not None and any(_under(real, t) for t in installed)
                and not any(_under(real, r) for r in roots))

    if name.startswith("python"):
        real = _resolved(path)
        return (real is not None and os.path.islink(path) and os.path.isfile(real)
                and outside(real) and os.path.basename(real).startswith(("python", "pypy")))
    if name != "pyvenv.cfg":
        return False
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size > 4096:
                return False
            text = os.read(fd, 4097).decode("utf-8")
        finally:
            os.close(fd)
    except (OSError, UnicodeDecodeError):
        return False
    if _OTHER_BREAKS.intersection(text):
        return False
    for line in text.split("\n"):
        key, sep, value = line.partition("=")
        if sep and key.strip().lower() == "home":
            home = value.strip()
            if not home.startswith("/") or not outside(home):
                return False
    return True


def _unjudged(gitdir: str, before: Mapping[str, Identity]) -> list[str]:
    """What a run may have added to a git directory that could not be walked."""
    out = []
    for sub in ("commondir", "config.worktree", "modules", "worktrees"):
        p = os.path.join(gitdir, sub)
        if os.path.lexists(p) and p not in before:
            out.append(p)
    return out


def _new_inside(fs: RealFs, gitdir: str, before: Mapping[str, Identity],
                skipped: set[str]) -> list[tuple[str, str]]:
    """Git metadata added during the run to a git directory that existed (the
    run's own placeholders, in ``skipped``, are not)."""
    out: list[tuple[str, str]] = []
    for sub in ("modules", "worktrees"):
        p = os.path.join(gitdir, sub)
        if os.path.islink(p):
            out.append((p, f"{sub} made a link during the run"))
    ro, _ = gitmeta.protect_git_dir(fs, gitdir, os.path.dirname(gitdir))
    judged: set[str] = set()
    for p in ro:
        if p in before or p in skipped:
            continue
        rel = os.path.relpath(p, gitdir)
        if rel.startswith("modules/"):
            module = os.path.dirname(p)
            if not any(q.startswith(module + "/") for q in before):
                if module not in judged:
                    judged.add(module)
                    why = gitmeta.check_new_git_dir(fs, module)
                    if why:
                        out.append((module, f"a submodule made during the run: {why}"))
                continue
        if rel.startswith("worktrees/"):
            # a linked worktree's git directory: one the run made is judged whole
            # (what ``git worktree add`` writes passes); in one that was there, a
            # new config.worktree or commondir is like other new git metadata
            admin = os.path.join(gitdir, *rel.split("/")[:2])
            if not any(q.startswith(admin + "/") for q in before):
                if admin not in judged:
                    judged.add(admin)
                    why = gitmeta.check_new_worktree(fs, admin, gitdir)
                    if why:
                        out.append((admin, f"a worktree made during the run: {why}"))
                continue
        out.append((p, "git metadata made during the run"))
    return out


def disarm(paths: Iterable[str], roots: Sequence[str], seen: Mapping[str, Identity],
           now: float | None = None, *, remove: bool = False
           ) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """Rename each path to an inert quarantine name: (moved (old, new), failed (path,
    why)). The rename goes through descriptors opened from the writable root without
    following symlinks, and only when the entry is still the one judged (same
    identity): a concurrent sandbox cannot steer it outside the roots."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now or time.time()))
    moved: list[tuple[str, str]] = []
    failed: list[tuple[str, str]] = []
    for p in paths:
        root = next((r for r in sorted(roots, key=len, reverse=True)
                     if p.startswith(r.rstrip("/") + "/")), None)
        if root is None:
            failed.append((p, "outside the writable roots"))
            continue
        try:
            new = _rename_inside(root, p, seen.get(p), stamp, remove)
            moved.append((p, new))
        except OSError as exc:
            failed.append((p, exc.strerror or str(exc)))
    return moved, failed


def _rename_inside(root: str, path: str, ident: Identity | None, stamp: str,
                   remove: bool = False) -> str:
    parts = os.path.relpath(path, root).split("/")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                          dir_fd=fd)
            os.close(fd)
            fd = nxt
        name = parts[-1]
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        if ident is not None and identity(st) != ident:
            raise OSError(0, "it changed after it was judged")
        if remove and stat.S_ISREG(st.st_mode):
            os.unlink(name, dir_fd=fd)
            return ""
        for target in (f"{name}.sandbox-quarantine-{stamp}-{os.urandom(4).hex()}",
                       f".sbq-{os.urandom(6).hex()}"):
            try:
                os.rename(name, target, src_dir_fd=fd, dst_dir_fd=fd)
                return os.path.join(os.path.dirname(path), target)
            except OSError as exc:
                if exc.errno not in (errno.ENAMETOOLONG, errno.EEXIST, errno.ENOTEMPTY):
                    raise
        raise OSError(errno.EEXIST, "no quarantine name could be used")
    finally:
        os.close(fd)


def quarantine(roots: Sequence[str], before: Mapping[str, Identity], home: str,
               skip: Iterable[str] = (), *, recorder: Callable[[], Recorder] | None = None,
               late: bool = False, lock_dir: str | None = None, own: str = "",
               repos: Mapping[str, tuple[int, int]] | None = None
               ) -> tuple[list[tuple[str, str]], list[str]]:
    """``find_new`` then ``disarm``, each move recorded in the audit: (moved, notices).

    ``recorder`` opens the audit when something moved or failed; when recording
    fails the rename has already happened, so the failure is a notice, never
    hidden. A path that could not be moved is a notice and an audit record.
    ``late``: the sweep a killed run owed (``settle``). ``lock_dir``: the runs'
    lock folder, whose placeholders of other runs (``own`` is this run's record)
    are spared, held still while the sweep disarms (``placeholders.OthersHeld``).
    ``repos``: the git folders a brokered run made (``made_repos``), judged
    instead of walking the roots: the broker refused every other protected name
    when a call would have written it, so nothing else can be new.
    """
    from .run_records import OthersHeld

    found = find_new(roots, before, home, skip) if repos is None else made_repos(repos)
    with OthersHeld(lock_dir, own) if lock_dir else _NoneHeld() as theirs:
        found = [(p, why) for p, why in found if not theirs(p)]
        caches = [p for p, why in found if why == CACHE]
        new = [(p, why) for p, why in found if why != CACHE]
        why = dict(new)
        seen = identities(p for p, _ in found)
        moved, failed = disarm([p for p, _ in new], roots, seen)
        removed, unremoved = disarm(caches, roots, seen, remove=True)
    failed += unremoved
    why.update((p, CACHE) for p in caches)
    said = ("an earlier run ended before its check; it had created" if late
            else "the command created")
    notes = [f"sandbox: {said} the protected path {old} ({why[old]}); moved to {target}\n"
             for old, target in moved]
    if removed:
        notes.append(f"sandbox: removed {len(removed)} bytecode file(s) the command wrote "
                     "(Python writes them again from the source)\n")
    notes += [f"sandbox: WARNING: {said} the protected path {p} ({why[p]}) and it could not "
              f"be moved ({err}); do not run git or other tools there before removing it\n"
              for p, err in failed]
    if (moved or failed) and recorder is not None:
        try:
            record = recorder()
            for old, target in moved:
                event: dict[str, object] = {"event_kind": "quarantine", "path": old,
                                            "moved_to": target, "reason": why[old]}
                if late:
                    event["late"] = True
                record(event)
            for p, err in failed:
                record({"event_kind": "quarantine", "path": p, "reason": why[p],
                        "failed": err, "late": late})
        except Exception as exc:  # the rename already happened; report, do not hide
            notes.append(f"sandbox: cannot record the quarantine in the audit: {exc}\n")
    return moved, notes


class _NoneHeld:
    """No other run's placeholders to spare (a sweep with no lock folder)."""

    def __enter__(self) -> Callable[[str], bool]:
        return lambda path: False

    def __exit__(self, *exc: object) -> None:
        return None


# A run that starts a sandbox leaves a marker here until its own sweep is done:
# a supervisor killed before its sweep (SIGKILL, the OOM killer) leaves it behind,
# and the next run of the user to finish does that sweep (``settle``).
OWED = "owed"
MARK = b"agent-sandbox-owed 3"
MARK_V2 = b"agent-sandbox-owed 2"  # an older release's: identities were (device, inode)


def owe(lock_dir: str, name: str, home: str, roots: Sequence[str],
        before: Mapping[str, Identity], skip: Iterable[str],
        container: tuple[str, str] | None = None, brokered: bool = False) -> str:
    """Leave the marker for one run (``name``: its run record's); its path.
    ``container``: (API URL, name) of the container the command runs in, which
    outlives a killed caller: ended before the owed sweep (``settle``'s ``end``).
    ``brokered``: a run whose broker records the git folders it makes; each is
    added to the marker as it is made (``owe_repo``), and the owed sweep judges
    those alone (``made_repos``)."""
    folder = os.path.join(lock_dir, OWED)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    path = os.path.join(folder, name)
    data = b"\0".join([MARK, b"H" + os.fsencode(home),
                       *([b"U" + os.fsencode(container[0]), b"N" + os.fsencode(container[1])]
                         if container else []),
                       *([b"K"] if brokered else []),
                       *(b"R" + os.fsencode(r) for r in roots),
                       *(b"S" + os.fsencode(x) for x in skip),
                       *(b"B" + b"".join(b"%d:" % x for x in ident) + os.fsencode(p)
                         for p, ident in before.items())])
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW,
                 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    return path


def owe_repo(marker: str, path: str, ident: tuple[int, int]) -> None:
    """Add a git folder a brokered run just made to its owed marker."""
    fd = os.open(marker, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW)
    try:
        os.write(fd, b"\0G%d:%d:" % ident + os.fsencode(path))
    finally:
        os.close(fd)


def settle(lock_dir: str, recorder: Callable[[], Recorder] | None = None,
           out: Callable[[str], object] | None = None,
           alive: Callable[[str], bool] | None = None,
           end: Callable[[str, str, str], None] | None = None) -> list[tuple[str, str]]:
    """Do the sweeps that runs killed before theirs left owed. ``alive(name)``
    says whether the run that left a marker still runs (its marker is skipped);
    ``end(url, name, home)`` ends the container a killed gVisor run left running."""
    folder = os.path.join(lock_dir, OWED)
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return []
    moved: list[tuple[str, str]] = []
    for name in names:
        if alive is not None and alive(name):
            continue
        path = os.path.join(folder, name)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
            try:
                data = b""
                while chunk := os.read(fd, 1 << 16):
                    data += chunk
            finally:
                os.close(fd)
        except OSError:
            continue
        fields = data.split(b"\0")
        if fields[:1] in ([MARK], [MARK_V2]):
            size = 4 if fields[0] == MARK else 2  # numbers in each identity
            home = next((os.fsdecode(f[1:]) for f in fields if f[:1] == b"H"), "/")
            roots = [os.fsdecode(f[1:]) for f in fields[1:] if f[:1] == b"R"]
            skip = [os.fsdecode(f[1:]) for f in fields[1:] if f[:1] == b"S"]
            before: dict[str, Identity] = {}
            for f in fields[1:]:
                if f[:1] == b"B":
                    with suppress(ValueError):
                        *nums, p = f[1:].split(b":", size)
                        ident = tuple(int(x) for x in nums)
                        if len(ident) != size:
                            continue
                        if size == 2:  # as the older release judged: the same inode
                            now = identities([os.fsdecode(p)]).get(os.fsdecode(p))
                            ident = now if now is not None and now[:2] == ident else ident
                        before[os.fsdecode(p)] = ident
            url = next((os.fsdecode(f[1:]) for f in fields if f[:1] == b"U"), "")
            box = next((os.fsdecode(f[1:]) for f in fields if f[:1] == b"N"), "")
            if box:  # a container still running the command: ended first, or no sweep
                if end is None:
                    raise OSError(errno.EBUSY, f"the container {box} of a killed run may "
                                  "still run; a gVisor run ends it")
                end(url, box, home)
            repos: dict[str, tuple[int, int]] | None = None
            if b"K" in fields:
                repos = {}
                for f in fields[1:]:
                    if f[:1] == b"G":
                        with suppress(ValueError):
                            dev, ino, p = f[1:].split(b":", 2)
                            repos[os.fsdecode(p)] = (int(dev), int(ino))
            done, notes = quarantine(roots, before, home, skip, recorder=recorder, late=True,
                                     lock_dir=lock_dir, own=name, repos=repos)
            moved += done
            for note in notes:
                if out:
                    out(note)
        with suppress(OSError):
            os.unlink(path)
    return moved
