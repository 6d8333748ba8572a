"""Placeholders: empty files and folders made on the host for protected names that
do not exist yet, so that a read-only mount can sit on them for one run.

Each run keeps a record in the per-user lock folder (``runs/<id>``), locked for
as long as the run lives: the placeholders it created, and the ones other runs
created that its mounts rely on. When a run ends it removes what it created and
what runs that died before it created, except what a live run still relies on
(unlinking a placeholder would detach that run's read-only mount). So a run's
placeholders are gone when it ends, whatever else is running.

The lock folder is read-only in every sandbox (``contract.state_paths``) and
must be a private folder of this user: checked before any record in it is read.
This module never removes anything but an empty file or an empty folder that a
record says a run created.
"""

from __future__ import annotations

import fcntl
import os
import stat

from .errors import SandboxStartError
from .process import suppress

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence


def private_dir(path: str) -> str:
    """Create ``path`` (mode 0700) if needed and check that it is this user's own
    private folder (not a symlink, not writable by others); raise otherwise."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
        raise SandboxStartError(
            f"{path} is not a private folder of this user (a symlink, another owner, or "
            "writable by others); remove it and run again")
    return path


class Placeholders:
    """This run's placeholders, from creation (under the lock) to removal."""

    def __init__(self, lock_dir: str) -> None:
        self.dir = private_dir(lock_dir)
        self.runs = private_dir(os.path.join(self.dir, "runs"))
        self.mutex = os.open(os.path.join(self.dir, "placeholders.mutex"),
                             os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        self.record = ""
        self.fd = -1
        self.created: list[tuple[str, str]] = []

    def __enter__(self) -> Placeholders:
        fcntl.flock(self.mutex, fcntl.LOCK_EX)
        if self.fd < 0:
            self.record = os.path.join(self.runs, f"{os.getpid()}.{os.urandom(6).hex()}")
            self.fd = os.open(self.record, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
                              | os.O_NOFOLLOW | os.O_APPEND, 0o600)
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self.mutex, fcntl.LOCK_UN)

    def others(self) -> set[str]:
        """Placeholders other runs made or rely on, whether those runs still live or
        died before their cleanup (call inside ``with``). A plan that mounts on one of
        them must record that it relies on it (``create``'s ``relied``): a dead run's
        placeholder is otherwise removed by the next cleanup of any run, and the mount
        on it goes with the file, while this run's command still runs."""
        live, dead = self._scan()
        return live | {p for _, entries in dead for _, p in entries}

    def create(self, items: Sequence[tuple[str, str]], relied: Iterable[str] = ()) -> set[str]:
        """Create what is missing (inside ``with``) and record it with the existing
        placeholders this run relies on; return the ones that cannot exist (this
        user may not create them, so neither can the sandboxed command)."""
        if self.fd < 0:
            raise RuntimeError("Placeholders.create outside its lock")
        impossible: set[str] = set()
        lines = [f"u{p}\0" for p in relied]
        present: set[str] = set()  # folders seen to exist (most placeholders share one)
        for path, kind in items:
            made = _make(path, kind, present)
            if made is None:
                impossible.add(path)
                continue
            self.created += made
            lines += [f"{k}{m}\0" for m, k in made]  # paths hold no NUL
        if lines:
            os.write(self.fd, os.fsencode("".join(lines)))
        return impossible

    def note_pid(self, pid: int) -> None:
        """Record a process of this run (the reaper leaves live runs' processes alone)."""
        if self.fd >= 0:
            os.write(self.fd, f"p{pid}\0".encode())

    def _scan(self) -> tuple[set[str], list[tuple[str, list[tuple[str, str]]]]]:
        """(paths live runs rely on, [(record, entries)] of dead runs). Call with
        the mutex held."""
        live: set[str] = set()
        dead: list[tuple[str, list[tuple[str, str]]]] = []
        for name in os.listdir(self.runs):
            path = os.path.join(self.runs, name)
            if path == self.record:
                continue
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
            except OSError:
                continue
            try:
                entries = _entries(fd)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:  # its run is alive
                    live.update(p for _, p in entries)
                    continue
                dead.append((path, [(k, p) for k, p in entries if k in "df"]))
            finally:
                os.close(fd)
        return live, dead

    def cleanup(self) -> None:
        """Remove this run's placeholders and dead runs' ones nobody relies on; a
        placeholder a live run still relies on stays in its creator's record (now a
        dead run's), for the last run out to remove."""
        if self.fd < 0:
            os.close(self.mutex)
            return
        try:
            fcntl.flock(self.mutex, fcntl.LOCK_EX)
            live, dead = self._scan()
            mine = [(k, p) for k, p in _entries(self.fd) if k in "df"]
            for record, entries in [*dead, (self.record, mine)]:
                kept = [(k, p) for k, p in entries if p in live]
                for kind, path in reversed(entries):
                    if path in live:
                        continue
                    with suppress(OSError):
                        if kind == "d":
                            os.rmdir(path)
                        else:
                            st = os.lstat(path)
                            if stat.S_ISREG(st.st_mode) and st.st_size == 0:
                                os.unlink(path)
                with suppress(OSError):
                    if kept:
                        _rewrite(record, kept)
                    else:
                        os.unlink(record)
        finally:
            os.close(self.fd)
            self.fd = -1
            os.close(self.mutex)


def _rewrite(record: str, entries: list[tuple[str, str]]) -> None:
    tmp = f"{record}.new"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW,
                 0o600)
    try:
        os.write(fd, os.fsencode("".join(f"{k}{p}\0" for k, p in entries)))
    finally:
        os.close(fd)
    os.rename(tmp, record)


def _entries(fd: int) -> list[tuple[str, str]]:
    os.lseek(fd, 0, os.SEEK_SET)
    data = b""
    while chunk := os.read(fd, 65536):
        data += chunk
    return [(r[0], r[1:]) for r in os.fsdecode(data).split("\0") if len(r) > 1]


def _make(path: str, kind: str, present: set[str] | None = None
          ) -> list[tuple[str, str]] | None:
    """Create a placeholder (and its missing parents: the planner asks only for
    paths inside a writable root); what was created, or None when this user may
    not create it (neither can the sandboxed command). ``present``: folders already
    seen to exist, which this adds to."""
    present = set() if present is None else present
    made: list[tuple[str, str]] = []
    parent = os.path.dirname(path)
    missing = []
    while parent != "/" and parent not in present and not os.path.lexists(parent):
        missing.append(parent)
        parent = os.path.dirname(parent)
    if parent not in present and os.path.realpath(parent) != parent:
        # a link above it (one an earlier command may have planted): made through it,
        # the placeholder and its folders would land wherever the link leads
        raise SandboxStartError(
            f"a folder above the protected path {path} is a link ({parent} leads to "
            f"{os.path.realpath(parent)}); no placeholder is made through a link: remove "
            "the link, or name the path it leads to in the settings")
    try:
        for d in reversed(missing):
            os.mkdir(d, 0o755)
            made.append((d, "d"))
        present.update(missing)
        present.add(parent)
        if kind == "d":
            os.mkdir(path, 0o755)
        else:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                             | os.O_CLOEXEC, 0o444))
        made.append((path, kind))
    except FileExistsError:
        pass
    except OSError as exc:
        if exc.errno in (1, 13, 30) and not made:  # EPERM, EACCES, EROFS
            return None
        raise SandboxStartError(
            f"cannot create the protected placeholder {path}: {exc.strerror}; "
            "make the directory writable or remove it from allowWrite"
        ) from None
    return made


def live_pids(runs_dir: str) -> set[int]:
    """Processes that live runs recorded (their records are locked)."""
    pids: set[int] = set()
    try:
        names = os.listdir(runs_dir)
    except OSError:
        return pids
    for name in names:
        try:
            fd = os.open(os.path.join(runs_dir, name), os.O_RDONLY | os.O_CLOEXEC
                         | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                continue  # nobody holds it: a dead run's
            except OSError:
                pass
            pids.update(int(p) for k, p in _entries(fd) if k == "p" and p.isdigit())
        finally:
            os.close(fd)
    return pids


class OthersHeld:
    """``with OthersHeld(lock_dir, own) as theirs:`` the placeholders every other run
    made (live or dead), held still by the placeholders' mutex for the block: no run
    plans or removes one meanwhile. A sweep disarms inside it, sparing them: a
    placeholder another run made after this one was planned is no creation of this
    run's command, and moving it would take that run's read-only mount off its
    protected name. ``theirs(path)`` is true for such a placeholder that is still an
    empty regular file (whatever a command wrote there is judged as usual)."""

    def __init__(self, lock_dir: str, own: str = "") -> None:
        self.dir, self.own, self.mutex = lock_dir, own, -1

    def __enter__(self) -> Callable[[str], bool]:
        made: set[str] = set()
        try:
            self.mutex = os.open(os.path.join(self.dir, "placeholders.mutex"),
                                 os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
            fcntl.flock(self.mutex, fcntl.LOCK_EX)
            runs = os.path.join(self.dir, "runs")
            for name in os.listdir(runs):
                path = os.path.join(runs, name)
                if path == self.own or os.path.basename(self.own) == name:
                    continue
                with suppress(OSError):
                    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
                    try:
                        made.update(p for k, p in _entries(fd) if k == "f")
                    finally:
                        os.close(fd)
        except OSError:
            pass  # no lock folder yet: no other run made anything

        def theirs(path: str) -> bool:
            if path not in made:
                return False
            try:
                st = os.lstat(path)
            except OSError:
                return False
            return stat.S_ISREG(st.st_mode) and st.st_size == 0

        return theirs

    def __exit__(self, *exc: object) -> None:
        if self.mutex >= 0:
            os.close(self.mutex)  # the lock goes with it
            self.mutex = -1
