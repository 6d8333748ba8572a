"""The sandboxes a command can run in, peers behind one interface (``Backend``):
``bwrap`` (bubblewrap with the seccomp broker and the egress proxy: the
default, ``runtime.bwrap``), ``srt`` (delegate to an installed srt) and
``gvisor`` (a one-shot runsc container). Each takes the same settings and
gives the same result; ``pick(name)`` is the one place that picks one, and
each backend's module is imported only when it is picked.

The interface is ``base.Backend``; importing this package is cheap (nothing of
a backend is imported until it is picked).
"""

from __future__ import annotations

from ..failures import SandboxStartError
from .base import NAMES, OUTPUT_LIMIT, Backend

__all__ = ["NAMES", "OUTPUT_LIMIT", "Backend", "pick"]


def pick(name: str) -> Backend:
    """The backend called ``name`` (one of ``NAMES``)."""
    if name == "bwrap":
        from .bwrap import BwrapBackend

        return BwrapBackend()
    if name == "srt":
        from .srt import SrtBackend

        return SrtBackend()
    if name == "gvisor":
        from .gvisor import GvisorBackend

        return GvisorBackend()
    raise SandboxStartError(f"unknown backend {name!r} (bwrap, srt or gvisor)")
