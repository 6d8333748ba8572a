"""Errors and exit statuses of ``sandbox exec`` (one place for both).

Exit statuses: the command's own; ``SANDBOX_FAILED`` (125) when the sandbox
could not start; ``TIMED_OUT`` (124) when a timeout expired; 128+N when the
command died of signal N. Nothing here ever lets a command run unsandboxed:
every failure before the command starts is a ``SandboxStartError``.
"""

from __future__ import annotations

from agent_sandbox.errors import SandboxError

SANDBOX_FAILED = 125
TIMED_OUT = 124


class SettingsError(SandboxError, ValueError):
    """A settings file is missing or malformed; the message says where and how."""


class SandboxStartError(SandboxError, RuntimeError):
    """The sandbox could not start; the message names the cause and the remedy."""


class InvalidSettingsError(SandboxStartError, SettingsError):
    """The settings are invalid (a ``SandboxStartError`` for callers of the API)."""
