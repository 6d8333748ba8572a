"""The served queues' crash recovery, run while ``sandbox serve`` serves, as
``sandbox pending`` and ``sandbox watch`` run it: a request whose hook died is
cancelled, one past its deadline times out, an approval whose runner died is run
(``approval.executor.recover_and_run``, the one implementation).

A thread, every ``EVERY`` seconds and once at start. It never decides anything a human
has not decided, and one repository's failure never stops the others' recovery.
"""

from __future__ import annotations

import threading

EVERY = 5.0


class Recovery:
    def __init__(self, repos: list[str], every: float = EVERY) -> None:
        self.repos = list(repos)
        self.every = every
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="queue-recovery", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)

    def once(self) -> None:
        from agent_sandbox.approval.executor import recover_and_run
        from agent_sandbox.errors import SandboxError

        for repo in self.repos:
            try:
                recover_and_run(repo)
            except (SandboxError, OSError, ValueError):
                continue

    def _run(self) -> None:
        while True:
            self.once()
            if self.stop.wait(self.every):
                return
