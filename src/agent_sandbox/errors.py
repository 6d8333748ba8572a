"""The project's error hierarchy. Every error a user can cause is one of these,
carries a message that says what to do, and never surfaces as a traceback."""

from __future__ import annotations

from dataclasses import dataclass


class SandboxError(Exception):
    """Base of every error the project raises on purpose."""


@dataclass(frozen=True)
class Problem:
    """One validation problem, located in a source file."""

    file: str
    line: int
    column: int
    key: str
    message: str

    def __str__(self) -> str:
        key = self.key or "<document>"
        return f"{self.file}:{self.line}:{self.column}: {key}: {self.message}"


class SpecError(SandboxError):
    """A spec (or a stack of layers) is invalid. Holds every problem found."""

    def __init__(self, problems: list[Problem]):
        self.problems = sorted(problems, key=lambda p: (p.file, p.line, p.column, p.key))
        super().__init__("\n".join(str(p) for p in self.problems))
