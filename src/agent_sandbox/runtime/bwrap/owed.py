"""The sweeps earlier runs still owe (``sweep.OWED``: runs killed before their
own sweep), done before a run is planned, by the bubblewrap and the gVisor
backends alike: what they judge must not count as already there for the new run,
and a sweep that cannot be done refuses the start."""

from __future__ import annotations

import os

from ..failures import SandboxStartError
from .run_records import run_alive

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from .run_records import RunRecord


def end_container(url: str, name: str, home: str) -> None:
    """``sweep.settle``'s ``end``: the container a killed gVisor run left running."""
    from ..containers.podman import end_orphan

    end_orphan(url, name, home)


def settle_owed(ph: RunRecord, recorder: Callable[[], Callable[[dict[str, Any]], None]]
                | None, out: Callable[[str], object]) -> None:
    """The sweeps owed by runs that no longer run, if any (``sweep.settle``), the
    containers killed gVisor runs left running ended first."""
    from .sweep import OWED, settle

    try:
        if not os.listdir(os.path.join(ph.dir, OWED)):
            return
    except OSError:
        return
    settle(ph.dir, recorder, out, alive=run_alive(ph.runs), end=end_container)


def settle_or_refuse(ph: RunRecord, recorder: Callable[[], Callable[[dict[str, Any]], None]]
                     | None, out: Callable[[str], object]) -> None:
    """``settle_owed`` before a run is planned, by either backend; a sweep that cannot
    be done refuses the start."""
    try:
        settle_owed(ph, recorder, out)
    except Exception as exc:
        raise SandboxStartError(
            "an earlier run's check of what its command created could not finish "
            f"({type(exc).__name__}: {exc}); no sandbox starts until it does: remove "
            "what the message names, then run again") from None
