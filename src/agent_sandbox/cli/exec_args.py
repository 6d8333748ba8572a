"""Argument parsing for ``sandbox exec`` (stdlib only, for a fast start).

Never guesses: an unknown option, a missing value or a missing ``--`` command
is a usage error, and nothing runs.
"""

from __future__ import annotations

from agent_sandbox.errors import SandboxError
from agent_sandbox.runtime.backends.base import NAMES as BACKENDS


class UsageError(SandboxError, ValueError):
    """The command line is wrong; the message says how."""


class ExecArgs:
    """The parsed command line."""

    def __init__(self) -> None:
        self.settings: str | None = None
        self.spec: str | None = None
        self.host: str | None = None
        self.cwd: str | None = None
        self.backend = "bwrap"
        self.backend_given = False
        self.timeout: float | None = None
        # --max-processes N, --max-memory SIZE, --max-file-size SIZE (runtime.limits)
        self.limits: list[int | None] = [None, None, None]
        self.help = False
        self.command: list[str] = []


_VALUED = {"--settings", "--spec", "--host", "--cwd", "--backend", "--timeout"}
_LIMITS = ("--max-processes", "--max-memory", "--max-file-size")


def parse_exec_args(args: list[str]) -> ExecArgs:
    out = ExecArgs()
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            out.command = args[i + 1:]
            break
        if a in ("-h", "--help"):
            out.help = True
            return out
        name, eq, value = a.partition("=")
        if name in _LIMITS or name in _VALUED:
            if not eq:  # the value is the next word
                if i + 1 >= len(args):
                    raise UsageError(f"{name} needs a value")
                value = args[i + 1]
                i += 1
            i += 1
        if name in _LIMITS:
            out.limits[_LIMITS.index(name)] = _limit(name, value)
            continue
        if name in _VALUED:
            key = name[2:]
            if key == "backend":
                out.backend_given = True
            if key == "timeout":
                try:
                    out.timeout = float(value)
                except ValueError:
                    raise UsageError(f"--timeout: not a number: {value!r}") from None
                if out.timeout <= 0:
                    raise UsageError("--timeout must be positive")
            else:
                setattr(out, key, value)
            continue
        if a.startswith("-"):
            raise UsageError(f"unknown option {a!r} (options go before `--`)")
        out.command = args[i:]
        break
    if out.help:
        return out
    if out.settings and out.spec:
        raise UsageError("give either --settings or --spec, not both")
    if out.host and not out.spec:
        raise UsageError("--host needs --spec")
    if out.backend not in BACKENDS:
        raise UsageError(f"--backend must be bwrap, srt or gvisor (got {out.backend!r})")
    if not out.command:
        raise UsageError("no command: sandbox exec [OPTIONS] -- CMD [ARG...]")
    return out


def _limit(name: str, value: str) -> int:
    from agent_sandbox.runtime.limits import parse_size

    try:
        if name == "--max-processes":
            if not value.isdigit() or int(value) < 1:
                raise ValueError(f"{value!r} is not a positive number")
            return int(value)
        return parse_size(value)
    except ValueError as exc:
        raise UsageError(f"{name}: {exc}") from None
