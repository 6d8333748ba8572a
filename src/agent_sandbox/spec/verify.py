"""The spec's ``verify`` section: checks of ``sandbox verify`` waived for a time.

A waiver names one check (``contract.VERIFY_CHECKS``), says why, and ends on a
day (``YYYY-MM-DD``, the last day it holds, in UTC). The check still runs on the
host and its real result is reported beside the waiver; an expired waiver waives
nothing and fails the run. ``unwaivable`` lists checks no lower layer may waive
(the merge, ``spec.layers``, refuses such a waiver and names both places).

Which layer a waiver came from is set by the loader (``layer``), never written in
a spec file.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field, model_validator

from .. import contract
from .base import Strict

_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")
JUSTIFICATION_MAX = 500


def _check_name(v: str) -> str:
    if v not in contract.VERIFY_CHECKS:
        raise ValueError(f"unknown check {v!r} (sandbox verify runs: "
                         f"{', '.join(contract.VERIFY_CHECKS)})")
    return v


def _day(v: Any) -> dt.date:
    """A calendar day: a YAML date or a ``YYYY-MM-DD`` string, nothing else (no
    timestamps, no numbers pydantic would read as seconds)."""
    if isinstance(v, dt.date) and not isinstance(v, dt.datetime):
        return v
    if isinstance(v, str) and _DAY.match(v.strip()):
        try:
            return dt.date.fromisoformat(v.strip())
        except ValueError:
            pass
    raise ValueError(f"expected a day as YYYY-MM-DD, got {v!r}")


def _justification(v: str) -> str:
    text = v.strip()
    if not text:
        raise ValueError("a waiver needs a justification (why the check may fail for now)")
    if len(text) > JUSTIFICATION_MAX:
        raise ValueError(f"a justification holds at most {JUSTIFICATION_MAX} characters")
    if not text.isprintable():
        raise ValueError("a justification is one line of printable text")
    return text


CheckName = Annotated[str, AfterValidator(_check_name)]


class Waiver(Strict):
    """One check reported as waived until a day, and why."""

    check: CheckName = Field(description="The check of `sandbox verify` it waives.")
    justification: Annotated[str, AfterValidator(_justification)] = Field(
        description="Why the check may fail for now (shown in every report).")
    expires: Annotated[dt.date, BeforeValidator(_day)] = Field(
        description="The last day it holds (YYYY-MM-DD, UTC); after it the check counts "
                    "as it really is and the run fails.")
    layer: str = Field(default="", description="Set by the loader: the layer file it "
                                               "comes from. Not written in a spec.")


class Verify(Strict):
    """What `sandbox verify` on the host reports as waived, and what no lower layer
    may waive."""

    waivers: list[Waiver] = Field(
        default_factory=list,
        description="Checks reported as waived (their real result shown beside).")
    unwaivable: list[CheckName] = Field(
        default_factory=list, description="Checks no lower layer may waive.")

    @model_validator(mode="after")
    def _consistent(self) -> Verify:
        names = [w.check for w in self.waivers]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"check {twice[0]!r} is waived twice")
        both = sorted(set(names) & set(self.unwaivable))
        if both:
            raise ValueError(f"check {both[0]!r} is both waived and listed as unwaivable")
        return self
