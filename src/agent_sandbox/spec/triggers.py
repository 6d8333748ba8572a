"""An in-house implicit trigger in a spec (``filesystem.triggers``): a tool that runs
or loads files on its own, added to the catalogue (``agent_sandbox/triggers.json``)
for a fleet. Its files become ``deny_write`` rules, which every consumer reads."""

from __future__ import annotations

from pydantic import Field, field_validator

from .base import Strict


class Trigger(Strict):
    """An in-house tool that runs or loads files on its own (the catalogue's form,
    ``triggers.json``): its files become ``deny_write`` rules in every consumer."""

    tool: str = Field(min_length=1, description="The tool that runs or loads the files.")
    files: list[str] = Field(
        min_length=1,
        description="Relative paths it reads in any folder (at any depth of a writable root: "
        "'.acme/hooks.yml'), or '~/' paths below the home folder ('~/.acmerc').")
    fires_on: str = Field(default="", description="What the user does that fires it.")

    @field_validator("files")
    @classmethod
    def _relative(cls, v: list[str]) -> list[str]:
        for f in v:
            rel = f[2:] if f.startswith("~/") else f
            if not rel or rel.startswith("/") or any(p in ("", ".", "..") or "*" in p
                                                     for p in rel.rstrip("/").split("/")):
                raise ValueError(f"{f!r} must be a plain relative path (no '..', no glob) "
                                 "or one below '~/'")
        return v

    def rules(self) -> list[str]:
        """The ``deny_write`` rules that keep its files, file or folder."""
        out: list[str] = []
        for f in self.files:
            path = f.rstrip("/") if f.startswith("~/") else "**/" + f.rstrip("/")
            out += [path, f"{path}/**"]
        return out


