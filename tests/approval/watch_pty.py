"""``sandbox watch`` driven for real on a pseudo-terminal, as a human would run it:
what it drew (escape sequences removed) since the last key, keys pressed after the
human looked (``watch.SETTLE``). Shared by the view and end-to-end tests."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

ENV = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


class Watch:
    """``sandbox watch`` on a pseudo-terminal of ``cols`` x ``rows``."""

    def __init__(self, repo: Path, cols: int = 200, rows: int = 50,
                 python: str = sys.executable, env: dict[str, str] | None = None) -> None:
        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        env = {**(ENV if env is None else env), "COLUMNS": str(cols), "LINES": str(rows),
               "TERM": "xterm"}
        self.proc = subprocess.Popen([python, "-I", "-m", "agent_sandbox", "watch", str(repo)],
                                     stdin=slave, stdout=slave, stderr=slave, env=env,
                                     start_new_session=True)
        os.close(slave)
        self.raw = b""
        self.mark = 0

    def text(self) -> str:
        """What was drawn since the last key press, escape sequences removed."""
        return ANSI.sub(b"", self.raw[self.mark:]).decode("utf-8", "replace")

    def expect(self, needle: str, timeout: float = 20) -> None:
        """Wait until ``needle`` was drawn since the last key (it may be there already:
        one read can bring a whole frame)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if needle in self.text():
                return
            r, _, _ = select.select([self.master], [], [], 0.1)
            if r:
                try:
                    self.raw += os.read(self.master, 65536)
                except OSError:
                    break
        raise AssertionError(f"{needle!r} never shown; screen tail: {self.text()[-3000:]}")

    def press(self, key: str, settle: float = 0.7) -> None:
        time.sleep(settle)  # a human looks first (watch.SETTLE)
        self.mark = len(self.raw)  # what is expected next is the answer to this key
        os.write(self.master, key.encode())

    def close(self) -> None:
        try:
            os.write(self.master, b"\x03")
            self.proc.wait(1)
        except Exception:
            self.proc.terminate()  # a watch mid-view ends at its next key read
            try:
                self.proc.wait(2)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        os.close(self.master)
