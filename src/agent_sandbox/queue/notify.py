"""Wait for files to appear, woken by inotify (through ctypes, stdlib only),
with a short poll as the fallback where inotify is unavailable.

Used by the hook while it waits for a decision: no busy loop, and a decision
wakes it within a millisecond or two.
"""

from __future__ import annotations

import os
import select
import time

IN_CREATE = 0x100
IN_MOVED_TO = 0x80
IN_CLOEXEC = 0o2000000
IN_NONBLOCK = 0o4000
POLL = 0.02


class Watcher:
    """Watches directories for new entries until closed."""

    def __init__(self, dirs: list[str]) -> None:
        self.fd = -1
        try:
            import ctypes

            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            fd = libc.inotify_init1(IN_CLOEXEC | IN_NONBLOCK)
            if fd < 0:
                return
            for d in dirs:
                if libc.inotify_add_watch(fd, os.fsencode(d), IN_CREATE | IN_MOVED_TO) < 0:
                    os.close(fd)
                    return
            self.fd = fd
        except (OSError, AttributeError):
            self.fd = -1

    def wait(self, timeout: float) -> None:
        """Sleep until something changes in a watched directory, or ``timeout``."""
        timeout = max(0.0, timeout)
        if self.fd < 0:
            time.sleep(min(POLL, timeout))
            return
        r, _, _ = select.select([self.fd], [], [], min(timeout, 1.0))
        if r:
            try:
                os.read(self.fd, 65536)
            except BlockingIOError:
                pass

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Watcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
