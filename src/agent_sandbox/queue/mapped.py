"""The files of a pinned tree that a process maps shared and writable when a
request is made: their bytes are recorded, not only their identities.

A write through a shared mapping changes a file's bytes without moving its times
once the page is dirty (on ext4 until it is written back, on tmpfs ever after):
a command of the agent's that maps a module of the tree and dirties its page
before the request can change the module after the tree is recorded, and an
approved run would import it. Times move again with the next fault on a page, so
only a mapping that exists when the tree is recorded can do it, and every such
mapping is in some process's ``/proc/PID/maps`` (the launcher's user's, and a
sandbox's, which runs as that user). ``pinned_by_bytes`` looks before and after
the tree is taken: a file mapped so at either moment is recorded with its
SHA-256, which the approved run checks before it starts and when it reads the
file (``approval.executor``, ``runtime/broker/pinned.py``)."""

from __future__ import annotations

import os
import stat

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from .content import Entry


def writable_mappings() -> set[int]:
    """The inodes of the files the user's processes map shared and writable."""
    uid = os.getuid()
    out: set[int] = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if uid and os.stat(f"/proc/{pid}").st_uid != uid:
                continue
            with open(f"/proc/{pid}/maps", "rb") as fh:
                data = fh.read()
        except OSError:
            continue  # gone, or not the user's to read (nor to write through)
        for line in data.splitlines():
            # address perms offset dev inode path: "rw-s" is shared and writable
            parts = line.split(None, 5)
            if len(parts) == 6 and parts[1][1:2] == b"w" and parts[1][3:4] == b"s" \
                    and parts[4] != b"0":
                out.add(int(parts[4]))
    return out


def pinned_by_bytes(entries: Mapping[str, Entry], inodes: set[int]) -> dict[str, str]:
    """The regular files of ``entries`` whose inode is among ``inodes``, with their
    SHA-256 (as ``content.sha256_of`` takes it)."""
    from .content import sha256_of

    out: dict[str, str] = {}
    for path, e in entries.items():
        if e[0] in inodes and stat.S_ISREG(e[4]):
            digest = sha256_of(path)
            if digest is not None:
                out[path] = digest
    return out
