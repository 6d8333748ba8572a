"""The runs' records in the per-user lock folder: one a run (``runs/<id>``), locked
for as long as the run lives, with the processes of the run (the reaper leaves
live runs' processes alone); what says whether a run still lives
(``run_alive``: an owed sweep, a gVisor run's layers).

No placeholder is made any more (the broker refuses a protected name when a call
would create it; the gVisor backend publishes what its command wrote, judged).
Records of earlier releases may still list placeholders they made: a cleanup
removes those, except what a live run still relies on, never anything but an
empty file or an empty folder of the identity recorded, reached from ``/`` one
folder at a time without following any link.

The lock folder is read-only in every sandbox (``contract.state_paths``) and
must be a private folder of this user: checked before any record in it is read.

Record entries, each ending in a NUL: ``F<dev>:<ino>:<path>`` and ``D...`` a
file and a folder this run made, ``U...`` one it relies on (``f``, ``d``, ``u``
without the identity), ``p<pid>`` a process of the run.
"""

from __future__ import annotations

import fcntl
import os
import stat

from ...below_root import lstat as lstat_below
from ...below_root import open_folder
from ..failures import SandboxStartError
from ..process import suppress

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

Ident = tuple[int, int]  # (st_dev, st_ino)


class Entry:
    """One entry of a run's record: ``kind`` "f" (a file it made), "d" (a folder it
    made), "u" (a placeholder it relies on) or "p" (a process of it)."""

    __slots__ = ("ident", "kind", "path")

    def __init__(self, kind: str, path: str, ident: Ident | None = None) -> None:
        self.kind, self.path, self.ident = kind, path, ident

    def line(self) -> str:
        if self.ident is None:
            return f"{self.kind}{self.path}\0"  # paths hold no NUL
        return f"{self.kind.upper()}{self.ident[0]}:{self.ident[1]}:{self.path}\0"


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


class RunRecord:
    """This run's record, from its start (under the lock) to its removal; and the
    cleanup of placeholders earlier releases made."""

    def __init__(self, lock_dir: str) -> None:
        self.dir = private_dir(lock_dir)
        self.runs = private_dir(os.path.join(self.dir, "runs"))
        self.mutex = os.open(os.path.join(self.dir, "placeholders.mutex"),
                             os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        self.record = ""
        self.fd = -1

    def __enter__(self) -> RunRecord:
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
        """RunRecord other runs made or rely on, whether those runs still live or
        died before their cleanup (call inside ``with``). A plan that mounts on one of
        them must record that it relies on it (``create``'s ``relied``): a dead run's
        placeholder is otherwise removed by the next cleanup of any run, and the mount
        on it goes with the file, while this run's command still runs."""
        live, _, dead = self._scan()
        return live | {e.path for _, entries in dead for e in entries}

    def note_pid(self, pid: int) -> None:
        """Record a process of this run (the reaper leaves live runs' processes alone)."""
        if self.fd >= 0:
            os.write(self.fd, f"p{pid}\0".encode())

    def _scan(self) -> tuple[set[str], set[Ident], list[tuple[str, list[Entry]]]]:
        """(paths live runs rely on, their identities, [(record, entries)] of dead
        runs). Call with the mutex held."""
        live: set[str] = set()
        ids: set[Ident] = set()
        dead: list[tuple[str, list[Entry]]] = []
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
                    for e in entries:
                        if e.kind != "p":
                            live.add(e.path)
                            # an entry of an earlier release: what is there now
                            ident = e.ident if e.ident is not None else _identity(e.path)
                            if ident is not None:
                                ids.add(ident)
                    continue
                dead.append((path, [e for e in entries if e.kind in "fd"]))
            finally:
                os.close(fd)
        return live, ids, dead

    def cleanup(self) -> None:
        """Remove this run's placeholders and dead runs' ones nobody relies on; a
        placeholder a live run still relies on stays in its creator's record (now a
        dead run's), for the last run out to remove."""
        if self.fd < 0:
            os.close(self.mutex)
            return
        try:
            fcntl.flock(self.mutex, fcntl.LOCK_EX)
            live, ids, dead = self._scan()
            mine = [e for e in _entries(self.fd) if e.kind in "fd"]
            for record, entries in [*dead, (self.record, mine)]:
                kept = [e for e in reversed(entries)  # files before their folders
                        if _remove_unless_relied(e, live, ids)]
                kept.reverse()
                with suppress(OSError):
                    if kept:
                        _rewrite(record, kept)
                    else:
                        os.unlink(record)
        finally:
            os.close(self.fd)
            self.fd = -1
            os.close(self.mutex)


def _open_parent(path: str) -> tuple[int, str] | None:
    """The folder of the absolute ``path``, open (the caller closes it), reached
    from ``/`` without following any link, and the last name; None when a folder
    on the way is missing, a link or not a folder."""
    folder, name = os.path.split(path)
    if not os.path.isabs(path) or not name:
        return None
    try:
        return open_folder("/", folder.lstrip("/")), name
    except OSError:  # NotBelowRoot (a link, a non-folder) included
        return None


def _identity(path: str) -> Ident | None:
    """The identity of what is at the absolute ``path`` itself, reached without
    following any link (``below_root.lstat`` from ``/``); None when nothing is
    reached so."""
    if not os.path.isabs(path):
        return None
    try:
        st = lstat_below("/", path.lstrip("/"))
    except OSError:  # NotBelowRoot (a link, a non-folder) included
        return None
    return None if st is None else (st.st_dev, st.st_ino)


def _remove_unless_relied(e: Entry, live: set[str], ids: set[Ident]) -> bool:
    """Remove the placeholder ``e`` records, unless a live run relies on it (its
    path or its identity in a live run's record): True then (the entry stays in
    its record). Removed only when reached without following any link, still the
    one made (its identity, when recorded: then whatever it holds; else only when
    still empty), a folder only when empty; otherwise left in place and forgotten."""
    if e.path in live or (e.ident is not None and e.ident in ids):
        return True
    if (found := _open_parent(e.path)) is None:
        return False  # gone, or a link on the way: nothing of ours reached there
    dfd, name = found
    try:
        try:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except OSError:
            return False
        if (st.st_dev, st.st_ino) in ids:
            return True
        if e.ident is not None and (st.st_dev, st.st_ino) != e.ident:
            return False  # not the one this run made
        with suppress(OSError):
            if e.kind == "d" and stat.S_ISDIR(st.st_mode):
                os.rmdir(name, dir_fd=dfd)
            elif e.kind == "f" and stat.S_ISREG(st.st_mode) and (
                    st.st_size == 0 or e.ident is not None):
                # the one made (its identity): whatever it holds now came in through
                # another name for it (a hard link a command made), after the sweeps
                # that judge it; the protected name goes, that other name keeps it
                os.unlink(name, dir_fd=dfd)
        return False
    finally:
        os.close(dfd)


def _rewrite(record: str, entries: list[Entry]) -> None:
    tmp = f"{record}.new"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW,
                 0o600)
    try:
        os.write(fd, os.fsencode("".join(e.line() for e in entries)))
    finally:
        os.close(fd)
    os.rename(tmp, record)


def _entries(fd: int) -> list[Entry]:
    os.lseek(fd, 0, os.SEEK_SET)
    data = b""
    while chunk := os.read(fd, 65536):
        data += chunk
    out: list[Entry] = []
    for r in os.fsdecode(data).split("\0"):
        if len(r) < 2:
            continue
        if r[0] not in "FDU":
            out.append(Entry(r[0], r[1:]))
            continue
        dev, ino, path = [*r[1:].split(":", 2), "", ""][:3]
        if dev.isdigit() and ino.isdigit() and path:
            out.append(Entry(r[0].lower(), path, (int(dev), int(ino))))
    return out


_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


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
            pids.update(int(e.path) for e in _entries(fd)
                        if e.kind == "p" and e.path.isdigit())
        finally:
            os.close(fd)
    return pids


class OthersHeld:
    """``with OthersHeld(lock_dir, own) as theirs:`` the placeholders every other run
    made (live or dead), held still by the placeholders' mutex for the block: no run
    plans or removes one meanwhile. A sweep disarms inside it, sparing them: a
    placeholder another run made after this one was planned is no creation of this
    run's command, and moving it would take that run's read-only mount off its
    protected name. ``theirs(path)`` is true for such a placeholder that is still the
    empty regular file that run made (whatever a command wrote or put there is judged
    as usual)."""

    def __init__(self, lock_dir: str, own: str = "") -> None:
        self.dir, self.own, self.mutex = lock_dir, own, -1

    def __enter__(self) -> Callable[[str], bool]:
        made: dict[str, Ident | None] = {}
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
                        made.update((e.path, e.ident) for e in _entries(fd) if e.kind == "f")
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
            want = made[path]  # None: an earlier release's record, path only
            return (stat.S_ISREG(st.st_mode) and st.st_size == 0
                    and (want is None or want == (st.st_dev, st.st_ino)))

        return theirs

    def __exit__(self, *exc: object) -> None:
        if self.mutex >= 0:
            os.close(self.mutex)  # the lock goes with it
            self.mutex = -1


def run_alive(runs_dir: str) -> Callable[[str], bool]:
    """Whether the run of record ``name`` still runs (its record is locked)."""
    def alive(name: str) -> bool:
        try:
            fd = os.open(os.path.join(runs_dir, name), os.O_RDONLY | os.O_CLOEXEC
                         | os.O_NOFOLLOW)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return False
        except OSError:
            return True
        finally:
            os.close(fd)
    return alive
