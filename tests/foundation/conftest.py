"""Shared helpers for the foundation tests: paths, spec files, the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_FLEET = REPO / "inventories" / "example-fleet"
SRT = REPO / ".tools" / "node_modules" / ".bin" / "srt"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def run_cli(
    *args: str, cwd: Path | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run the real ``sandbox`` command through the project's interpreter."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    return subprocess.run(
        [sys.executable, "-m", "agent_sandbox", *args],
        capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env,
    )


def load_schema(*parts: str) -> dict:
    from third_party import schema

    return schema(*parts)  # type: ignore[no-any-return]


@pytest.fixture
def spec_dir(tmp_path: Path) -> Path:
    return tmp_path
