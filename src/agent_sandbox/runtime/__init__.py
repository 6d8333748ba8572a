"""The host runtime: ``sandbox exec`` on Linux (bubblewrap + egress proxy), and
the srt and gVisor backends behind the same policy.

``run_sandboxed`` is the stable entry point for code that needs to run a
command in the sandbox; importing this package is cheap (nothing heavy loads
until a run starts).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["SANDBOX_FAILED", "CompletedRun", "SandboxStartError", "run_sandboxed"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import exec as _exec

        return getattr(_exec, name)
    raise AttributeError(name)
