"""An action container's output: each stream kept up to a limit, the rest
counted and hashed but dropped, so that a container printing without end
costs no more memory than the limit.

The digest covers the full output as the container produced it, not only
what was kept: ``output_digest(stdout, stderr)`` over the two whole streams
gives the same value, so a run whose output was not cut can be checked
against what it returned. Nothing here decides anything or touches a file.
"""

from __future__ import annotations

import hashlib
import threading


def combine(stdout_sha256: str, stderr_sha256: str) -> str:
    """The output digest from each stream's own SHA-256 (hex): SHA-256 of
    ``stdout:<hex>\\nstderr:<hex>\\n``."""
    return hashlib.sha256(f"stdout:{stdout_sha256}\nstderr:{stderr_sha256}\n".encode()
                          ).hexdigest()


def output_digest(stdout: bytes, stderr: bytes) -> str:
    """The digest of two whole streams (what ``BoundedOutput.digest`` gives)."""
    return combine(hashlib.sha256(stdout).hexdigest(), hashlib.sha256(stderr).hexdigest())


class BoundedOutput:
    """stdout and stderr as they arrive, each kept up to ``limit`` bytes."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._kept = (bytearray(), bytearray())
        self._hash = (hashlib.sha256(), hashlib.sha256())
        self._produced = [0, 0]
        self._lock = threading.Lock()

    def feed(self, stream: int, data: bytes) -> None:
        """Add ``data`` to stream 0 (stdout) or 1 (stderr)."""
        if not data:
            return
        with self._lock:
            self._hash[stream].update(data)
            self._produced[stream] += len(data)
            kept = self._kept[stream]
            room = self.limit - len(kept)
            if room > 0:
                kept += data[:room]

    @property
    def stdout(self) -> bytes:
        return bytes(self._kept[0])

    @property
    def stderr(self) -> bytes:
        return bytes(self._kept[1])

    @property
    def produced(self) -> tuple[int, int]:
        """Bytes each stream produced in all."""
        return self._produced[0], self._produced[1]

    @property
    def truncated(self) -> bool:
        return any(n > self.limit for n in self._produced)

    def digest(self) -> str:
        with self._lock:
            return combine(self._hash[0].hexdigest(), self._hash[1].hexdigest())
