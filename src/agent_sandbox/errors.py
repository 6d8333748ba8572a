"""The project's error hierarchy. Every error a user can cause is one of these,
carries a message that says what to do, and never surfaces as a traceback."""

from __future__ import annotations


class SandboxError(Exception):
    """Base of every error the project raises on purpose."""


class Problem:
    """One validation problem, located in a source file (immutable).

    A plain class: ``dataclasses`` would cost every importer of this module
    (the proxy's first connection among them) about 8 ms of imports.
    """

    __slots__ = ("column", "file", "key", "line", "message")
    file: str
    line: int
    column: int
    key: str
    message: str

    def __init__(self, file: str, line: int, column: int, key: str, message: str) -> None:
        for name, value in (("file", file), ("line", line), ("column", column), ("key", key),
                            ("message", message)):
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Problem is immutable")

    def _values(self) -> tuple[str, int, int, str, str]:
        return (self.file, self.line, self.column, self.key, self.message)

    def __eq__(self, other: object) -> bool:
        return type(other) is Problem and self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __reduce__(self) -> tuple[type[Problem], tuple[str, int, int, str, str]]:
        return (Problem, self._values())  # copy and pickle through __init__

    def __repr__(self) -> str:
        return ("Problem(file={!r}, line={!r}, column={!r}, key={!r}, message={!r})"
                .format(*self._values()))

    def __str__(self) -> str:
        key = self.key or "<document>"
        return f"{self.file}:{self.line}:{self.column}: {key}: {self.message}"


class SpecError(SandboxError):
    """A spec (or a stack of layers) is invalid. Holds every problem found."""

    def __init__(self, problems: list[Problem]):
        self.problems = sorted(problems, key=lambda p: (p.file, p.line, p.column, p.key))
        super().__init__("\n".join(str(p) for p in self.problems))


class InstallError(SandboxError):
    """A host install step (``sandbox install ...``) could not be carried out."""
