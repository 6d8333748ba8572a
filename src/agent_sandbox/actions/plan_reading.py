"""What a plan reader found in an action's plan: the one shape that
``sql_plan``, ``terraform_plan`` and ``kube_plan`` return and ``gate`` judges.

Every text in a reading is ready to show an approver: names that came from the
plan went through ``display.printable`` and were cut to a bounded length, so a
reading never carries a control character, an escape sequence or a page of
text. A reader never raises on what the plan says: a plan it cannot read in
full is a reading with ``unreadable`` set, never a partial one that passes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..display import printable
from ..errors import SandboxError

NAME_KEEP = 80  # the longest a name from a plan is shown


@dataclass(frozen=True)
class Reading:
    """``changes``: what the plan does, one entry per statement, resource or
    object; ``signals``: the destructive ones (or those the reader cannot
    judge), each short and specific; ``writes``: whether the plan changes
    anything at all; ``unreadable``: why the plan could not be read (then the
    other fields say nothing)."""

    changes: tuple[str, ...] = ()
    signals: tuple[str, ...] = ()
    writes: bool = False
    unreadable: str | None = None


class Unreadable(SandboxError):
    """Raised inside a reader when a part of the plan cannot be read (the
    message says which); the reader turns it into an unreadable ``Reading``."""


def unreadable(why: str) -> Reading:
    """A plan that cannot be read: it changes whatever it might."""
    return Reading(writes=True, unreadable=shown(why, 300))


def shown(value: object, keep: int = NAME_KEEP) -> str:
    """``value`` as an approver may see it: cut to about ``keep`` characters
    (the middle goes, both ends stay), then escaped (an escape is never cut in
    half; a name of hidden characters shows longer, at most ten times)."""
    text = value if isinstance(value, str) else str(value)
    if len(text) > keep:
        half = max(1, (keep - 5) // 2)
        text = text[:half] + " ... " + text[len(text) - half:]
    return printable(text)


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise Unreadable(f"the key {shown(key)} appears twice in one object")
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise Unreadable(f"{name} is not JSON")


def strict_json(text: str) -> Any:
    """``text`` as JSON, refusing what readers could take two ways: a key given
    twice in one object (which one would the tool use?), NaN and Infinity."""
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except RecursionError:
        raise Unreadable("the JSON is nested too deeply") from None
    except ValueError as exc:
        raise Unreadable(f"not JSON: {exc}") from None
