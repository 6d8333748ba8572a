"""The interface every backend implements (``Backend``), its defaults, and the
backends' names. Cheap to import: ``abc`` is loaded by the interpreter's own
start-up."""

from __future__ import annotations

import abc

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import IO

    from ..broker.pinned import Pin
    from ..result import CompletedRun
    from ..settings import Settings

NAMES = ("bwrap", "srt", "gvisor")
OUTPUT_LIMIT = 64 * 1024  # bytes of each captured stream kept by default (``result.bounded``)


class Backend(abc.ABC):
    """One sandbox that runs one command under the settings' policy, and never
    runs it unsandboxed: every failure before the command starts raises
    ``SandboxStartError``."""

    name = ""
    pins = False  # whether it can pin an approved command's tree (``broker.pinned``)

    @abc.abstractmethod
    def run(self, argv: list[str], settings: Settings, cwd: str, home: str, *,
            timeout: float | None, capture: bool, env: dict[str, str] | None = None,
            stdin: bytes | None = None, output_limit: int = OUTPUT_LIMIT,
            audit_dir: str | None = None, pin: Pin | None = None) -> CompletedRun:
        """Run ``argv`` to its end (killed with every process of it after
        ``timeout``) and return its result, at most ``output_limit`` bytes of each
        captured stream kept (``result.bounded``)."""

    def passthrough(self, argv: list[str], settings: Settings, cwd: str, home: str, *,
                    timeout: float | None, err: IO[str] | None = None,
                    started: Callable[[], None] | None = None) -> int:
        """Run with the terminal attached and return the command's exit status;
        ``started`` is called once the command runs, where the backend can tell.
        By default: ``run`` with nothing captured."""
        return self.run(argv, settings, cwd, home, timeout=timeout, capture=False,
                        output_limit=OUTPUT_LIMIT).returncode
