"""A log past its size cap, rotated into sealed segments of one chain.

When the active file (``audit.jsonl``) reaches the writer's ``max_bytes``, the
writer that made it so, still holding the lock, signs a checkpoint of the head
and moves the file to ``segments/<last seq>.jsonl`` (read-only, never written
again). The next record starts a new active file and continues the chain from
the segment's last record: its ``seq`` follows on and its ``prev`` is that
record's hash, so nothing leaves the chain and ``verify`` reads the segments in
order, then the active file, as one chain.

Writers that hold the old file open learn of a rotation from the lock file: the
rotating writer counts a generation there (8 bytes at its start), and every
writer compares it with its own once it holds the lock, before it appends.

Stdlib only (the hook imports the log on its allow path).
"""

from __future__ import annotations

import os

from agent_sandbox.audit.storage import BINARY, CLOEXEC, fsync_dir, pread
from agent_sandbox.audit.tail import TailState, read_tail

SEGMENT_DIR = "segments"
_SUFFIX = ".jsonl"


def segment_files(directory: str) -> list[str]:
    """The sealed segments of the log in ``directory``, oldest first (paths)."""
    folder = os.path.join(directory, SEGMENT_DIR)
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    ours = [n for n in names if n.endswith(_SUFFIX) and n[: -len(_SUFFIX)].isdigit()]
    return [os.path.join(folder, n) for n in sorted(ours, key=lambda n: int(n[: -len(_SUFFIX)]))]


def chain_files(directory: str, active: str) -> list[str]:
    """The files of one chain in order: the sealed segments, then the active file
    (left out only when segments exist and it does not: just rotated, nothing yet)."""
    segments = segment_files(directory)
    return segments if segments and not os.path.exists(active) else [*segments, active]


def continued_tail(directory: str, empty: TailState) -> TailState:
    """Where the chain ends for an empty active file: the last record of the
    newest segment (the active file's own size and inode kept), else ``empty``."""
    segments = segment_files(directory)
    if not segments:
        return empty
    fd = os.open(segments[-1], os.O_RDONLY | CLOEXEC | BINARY)
    try:
        last = read_tail(fd)
    finally:
        os.close(fd)
    return TailState(empty.size, empty.ino, last.seq, last.digest)


def generation(lock_fd: int) -> int:
    """How many rotations the lock file has counted (0 before the first)."""
    data = pread(lock_fd, 8, 0)
    return int.from_bytes(data, "big") if len(data) == 8 else 0


def rotate(directory: str, log_path: str, last_seq: int, lock_fd: int) -> str:
    """Move the active file (whose last record is ``last_seq``) into the segments
    and count the rotation in the lock file; the caller holds the lock and has
    signed a checkpoint of the head. Returns the segment's path."""
    folder = os.path.join(directory, SEGMENT_DIR)
    os.makedirs(folder, mode=0o750, exist_ok=True)
    target = os.path.join(folder, f"{last_seq:012d}{_SUFFIX}")
    if os.path.lexists(target):
        raise OSError(f"segment {target} exists already")
    os.rename(log_path, target)
    os.chmod(target, 0o440)
    fsync_dir(folder)
    fsync_dir(directory)
    os.pwrite(lock_fd, (generation(lock_fd) + 1).to_bytes(8, "big"), 0)
    return target
