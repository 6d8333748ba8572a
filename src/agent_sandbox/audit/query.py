"""Reading records back for ``show``, ``export`` and ``tail``: parse, filter, format.

Filtering and formatting are pure functions over parsed records; reading is a
thin generator over the file. Lines that are not records (a torn write) are
reported to the caller, never silently taken as records. Read-only. Every field is
agent-written text for all this module knows: the table shows each through
``display.printable`` (a terminal escape, a carriage return or an OSC 52 clipboard
write in a command reaches the terminal as a visible escape).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agent_sandbox.audit.log import LOG_NAME
from agent_sandbox.audit.storage import AuditError
from agent_sandbox.display import printable


def parse_time(text: str) -> datetime:
    """RFC 3339 / ISO 8601 timestamp (``Z`` or offset; naive means UTC)."""
    try:
        dt = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError as exc:
        raise AuditError(f"not an RFC 3339 time: {text!r} (e.g. 2025-01-31T12:00:00Z)") from exc
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


@dataclass(frozen=True)
class Filter:
    request_id: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    verdict: str | None = None
    event: str | None = None

    def __call__(self, rec: dict[str, Any]) -> bool:
        if self.request_id is not None and rec.get("request_id") != self.request_id:
            return False
        if self.verdict is not None and rec.get("verdict") != self.verdict:
            return False
        if self.event is not None and rec.get("event") != self.event:
            return False
        if self.since is not None or self.until is not None:
            try:
                ts = parse_time(str(rec.get("ts", "")))
            except AuditError:
                return False
            if self.since is not None and ts < self.since:
                return False
            if self.until is not None and ts > self.until:
                return False
        return True


def log_path(directory: str | os.PathLike[str]) -> Path:
    path = Path(directory) / LOG_NAME
    if not path.is_file():
        raise AuditError(f"no audit log in {directory} ({LOG_NAME} not found)")
    return path


def iter_records(
    path: Path, on_bad: Callable[[int, bytes], None] | None = None
) -> Iterator[dict[str, Any]]:
    """Parsed records in chain order; ``on_bad(line_no, line)`` for lines that are
    not records. The active file of a log is read after its sealed segments
    (``segments``), and line numbers count on through them."""
    from agent_sandbox.audit.segments import chain_files

    files = chain_files(str(path.parent), str(path)) if path.name == LOG_NAME else [str(path)]
    n = 0
    for name in files:
        with open(name, "rb") as f:
            for line in f:
                n += 1
                try:
                    rec = json.loads(line)
                except ValueError:
                    rec = None
                if not isinstance(rec, dict) or not line.endswith(b"\n"):
                    if on_bad is not None:
                        on_bad(n, line)
                    continue
                yield rec


_TABLE_COLS = ("seq", "ts", "event", "request_id", "verdict")
_SKIP_DETAIL = frozenset({*_TABLE_COLS, "prev", "hash"})


def _detail(rec: dict[str, Any], width: int = 80) -> str:
    parts = []
    for k in sorted(rec):
        if k in _SKIP_DETAIL:
            continue
        v = rec[k]
        s = v if isinstance(v, str) else json.dumps(v, ensure_ascii=False, separators=(",", ":"))
        parts.append(printable(f"{k}={s}"))
    text = " ".join(parts)
    return text if len(text) <= width else text[: width - 1] + "\u2026"


def _cell(v: Any) -> str:
    return "" if v is None else printable(v)


def format_table(records: Iterable[dict[str, Any]]) -> str:
    """A fixed-column text table (seq, time, event, request, verdict, details)."""
    rows = [[_cell(r.get(c)) for c in _TABLE_COLS] + [_detail(r)] for r in records]
    header = ["SEQ", "TIME", "EVENT", "REQUEST", "VERDICT", "DETAILS"]
    widths = [max([len(header[i])] + [len(row[i]) for row in rows]) for i in range(5)]
    out = []
    for row in [header, *rows]:
        out.append("  ".join(c.ljust(widths[i]) for i, c in enumerate(row[:5])) + "  " + row[5])
    return "\n".join(line.rstrip() for line in out) + "\n"


def follow(
    path: Path,
    *,
    last: int = 10,
    poll: float = 0.2,
    stop: Callable[[], bool] = lambda: False,
) -> Iterator[bytes]:
    """Yield the last ``last`` complete lines, then each new complete line as it is
    written, on into the next file when the log rotates (``segments``)."""
    f = open(path, "rb")  # closed in the finally, or replaced on rotation
    try:
        data = f.read()
        end = data.rfind(b"\n") + 1
        lines = data[:end].splitlines(keepends=True)
        yield from lines[-last:] if last > 0 else []
        f.seek(end)
        buf = b""
        while not stop():
            chunk = f.read()
            if not chunk and _rotated(f, path):
                # the file became a sealed segment (all of it read now): the new one
                f.close()
                f = open(path, "rb")
                continue
            if not chunk:
                time.sleep(poll)
                continue
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                yield line + b"\n"
    finally:
        f.close()


def _rotated(f: Any, path: Path) -> bool:
    """Whether ``path`` now names another file than the open ``f`` (a rotation)."""
    try:
        return os.stat(path).st_ino != os.fstat(f.fileno()).st_ino
    except FileNotFoundError:
        return False
