"""The append-only, hash-chained audit log (one JSON line per record).

Every writer (hook, MCP server, approver, proxy, ``sandbox exec``) appends
through :class:`AuditLog`. Appends take an exclusive ``flock`` on a lock file
beside the log, so concurrent writers never interleave or fork the chain; the
kernel drops the lock when its holder dies, so a crashed writer never leaves a
stale lock behind (the lock file itself is only a rendezvous and may stay).

Each record carries ``seq``, ``ts`` (RFC 3339 UTC), ``event``, the caller's
fields (redacted first), ``prev`` (hex of the previous chain hash) and
``hash`` = SHA-256(prev digest || canonical record without ``hash``).

Durability: ``sync="always"`` fsyncs every append; ``sync="batch"`` fsyncs
every ``batch_size`` records or ``batch_interval`` seconds (checked on
append), on :meth:`flush`, :meth:`close` and at interpreter exit.

A write interrupted by a crash leaves one torn final line. The next append (or
``sandbox audit repair``) seals it: a newline ends the torn bytes and an
explicit ``audit_sealed`` record names their offset, length and SHA-256. This
module never truncates, rewrites or deletes anything already written. (Any
non-record bytes after the last intact record are sealed this way; records a
signed checkpoint covers cannot be hidden by it, since the seal takes their
place in the chain and the checkpoint no longer matches.)

Checkpoints are signed by whichever writer finds one due: every
``checkpoint_every`` records or ``checkpoint_interval`` seconds, measured from
the newest stored checkpoint so that one-shot writers (a hook call) share the
schedule. Signing imports ``cryptography`` (tens of milliseconds), so a
latency-critical one-shot writer may pass ``checkpoint_interval=None`` and
leave the timed checkpoints to a long-running writer or ``sandbox audit
checkpoint``. A checkpoint that cannot be signed never fails an append; it is
reported in ``checkpoint_error`` and by ``verify``.

Import cost matters (the hook imports this on its allow path): stdlib only;
signing checkpoints imports ``cryptography`` lazily in ``checkpoint``. Where the
chain ends is read by ``tail``; the platform file primitives and ``AuditError``
are in ``storage``.
"""

from __future__ import annotations

import _thread
import atexit
import os
import time

from agent_sandbox.audit import anchors
from agent_sandbox.audit.canonical import canonical, chain_hash, seal_line
from agent_sandbox.audit.redact import redact as _redact
from agent_sandbox.audit.segments import continued_tail, generation, rotate
from agent_sandbox.audit.storage import (
    BINARY,
    CLOEXEC,
    AuditError,
    datasync,
    fsync_dir,
    pread,
    try_lock,
    unlock,
    write_all,
)
from agent_sandbox.audit.tail import TailState, read_tail
from agent_sandbox.quickhash import sha256_hex
from agent_sandbox.repo_layout import default_audit_key

# Kept off the import path (the hook imports this module): typing, pathlib,
# datetime and threading are only named in annotations or imported on demand.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping
    from pathlib import Path
    from typing import Any, Literal

    SyncMode = Literal["always", "batch", "none"]
    Sink = Callable[[bytes], object] | str

LOG_NAME = "audit.jsonl"
LOCK_NAME = ".audit.lock"
CHECKPOINT_DIR = "checkpoints"
SEAL_EVENT = "audit_sealed"
RESERVED = frozenset({"seq", "ts", "event", "prev", "hash"})
_EVENT_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_.-")


def _event_name_ok(event: str) -> bool:
    """``^[a-z][a-z0-9_.-]{0,63}$`` without compiling an expression (the hook's path)."""
    return (0 < len(event) <= 64 and "a" <= event[0] <= "z"
            and all(c in _EVENT_CHARS for c in event))


_second_cache: list[Any] = [-1, ""]


def rfc3339(ts: float) -> str:
    """``ts`` (seconds since the epoch) as RFC 3339 UTC with microseconds."""
    sec, usec = divmod(round(ts * 1_000_000), 1_000_000)
    if _second_cache[0] != sec:
        _second_cache[1] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec))
        _second_cache[0] = sec
    return f"{_second_cache[1]}.{usec:06d}Z"


class AuditLog:
    """An append-only chained audit log in ``directory`` (file ``audit.jsonl``).

    Safe to use from several threads and processes at once. ``append`` returns
    the record exactly as written.

    - ``sync``: ``always`` (fsync each append), ``batch`` (every ``batch_size``
      records or ``batch_interval`` seconds, and on flush/close/exit) or ``none``.
    - ``checkpoint_every`` / ``checkpoint_interval``: sign a checkpoint every N
      records or T seconds (None disables either).
    - ``key_path``: the Ed25519 signing key (created 0600 on first use); default
      the user's state folder for a repository's log (never the repository), else
      ``<directory>/../audit-keys/<directory name>.ed25519``, apart from the log.
    - ``sink``: also send each checkpoint to a callable or POST it to a URL.
    - ``redact``: redact secrets before writing (leave on; off only for benchmarks).
    - ``lock_timeout``: how long to wait for a live writer before failing closed.
    - ``origin``: the checkpoint origin / key name (default derived from the key).
    - ``max_bytes``: rotate the file into a sealed segment once it is this large
      (``segments``); None never rotates. Any writer follows a rotation.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        sync: SyncMode = "always",
        batch_size: int = 256,
        batch_interval: float = 0.2,
        checkpoint_every: int | None = 1000,
        checkpoint_interval: float | None = 60.0,
        key_path: str | os.PathLike[str] | None = None,
        sink: Sink | None = None,
        redact: bool = True,
        lock_timeout: float = 10.0,
        origin: str | None = None,
        max_bytes: int | None = None,
    ) -> None:
        if sync not in ("always", "batch", "none"):
            raise AuditError(f"unknown sync mode {sync!r} (use always, batch or none)")
        self._dir = os.path.abspath(os.fspath(directory))
        self._log = os.path.join(self._dir, LOG_NAME)
        self._key = os.fspath(key_path) if key_path is not None else default_audit_key(self._dir)
        self.sync: SyncMode = sync
        self.batch_size = max(1, batch_size)
        self.batch_interval = batch_interval
        self.checkpoint_every = checkpoint_every
        self.checkpoint_interval = checkpoint_interval
        self.sink = sink
        self.redact = redact
        self.lock_timeout = lock_timeout
        self.origin = origin
        self.max_bytes = max_bytes
        self._gen = -1  # the rotations counted in the lock file when last looked
        self.sink_error: str | None = None
        self._mutex = _thread.RLock()
        self._pid = -1
        self._fd = -1
        self._rfd = -1
        self._lock_fd = -1
        self._tail: TailState | None = None
        self._pending = 0
        self._pending_since = 0.0
        self._path_checked = 0.0
        self._ckpt_size: int | None = None
        self._ckpt_wall = 0.0
        self._ckpt_retry_at = 0.0
        self.checkpoint_error: str | None = None
        self._signer: Any = None
        self._timer: Any = None  # threading.Event stopping the checkpoint timer
        try:
            os.makedirs(self._dir, mode=0o750, exist_ok=True)
        except OSError as exc:
            raise AuditError(f"cannot create audit directory {self._dir}: {exc}") from exc

    # Paths as pathlib objects for callers (pathlib is imported only when asked).
    @property
    def directory(self) -> Path:
        from pathlib import Path

        return Path(self._dir)

    @property
    def path(self) -> Path:
        from pathlib import Path

        return Path(self._log)

    @property
    def checkpoint_dir(self) -> Path:
        from pathlib import Path

        return Path(self._dir) / CHECKPOINT_DIR

    @property
    def key_path(self) -> Path:
        from pathlib import Path

        return Path(self._key)

    # -- files and locking -------------------------------------------------

    def _open(self) -> None:
        pid = os.getpid()
        if self._pid == pid and self._fd >= 0:
            return
        # After fork the inherited descriptors share the parent's open file (and
        # its lock): close this process's copies and open our own.
        for fd in (self._fd, self._rfd, self._lock_fd):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._fd = self._rfd = self._lock_fd = -1
        self._tail = None
        try:
            created = not os.path.exists(self._log)
            self._fd = os.open(
                self._log, os.O_WRONLY | os.O_APPEND | os.O_CREAT | CLOEXEC | BINARY, 0o640
            )
            self._rfd = os.open(self._log, os.O_RDONLY | CLOEXEC | BINARY)
            self._lock_fd = os.open(
                os.path.join(self._dir, LOCK_NAME),
                os.O_RDWR | os.O_CREAT | CLOEXEC | BINARY,
                0o640,
            )
            if created:
                fsync_dir(self._dir)
                if not os.path.isdir(os.path.join(self._dir, CHECKPOINT_DIR)):  # a new log
                    anchors.forget(self._dir)
        except OSError as exc:
            raise AuditError(f"cannot open audit log {self._log}: {exc}") from exc
        self._pid = pid

    def _lock(self) -> None:
        deadline = time.monotonic() + self.lock_timeout
        delay = 0.0005
        while True:
            try:
                if try_lock(self._lock_fd):
                    return
            except OSError as exc:
                raise AuditError(f"cannot lock audit log {self._log}: {exc}") from exc
            if time.monotonic() >= deadline:
                raise AuditError(
                    f"audit log {self._log} stayed locked for {self.lock_timeout:g}s by a "
                    "live writer; refusing to write without the lock"
                )
            time.sleep(delay)
            delay = min(delay * 2, 0.02)

    def _unlock(self) -> None:
        unlock(self._lock_fd)

    def _current_tail(self) -> TailState:
        st = os.fstat(self._fd)
        now = time.monotonic()
        rotated = generation(self._lock_fd)  # under the lock: another writer may have rotated
        if now - self._path_checked >= 0.25 or self._tail is None or rotated != self._gen:
            self._gen = rotated
            self._path_checked = now
            try:
                on_disk: os.stat_result | None = os.stat(self._log)
            except FileNotFoundError:
                on_disk = None
        else:
            on_disk = st
        if on_disk is None or on_disk.st_ino != st.st_ino:
            # The log was moved away or replaced: follow the path, never write to a ghost.
            # (The lock file is separate and stays held.)
            try:
                fd = os.open(
                    self._log, os.O_WRONLY | os.O_APPEND | os.O_CREAT | CLOEXEC | BINARY, 0o640
                )
                rfd = os.open(self._log, os.O_RDONLY | CLOEXEC | BINARY)
            except OSError as exc:
                raise AuditError(f"cannot reopen audit log {self._log}: {exc}") from exc
            os.close(self._fd)
            os.close(self._rfd)
            self._fd, self._rfd, self._tail = fd, rfd, None
            st = os.fstat(self._fd)
        tail = self._tail
        if tail is not None and tail.size == st.st_size and tail.ino == st.st_ino:
            return tail
        found = read_tail(self._rfd)
        return continued_tail(self._dir, found) if found.size == 0 else found

    # -- records -----------------------------------------------------------

    def _build(
        self, seq: int, prev: bytes, event: str, fields: dict[str, Any]
    ) -> tuple[dict[str, Any], bytes]:
        rec = fields  # the caller's private copy (see _prepare)
        rec["seq"] = seq
        rec["ts"] = rfc3339(time.time())
        rec["event"] = event
        rec["prev"] = prev.hex()
        try:
            body = canonical(rec)
        except (TypeError, ValueError) as exc:
            raise AuditError(f"audit record for {event!r} is not JSON-encodable: {exc}") from exc
        return rec, body

    def _prepare(self, event: str, fields: Mapping[str, Any]) -> dict[str, Any]:
        if not isinstance(event, str) or not _event_name_ok(event):
            raise AuditError(
                f"invalid audit event name {event!r}: use lower-case letters, digits and _"
            )
        bad = RESERVED.intersection(fields)
        if bad:
            raise AuditError(f"audit fields {sorted(bad)} are reserved and set by the log")
        if not isinstance(fields, dict):
            fields = dict(fields)
        clean: dict[str, Any] = _redact(fields) if self.redact else dict(fields)
        return clean  # a private copy: _build may fill it in place

    def append(self, event: str, **fields: Any) -> dict[str, Any]:
        """Append one record and return it as written."""
        return self.append_many([(event, fields)])[0]

    def append_many(self, items: Iterable[tuple[str, Mapping[str, Any]]]) -> list[dict[str, Any]]:
        """Append several records with one lock, one write and (at most) one fsync."""
        prepared = [(ev, self._prepare(ev, f)) for ev, f in items]
        if not prepared:
            return []
        with self._mutex:
            self._open()
            self._lock()
            try:
                written = self._append_locked(prepared, sealed_by="append")
            finally:
                self._unlock()
        return written[len(written) - len(prepared) :]  # without a seal record, if any

    def _append_locked(
        self, prepared: list[tuple[str, dict[str, Any]]], *, sealed_by: str
    ) -> list[dict[str, Any]]:
        tail = self._current_tail()
        seq, prev = tail.seq, tail.digest
        chunks: list[bytes] = []
        out: list[dict[str, Any]] = []
        items = list(prepared)
        if tail.torn_offset is not None:
            torn = pread(self._rfd, tail.size - tail.torn_offset, tail.torn_offset)
            if not torn.endswith(b"\n"):
                chunks.append(b"\n")
            items.insert(
                0,
                (
                    SEAL_EVENT,
                    {
                        "torn_offset": tail.torn_offset,
                        "torn_length": len(torn),
                        "torn_sha256": sha256_hex(torn),
                        "sealed_by": sealed_by,
                        "reason": "incomplete write left by an interrupted writer",
                    },
                ),
            )
        for event, fields in items:
            seq += 1
            rec, body = self._build(seq, prev, event, fields)
            prev = chain_hash(prev, body)
            chunks.append(seal_line(body, prev))
            rec["hash"] = prev.hex()
            out.append(rec)
        data = b"".join(chunks)
        write_all(self._fd, data)
        self._tail = TailState(tail.size + len(data), tail.ino, seq, prev)
        now = time.monotonic()
        if self._pending == 0:
            self._pending_since = now
            if self.sync == "batch":
                _BATCHING.add(self)  # flushed at exit if still pending
        self._pending += len(items)
        batch_due = (
            self._pending >= self.batch_size or now - self._pending_since >= self.batch_interval
        )
        if self.sync == "always" or (self.sync == "batch" and batch_due):
            self._sync()
        self._maybe_checkpoint(seq, prev, now)
        if self.max_bytes is not None and self._tail.size >= self.max_bytes:
            self._rotate(seq, prev, now)
        return out

    def _rotate(self, seq: int, head: bytes, now: float) -> None:
        """The full file into a sealed segment, once a checkpoint signs its head:
        never a segment whose end no signature covers."""
        if now < self._ckpt_retry_at:
            return
        try:
            if self._ckpt_size != seq:
                self._write_checkpoint(seq, head)
            rotate(self._dir, self._log, seq, self._lock_fd)
        except Exception as exc:  # the records stand; the file grows until it can rotate
            self.checkpoint_error = f"cannot rotate the log at {self.max_bytes} bytes: {exc}"
            self._ckpt_retry_at = now + 30.0
            return
        self._gen = -1  # this writer's descriptors name the segment now: the new file
        self._tail = self._current_tail()

    def _sync(self) -> None:
        if self._pending and self.sync != "none":
            datasync(self._fd)
        self._pending = 0
        _BATCHING.discard(self)

    def flush(self) -> None:
        """Make every record appended so far durable."""
        with self._mutex:
            if self._fd >= 0 and self._pid == os.getpid():
                self._sync()

    # -- checkpoints -------------------------------------------------------

    def _last_checkpoint(self) -> tuple[int, float]:
        """(size, wall-clock time) of the newest stored checkpoint; (0, 0.0) if none.

        Read without the checkpoint module (and so without cryptography or pathlib):
        this runs on a hook's first append. Unverified: it only schedules signing.
        """
        latest = os.path.join(self._dir, CHECKPOINT_DIR, "latest")
        try:
            with open(latest, "rb") as f:
                when = os.fstat(f.fileno()).st_mtime
                size = int(f.read(4096).split(b"\n", 2)[1])
        except (OSError, ValueError, IndexError):
            return 0, 0.0
        return size, when

    def _maybe_checkpoint(self, seq: int, head: bytes, now: float) -> None:
        every, interval = self.checkpoint_every, self.checkpoint_interval
        if every is None and interval is None:
            return
        if self._ckpt_size is None:
            # Shared across writers through the stored checkpoint, so short-lived
            # writers (one hook call each) still checkpoint every N records or T seconds.
            self._ckpt_size, self._ckpt_wall = self._last_checkpoint()
        behind = seq - self._ckpt_size
        if behind <= 0 or now < self._ckpt_retry_at:
            return
        due = (every is not None and behind >= every) or (
            interval is not None and time.time() - self._ckpt_wall >= interval
        )
        if not due:
            return
        self._ckpt_size, self._ckpt_wall = self._last_checkpoint()  # another writer may have signed
        if seq - self._ckpt_size <= 0:
            return
        try:
            self._write_checkpoint(seq, head)
            self.checkpoint_error = None
        except Exception as exc:
            # The records are written and durable; a checkpoint that cannot be signed
            # (unreadable key, full disk) must not make the append look failed. It is
            # reported here and by `verify` (records not covered by a checkpoint).
            self.checkpoint_error = f"cannot sign checkpoint: {exc}"
            self._ckpt_retry_at = now + 30.0  # retry later, not on every append

    def _write_checkpoint(self, seq: int, head: bytes) -> bytes:
        from agent_sandbox.audit import checkpoint as ck

        self._pending = max(self._pending, 1)
        self._sync()  # never sign records that are not yet durable
        if self._signer is None:
            self._signer = ck.load_or_create_signer(self.key_path, origin=self.origin)
            ck.publish_verifier(self.checkpoint_dir, self._signer)
        note: bytes = self._signer.sign_checkpoint(seq, head)
        ck.store(self.checkpoint_dir, seq, note)
        anchors.note(self._dir, seq, head)  # outside the log: what a rewrite cannot reach
        self._ckpt_size = seq
        self._ckpt_wall = time.time()
        if self.sink is not None:
            try:
                ck.send_to_sink(self.sink, note)
                self.sink_error = None
            except Exception as exc:  # the local checkpoint stands; report, never lose records
                self.sink_error = f"checkpoint sink failed: {exc}"
        return note

    def checkpoint(self, *, empty: bool = False) -> bytes | None:
        """Sign a checkpoint of the current head now (None for an empty log, unless
        ``empty``: then one of size 0, which says the log is anchored from its start)."""
        with self._mutex:
            self._open()
            self._lock()
            try:
                tail = self._current_tail()
                if tail.seq == 0 and not empty:
                    return None
                self._tail = tail
                return self._write_checkpoint(tail.seq, tail.digest)
            finally:
                self._unlock()

    def start_checkpoint_timer(self) -> None:
        """Sign due checkpoints from a background thread, even while no one appends.

        For long-running writers (proxy, MCP server, approver): without it, the
        records of an idle log stay unsigned until the next append.
        """
        import threading

        interval = self.checkpoint_interval
        if interval is None or interval <= 0:
            raise AuditError("a checkpoint timer needs checkpoint_interval > 0")
        if self._timer is not None:
            return
        stop = threading.Event()

        def run() -> None:
            while not stop.wait(min(interval / 4, 5.0)):
                try:
                    self._timer_tick(interval)
                except Exception as exc:  # keep ticking; report like any signing failure
                    self.checkpoint_error = f"cannot sign checkpoint: {exc}"

        thread = threading.Thread(target=run, name="audit-checkpoints", daemon=True)
        self._timer = stop
        thread.start()

    def _timer_tick(self, interval: float) -> None:
        with self._mutex:
            self._open()
            self._lock()
            try:
                tail = self._current_tail()
                size, when = self._last_checkpoint()
                if tail.seq > size and time.time() - when >= interval:
                    self._tail = tail
                    self._write_checkpoint(tail.seq, tail.digest)
            finally:
                self._unlock()

    # -- repair ------------------------------------------------------------

    def seal_torn_tail(self) -> dict[str, Any] | None:
        """Seal an interrupted final write with an explicit record; None if there is none."""
        with self._mutex:
            self._open()
            self._lock()
            try:
                self._tail = None
                tail = self._current_tail()
                if tail.torn_offset is None:
                    return None
                written = self._append_locked([], sealed_by="repair")
                self._sync()
                return written[0]
            finally:
                self._unlock()

    # -- lifecycle -----------------------------------------------------------

    def _close_fds(self) -> None:
        for fd in (self._fd, self._rfd, self._lock_fd):
            if fd >= 0 and self._pid == os.getpid():
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._fd = self._lock_fd = self._rfd = -1
        self._tail = None

    def close(self) -> None:
        """Flush pending records, stop the checkpoint timer and release the files."""
        if self._timer is not None:
            self._timer.set()
            self._timer = None
        with self._mutex:
            if self._fd >= 0 and self._pid == os.getpid():
                self._sync()
            self._close_fds()

    def __enter__(self) -> AuditLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: S110 - interpreter teardown; nothing left to report to
            pass


_BATCHING: set[AuditLog] = set()  # writers with records not yet fsynced


@atexit.register
def _flush_all() -> None:
    for log in list(_BATCHING):
        try:
            log.flush()
        except Exception:  # noqa: S110 - best effort at exit
            pass
