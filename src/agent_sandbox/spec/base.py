"""The base every spec model shares: closed objects and durations."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=False, validate_default=False)


_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d)?\s*$")
_UNIT = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}


def parse_duration(v: Any) -> float:
    """``30m``, ``90s``, ``2h``, ``500ms`` or a number of seconds."""
    if isinstance(v, bool):
        raise ValueError("expected a duration such as 30m, 90s or 2h")
    if isinstance(v, (int, float)):
        if v != v or v in (float("inf"), float("-inf")):
            raise ValueError("a duration must be a finite number (not .nan or .inf)")
        if v < 0:
            raise ValueError("a duration cannot be negative")
        return float(v)
    if isinstance(v, str):
        m = _DURATION.match(v)
        if m:
            return int(m.group(1)) * _UNIT[m.group(2)]
    raise ValueError(f"expected a duration such as 30m, 90s or 2h, got {v!r}")


def duration_field(default: float, description: str) -> Any:
    return Field(default=default, description=description + " (30m, 90s, 2h or seconds)")
