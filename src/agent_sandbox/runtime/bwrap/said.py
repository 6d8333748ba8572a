"""What bwrap said when it could not set a sandbox up (``bwrap_said``)."""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def bwrap_said(proc: Any) -> str:
    """bwrap's own message when it failed to set up: quoted from its standard error
    when that is a pipe this process reads (a captured run: a detached runner has no
    terminal to show it), else where it went."""
    pipe = getattr(proc, "stderr", None)
    if pipe is None:
        return "see bwrap's message above"
    try:
        os.set_blocking(pipe.fileno(), False)  # bwrap is gone; never wait on the pipe
        said = (os.read(pipe.fileno(), 4096) or b"").decode("utf-8", "replace").strip()
    except (OSError, ValueError):
        said = ""
    if not said:
        return "bwrap said nothing"
    from agent_sandbox.display import printable_lines

    return f"bwrap said: {printable_lines(said[-1000:])}"
