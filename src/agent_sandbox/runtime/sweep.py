"""After a run: disarm protected names the command created deep in a writable root.

The mounts protect every protected name that exists (to a bounded depth) and
the top of each writable root. A command can still ``mkdir -p a/b/.git/hooks``
in a directory where no repository existed, or write below a protected name
deeper than the mounts reach. ``find_new`` walks the writable roots after the
command has ended (so nothing inside the sandbox is running) and reports what
was written under protected names during the run (by ``ctime``, which no
program can set back): a protected name created during the run as a whole;
in one that existed, the files written (for ``.git`` only ``config`` and
``hooks/``). ``disarm`` renames each to ``<name>.sandbox-quarantine-<time>``:
an inert name no agent or git will load, kept as evidence, never deleted.

It must never touch a path outside the writable roots, nor anything under a
protected name that was not written during the run.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterable, Sequence

from .bwrap import PROTECTED_NAMES

WALK_BUDGET = 200_000
# ctime uses the kernel's coarse clock, which can lag wall time by a tick
CLOCK_SLACK = 0.05


def _is_new(path: str, since: float) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if st.st_ctime < since:
        return False
    if os.path.isdir(path) and not os.path.islink(path):
        try:
            with os.scandir(path) as it:
                for e in it:
                    try:
                        if e.stat(follow_symlinks=False).st_ctime < since:
                            return False
                    except OSError:
                        continue
        except OSError:
            return False
    return True


def _changed(path: str, since: float) -> bool:
    try:
        return os.lstat(path).st_ctime >= since
    except OSError:
        return False


def _changed_inside(path: str, since: float, limit: int = 2000) -> list[str]:
    """Entries below a directory written at or after ``since`` (bounded walk)."""
    out: list[str] = []
    stack, seen = [path], 0
    while stack:
        d = stack.pop()
        try:
            with os.scandir(d) as it:
                entries = list(it)
        except OSError:
            continue
        for e in entries:
            seen += 1
            if seen > limit:
                return out
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            if st.st_ctime >= since and not e.is_dir(follow_symlinks=False):
                out.append(e.path)
            elif e.is_dir(follow_symlinks=False):
                stack.append(e.path)
    return out


def _violations(path: str, name: str, since: float) -> list[str]:
    """What the command wrote under one protected name found deep in a root.

    A name created during the run goes whole. In one that existed, only what
    was written goes: in ``.git`` just ``config`` and ``hooks/`` (objects, refs
    and the index are git's ordinary work), elsewhere any file written. Looking
    inside as well as at the name itself defeats moving an old directory into
    place and adding a hook to it.
    """
    if _is_new(path, since):
        return [path]
    if not os.path.isdir(path) or os.path.islink(path):
        return [path] if _changed(path, since) else []
    if name == ".git":
        out = [c for c in (os.path.join(path, "config"),) if _changed(c, since)]
        hooks = os.path.join(path, "hooks")
        if os.path.isdir(hooks) and not os.path.islink(hooks):
            out += _changed_inside(hooks, since)
        elif _changed(hooks, since):
            out.append(hooks)
        return out
    return _changed_inside(path, since)


def find_new(roots: Sequence[str], since: float, skip: Iterable[str] = (),
             budget: int = WALK_BUDGET, *, top: bool = False) -> tuple[list[str], bool]:
    """(paths to disarm, complete) below ``roots``; ``skip`` are mounted targets.

    ``top`` also checks the top of each root (the bwrap backend does not need
    to: placeholders and mounts protect it).
    """
    skipped = set(skip)
    found: list[str] = []
    seen = 0
    stack = [r for r in roots if os.path.isdir(r)]
    cutoff = since - CLOCK_SLACK
    while stack:
        d = stack.pop()
        try:
            with os.scandir(d) as it:
                entries = list(it)
        except OSError:
            continue
        for e in entries:
            seen += 1
            if seen > budget:
                return found, False
            if e.path in skipped:
                continue
            if e.name in PROTECTED_NAMES and (
                    e.name != "fish" or os.path.basename(d) == ".config"):
                if d in roots and not top:
                    continue  # the top of a root is covered by placeholders and mounts
                found += [p for p in _violations(e.path, e.name, cutoff) if p not in skipped]
                continue  # never walk on into a protected directory (e.g. .git/objects)
            try:
                if e.is_dir(follow_symlinks=False):
                    stack.append(e.path)
            except OSError:
                continue
    return found, True


def disarm(paths: Iterable[str], now: float | None = None) -> list[tuple[str, str]]:
    """Rename each new protected path to an inert quarantine name; (old, new) pairs."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now or time.time()))
    moved = []
    for p in paths:
        target = f"{p}.sandbox-quarantine-{stamp}"
        try:
            os.rename(p, target)
            moved.append((p, target))
        except OSError:
            continue
    return moved


INCOMPLETE = ("sandbox: warning: the writable roots are too large to check completely for "
              "new protected paths\n")
Recorder = Callable[[dict[str, object]], None]


def quarantine(roots: Sequence[str], since: float, skip: Iterable[str] = (), *,
               top: bool = False, recorder: Callable[[], Recorder] | None = None,
               late: bool = False, warn_incomplete: bool = True,
               ) -> tuple[list[tuple[str, str]], list[str]]:
    """``find_new`` then ``disarm``, each move recorded in the audit: (moved, notices).

    ``recorder`` opens the audit, only when something moved; when recording fails
    the rename has already happened, so the failure is a notice, never hidden.
    ``late``: the sweep a killed run owed (``settle``).
    """
    new, complete = find_new(roots, since, skip, top=top)
    moved = disarm(new)
    said = ("an earlier run ended before its check; it had created" if late
            else "the command created")
    notes = [f"sandbox: {said} the protected path {old}; moved to {target}\n"
             for old, target in moved]
    if warn_incomplete and not complete:
        notes.append(INCOMPLETE)
    if moved and recorder is not None:
        try:
            record = recorder()
            for old, target in moved:
                event: dict[str, object] = {"event_kind": "quarantine", "path": old,
                                            "moved_to": target}
                if late:
                    event["late"] = True
                record(event)
        except Exception as exc:  # the rename already happened; report, do not hide
            notes.append(f"sandbox: cannot record the quarantine in the audit: {exc}\n")
    return moved, notes


# A run that starts a sandbox leaves a marker here until its own sweep is done:
# a supervisor killed before its sweep (SIGKILL, the OOM killer) leaves it behind,
# and the next run of the user to finish does that sweep (``settle``).
OWED = "owed"
MARK = b"agent-sandbox-owed 1"


def owe(lock_dir: str, since: float, roots: Sequence[str], skip: Iterable[str]) -> str:
    """Leave the marker for one run; its path."""
    folder = os.path.join(lock_dir, OWED)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    path = os.path.join(folder, f"{os.getpid()}.{time.time_ns()}")
    data = b"\0".join([MARK, repr(since).encode(), *(b"R" + os.fsencode(r) for r in roots),
                       *(b"S" + os.fsencode(x) for x in skip)])
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW,
                 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    return path


def settle(lock_dir: str, recorder: Callable[[], Recorder] | None = None,
           out: Callable[[str], object] | None = None) -> list[tuple[str, str]]:
    """Do the sweeps that runs killed before theirs left owed (call holding the
    placeholder lock exclusively: no run of this user is alive then)."""
    folder = os.path.join(lock_dir, OWED)
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return []
    moved: list[tuple[str, str]] = []
    for name in names:
        path = os.path.join(folder, name)
        try:
            with open(path, "rb") as fh:
                fields = fh.read().split(b"\0")
        except OSError:
            continue
        if fields[:1] == [MARK] and len(fields) > 1:
            try:
                since = float(fields[1])
            except ValueError:
                since = 0.0  # unreadable: check everything written since ever
            roots = [os.fsdecode(f[1:]) for f in fields[2:] if f[:1] == b"R"]
            skip = [os.fsdecode(f[1:]) for f in fields[2:] if f[:1] == b"S"]
            done, notes = quarantine(roots, since, skip, recorder=recorder, late=True,
                                     warn_incomplete=False)
            moved += done
            for note in notes:
                if out:
                    out(note)
        with contextlib.suppress(OSError):
            os.unlink(path)
    return moved


class AuditOpener:
    """A ``recorder`` for ``quarantine``: opens the audit once, on first use; ``close``."""

    def __init__(self, directory: str | None = None) -> None:
        self.directory = directory
        self.record: Recorder | None = None
        self._close: Callable[[], None] | None = None

    def __call__(self) -> Recorder:
        if self.record is None:
            from .proxy import audit_recorder

            self.record, self._close = audit_recorder(self.directory)
        return self.record

    def close(self) -> None:
        if self._close is not None:
            self._close()
            self._close = None


def main(argv: list[str] | None = None) -> int:
    """``python -m agent_sandbox.runtime.sweep --since T --root R... [--skip P...]``.

    The native launcher runs this after a command when its own walk saw anything
    written under a protected name: disarm, record in the audit, tell the user.
    """
    import argparse
    import sys

    ap = argparse.ArgumentParser(prog="python -m agent_sandbox.runtime.sweep")
    ap.add_argument("--since", type=float, help="when the command started")
    ap.add_argument("--root", action="append", default=[], help="a writable root")
    ap.add_argument("--skip", action="append", default=[], help="a mounted path")
    ap.add_argument("--owed", metavar="LOCK_DIR",
                    help="do the sweeps earlier runs left owed in this lock folder")
    args = ap.parse_args(argv)
    if args.owed:
        return _settle_cli(args.owed)
    if args.since is None:
        ap.error("--since is required")
    audit = AuditOpener()
    try:
        _, notes = quarantine(args.root, args.since, args.skip, recorder=audit)
    finally:
        audit.close()
    sys.stderr.write("".join(notes))
    return 0


def _settle_cli(lock_dir: str) -> int:
    import sys

    audit = AuditOpener()
    try:
        settle(lock_dir, audit, sys.stderr.write)
    finally:
        audit.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
