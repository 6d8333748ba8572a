"""The backends besides bubblewrap, behind the same policy and the same result:
``srt`` (delegate to an installed srt) and ``gvisor`` (a one-shot runsc
container). Each module is imported only when its backend runs.
"""

from __future__ import annotations

from ..errors import SandboxStartError
from ..result import CompletedRun
from ..settings import Settings


def run_backend(name: str, argv: list[str], settings: Settings, cwd: str, home: str, *,
                timeout: float | None, capture: bool, env: dict[str, str] | None = None,
                stdin: bytes | None = None, output_limit: int) -> CompletedRun:
    """Run with the backend ``name``; captured output as ``run.run_sandboxed`` keeps it."""
    if name == "srt":
        from .srt import run_srt

        return run_srt(argv, settings, cwd, timeout=timeout, capture=capture, env=env,
                       stdin=stdin, output_limit=output_limit)
    if name == "gvisor":
        from .gvisor import run_gvisor

        return run_gvisor(argv, settings, cwd, home, timeout=timeout, capture=capture,
                          output_limit=output_limit)
    raise SandboxStartError(f"unknown backend {name!r} (bwrap, srt or gvisor)")
