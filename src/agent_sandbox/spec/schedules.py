"""The jobs a host runs on a schedule, per platform: the drift check (``sandbox verify
--drift`` with the host's isolation checks, recorded in the host's audit) and, for
laptops that pull their configuration, ``ansible-pull``.

``platforms.<os>.drift_check`` is on by default (every hour); ``platforms.<os>.pull``
is off until ``repository`` is set. Every value ends up in a systemd unit, a
LaunchDaemon plist or a Scheduled Task's XML, so each is held to characters those
carry without quoting.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, field_validator, model_validator

from .base import Strict, duration_field, parse_duration

MIN_EVERY = 60.0  # a Scheduled Task repeats at most once a minute
MAX_EVERY = 31 * 86400.0

# a URL (https, ssh, git, file) or scp-like user@host:path; no space, quote, %, $ or \
_REPOSITORY = re.compile(r"^(?:[a-z][a-z0-9+.-]*://[^\s\"'%$\\<>&]+"
                         r"|[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:[^\s\"'%$\\<>&]+)$")
_BRANCH = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$")
_PLAIN_PATH = re.compile(r"^[A-Za-z0-9._/:+@-]{1,400}$")  # a path with nothing to quote
_ABSOLUTE = re.compile(r"^(?:/|[A-Za-z]:/)")


def _every(v: Any) -> float:
    seconds = parse_duration(v)
    if not MIN_EVERY <= seconds <= MAX_EVERY:
        raise ValueError("every must be between 1m and 31d")
    return seconds


class DriftCheck(Strict):
    """``sandbox verify --drift`` on a schedule (a systemd timer, a LaunchDaemon, a
    Scheduled Task): installed files against the manifest and the host's isolation
    checks, each run recorded in the host's audit."""

    enabled: bool = Field(default=True, description="Render and run the scheduled check.")
    every: float = duration_field(3600, "How often it runs")

    @field_validator("every", mode="before")
    @classmethod
    def _dur(cls, v: Any) -> float:
        return _every(v)


class Pull(Strict):
    """``ansible-pull`` on a schedule, for hosts that fetch their own configuration;
    off until ``repository`` is set."""

    repository: str | None = Field(default=None,
                                   description="The repository ansible-pull clones (-U).")
    branch: str = Field(default="main", description="The branch it checks out (-C).")
    every: float = duration_field(1800, "How often it runs")
    inventory: str = Field(default="", description="The inventory, relative to the checkout "
                                                   "(-i); required with repository.")
    directory: str | None = Field(default=None, description="Where the checkout is kept "
                                  "(-d); default: the pull folder of the host's state.")

    @field_validator("every", mode="before")
    @classmethod
    def _dur(cls, v: Any) -> float:
        return _every(v)

    @field_validator("repository")
    @classmethod
    def _repository(cls, v: str | None) -> str | None:
        if v is not None and not _REPOSITORY.match(v):
            raise ValueError(f"{v!r} is not a repository URL (scheme://... or user@host:path, "
                             "with no spaces, quotes, %, $ or backslashes)")
        return v

    @field_validator("branch")
    @classmethod
    def _branch(cls, v: str) -> str:
        if not _BRANCH.match(v) or ".." in v:
            raise ValueError(f"{v!r} is not a branch name (letters, digits, . _ / -)")
        return v

    @field_validator("inventory", "directory")
    @classmethod
    def _path(cls, v: str | None) -> str | None:
        if v and (not _PLAIN_PATH.match(v) or ".." in v.split("/")):
            raise ValueError(f"{v!r}: a path a scheduled job carries holds only letters, "
                             "digits and . _ / : + @ - (no spaces, quotes or ..)")
        return v

    @model_validator(mode="after")
    def _complete(self) -> Pull:
        if self.repository and not self.inventory:
            raise ValueError("pull needs inventory when repository is set")
        if self.directory and not _ABSOLUTE.match(self.directory):
            raise ValueError(f"pull.directory {self.directory!r} must be an absolute path")
        return self


class Scheduled(Strict):
    """What every platform's section holds about scheduled jobs."""

    drift_check: DriftCheck = Field(default_factory=DriftCheck,
                                    description="The scheduled drift check (on by default).")
    pull: Pull = Field(default_factory=Pull,
                       description="ansible-pull on a schedule (off unless repository is set).")
