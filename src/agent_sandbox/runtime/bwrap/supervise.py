"""A started bubblewrap run with the terminal attached: the terminal's signals
held while it starts (``start_holding_signals``), then forwarded into it while
it runs, and whatever happens it is ended and cleaned up (``supervise``).
``sandbox exec`` and ``sandbox agent`` run this way."""

from __future__ import annotations

import _signal as signal
import sys

from ..failures import TIMED_OUT
from ..process import signal_wakeup, suppress

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import IO, Any

    from .run import BwrapRun

FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT,
                     signal.SIGUSR1, signal.SIGUSR2, signal.SIGWINCH, signal.SIGCONT)


def start_holding_signals(run: BwrapRun) -> tuple[list[int], dict[int, Any]]:
    """Start the run with the forwarded signals held (but ``SIGINT``, which still
    aborts a start): one that comes while the sandbox starts, or just after the
    command began, is forwarded to it by ``supervise``, never the launcher's own
    end. (signals that came, the handlers to put back)."""
    pending: list[int] = []
    previous: dict[int, Any] = {}
    for sig in FORWARDED_SIGNALS:
        if sig != signal.SIGINT:
            with suppress(OSError, ValueError):
                previous[sig] = signal.signal(sig, lambda signum, _f: pending.append(signum))
    try:
        run.start()
    except BaseException:
        for signum, handler in previous.items():
            with suppress(OSError, ValueError, TypeError):
                signal.signal(signum, handler)
        raise
    return pending, previous


def supervise(run: BwrapRun, timeout: float | None, err: IO[str] | None, *,
              prepare: Callable[[], None] | None = None,
              stop: Callable[[], None] | None = None,
              held: tuple[list[int], dict[int, Any]] | None = None) -> int:
    """Wait for a started run with the terminal's signals forwarded into it and return
    its exit status; whatever happens, end it and clean up. ``prepare`` runs first
    (inside the guard), ``stop`` after the run is killed and before its cleanup;
    ``held``: what ``start_holding_signals`` held, forwarded now."""
    pending, previous = held if held is not None else ([], {})
    previous = dict(previous)
    try:
        if prepare is not None:
            prepare()
        for sig in FORWARDED_SIGNALS:
            with suppress(OSError, ValueError):
                before = signal.signal(sig, lambda signum, _f: run.forward(signum))
                previous.setdefault(sig, before)
        for signum in pending:
            run.forward(signum)
        with signal_wakeup() as wake:  # a signal a proxy thread took still forwards
            rc, timed_out = run.wait(timeout, wake=wake)
        if timed_out:
            return TIMED_OUT
        return rc if rc >= 0 else 128 - rc
    finally:
        for signum, handler in previous.items():
            with suppress(OSError, ValueError, TypeError):
                signal.signal(signum, handler)
        run.kill()
        if stop is not None:
            stop()
        run.cleanup()
        for note in run.notices:
            (err or sys.stderr).write(note)
