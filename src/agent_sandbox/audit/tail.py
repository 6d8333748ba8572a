"""Where the audit chain ends in the file: the last intact record, and the torn
region an interrupted write left after it.

Reads only; a torn region is reported, never repaired here (``AuditLog`` seals
it with an explicit record). It never takes a line whose hash does not match
its own ``prev`` for the end of the chain.
"""

from __future__ import annotations

import os

from agent_sandbox.audit.canonical import GENESIS, chain_hash, split_line
from agent_sandbox.audit.storage import AuditError, pread
from agent_sandbox.quickjson import loads  # json's result without importing json (the hook)

TAIL_SCAN_LIMIT = 8 * 1024 * 1024


def line_is_self_consistent(line: bytes) -> tuple[int, bytes] | None:
    """(seq, digest) of a stored line whose hash matches its own ``prev``, else None."""
    parts = split_line(line)
    if parts is None:
        return None
    body, hexdigest = parts
    try:
        rec = loads(body)
        prev = bytes.fromhex(rec["prev"])
        seq = rec["seq"]
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(seq, int) or len(prev) != 32:
        return None
    digest = chain_hash(prev, body)
    if digest.hex().encode("ascii") != hexdigest:
        return None
    return seq, digest


class TailState:
    """Where the chain ends in the file: the state an append continues from."""

    __slots__ = ("digest", "ino", "seq", "size", "torn_offset")

    def __init__(
        self, size: int, ino: int, seq: int, digest: bytes, torn_offset: int | None = None
    ) -> None:
        self.size = size
        self.ino = ino
        self.seq = seq
        self.digest = digest
        self.torn_offset = torn_offset  # start of an unsealed torn region, if any


def read_tail(fd: int) -> TailState:
    """Find the last intact record at the end of the open log file ``fd``.

    Anything after the last self-consistent line (an interrupted write) is
    reported as a torn region. Raises AuditError if no intact record is found
    within the scan limit of a non-empty file.
    """
    st = os.fstat(fd)
    size = st.st_size
    if size == 0:
        return TailState(0, st.st_ino, 0, GENESIS)
    chunk = 4096
    while True:
        start = max(0, size - chunk)
        data = pread(fd, size - start, start)
        pos = data.rfind(b"\n") + 1  # end of the last complete line (0: none here)
        while pos > 0:
            nl = data.rfind(b"\n", 0, pos - 1)
            if nl < 0 and start > 0:
                break  # this line begins before the chunk: read more
            found = line_is_self_consistent(data[nl + 1 : pos])
            if found is not None:
                end = start + pos
                return TailState(size, st.st_ino, found[0], found[1], end if end < size else None)
            pos = nl + 1
        if start == 0:
            # No intact record at all: the whole file is one torn region.
            return TailState(size, st.st_ino, 0, GENESIS, 0)
        if chunk >= TAIL_SCAN_LIMIT:
            raise AuditError(
                "the end of the audit log is damaged (no intact record in the last "
                f"{TAIL_SCAN_LIMIT} bytes); run `sandbox audit verify` to locate it"
            )
        chunk *= 4
