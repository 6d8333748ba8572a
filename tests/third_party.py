"""Third-party schemas the tests validate rendered files against, found where the
project keeps them: ``../shared/schemas`` beside the checkout (or
``$AGENT_SANDBOX_SCHEMAS``), else the copy vendored with its licence under
``tests/agents/schemas``. A test that needs a schema none of these has is
skipped with the reason, never passed against an empty schema."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
VENDORED = REPO / "tests" / "agents" / "schemas"


def schema_file(*parts: str) -> Path | None:
    roots = [Path(os.environ["AGENT_SANDBOX_SCHEMAS"])] if os.environ.get(
        "AGENT_SANDBOX_SCHEMAS") else []
    roots.append(REPO / ".." / "shared" / "schemas")
    for root in roots:
        if (root.joinpath(*parts)).is_file():
            return root.joinpath(*parts)
    vendored = VENDORED / parts[-1]
    return vendored if vendored.is_file() else None


@functools.cache
def schema(*parts: str) -> Any:
    """The parsed schema (JSON or YAML), or a skip naming the missing file."""
    path = schema_file(*parts)
    if path is None:
        pytest.skip(f"third-party schema {'/'.join(parts)} not found beside the checkout "
                    "(../shared/schemas or $AGENT_SANDBOX_SCHEMAS)")
    text = path.read_text(encoding="utf-8")
    if path.suffix in (".yaml", ".yml"):
        import yaml

        return yaml.safe_load(text)
    return json.loads(text)
