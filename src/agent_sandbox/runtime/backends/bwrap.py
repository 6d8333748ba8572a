"""The bubblewrap backend: ``runtime.bwrap`` behind the ``Backend`` interface.

A run is a ``BwrapRun`` (``bwrap.run``): started, its proxy served, its output
collected while it runs, then killed and cleaned up whatever happened; with the
terminal attached, the terminal's signals are held while it starts and
forwarded to it after (``bwrap.supervise``).
"""

from __future__ import annotations

from ..bwrap.run import BwrapRun
from ..bwrap.supervise import start_holding_signals, supervise
from ..failures import TIMED_OUT
from .base import OUTPUT_LIMIT, Backend

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import IO

    from ..broker.pinned import Pin
    from ..result import CompletedRun
    from ..settings import Settings


class BwrapBackend(Backend):
    name = "bwrap"
    pins = True

    def run(self, argv: list[str], settings: Settings, cwd: str, home: str, *,
            timeout: float | None, capture: bool, env: dict[str, str] | None = None,
            stdin: bytes | None = None, output_limit: int = OUTPUT_LIMIT,
            audit_dir: str | None = None, pin: Pin | None = None) -> CompletedRun:
        import subprocess
        import time

        from ..output import collect
        from ..result import bounded, completed

        started = time.monotonic()
        out = bounded(output_limit)
        run = BwrapRun(settings, argv, cwd=cwd, home=home, env=env, audit_dir=audit_dir,
                       pin=pin)
        pipe = subprocess.PIPE if capture else None
        run.start(capture=True,
                  stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                  stdout=pipe, stderr=pipe)
        try:
            run.start_proxy()
            timed_out = collect(run.proc, out, stdin=stdin, timeout=timeout, kill=run.kill)
            rc = run.proc.returncode
        finally:
            run.kill()
            run.cleanup()
        return completed(out, TIMED_OUT if timed_out else rc, time.monotonic() - started,
                         timed_out, "bwrap", notes="".join(run.notices).encode())

    def passthrough(self, argv: list[str], settings: Settings, cwd: str, home: str, *,
                    timeout: float | None, err: IO[str] | None = None,
                    started: Callable[[], None] | None = None) -> int:
        run = BwrapRun(settings, argv, cwd=cwd, home=home)
        held = start_holding_signals(run)
        return supervise(run, timeout, err, prepare=started, held=held)
