"""The destructive-change gate: whether an action call may run at once or must
wait for a human, judged from the action's tier and what its plan changes.

- ``read`` runs at once, unless its plan writes (or cannot be read): a read
  action's credential cannot write either, so such a plan is a mistake or a
  disguise, and a human sees it.
- ``write`` shows its plan and runs at once only when it is plainly
  harmless: no destructive signal (for SQL that includes code left behind for
  other roles to run, foreign keys that cascade, and rows not pinned to a few
  keys: ``sql_plan``) and a plan that can be read.
- ``destructive`` always waits for a human, with the plan's summary.
- An action without a plan: ``read`` and ``write`` run at once (the tier and the
  credential are all there is to judge), ``destructive`` waits.

The plan is the text of the parameter ``action.plan.param`` names (a JSON value
as its compact JSON); ``plan_digest`` is the SHA-256 of exactly that text, so an
approval bound to it never applies another plan. ``summary`` is what an
approver judges in one look, a few hundred printable characters at most:
signals first (those with the same reason said once), then the other changes.

Pure: reads nothing but its arguments, and never raises: any failure of its
own is a verdict that escalates, saying so.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from ..spec.actions import Action, Tier
from .plan_reading import Reading, shown

MAX_PLAN = 1024 * 1024  # characters; a longer plan is not read
SUMMARY_KEEP = 300
REASONS_KEEP = 8


@dataclass(frozen=True)
class Verdict:
    """``escalate``: a human must approve first; ``reasons``: why (short,
    printable); ``summary``: what the plan changes; ``plan_digest``: SHA-256
    hex of the exact plan text, None when the action has no plan."""

    escalate: bool
    reasons: list[str] = field(default_factory=list)
    summary: str = ""
    plan_digest: str | None = None


def read_plan(kind: str, text: str) -> Reading:
    """What a plan of ``kind`` (sql, terraform, kubernetes) changes."""
    from .plan_reading import unreadable

    if len(text) > MAX_PLAN:
        return unreadable(f"the plan is longer than {MAX_PLAN // 1024} KiB")
    if "\x00" in text:  # a parser in C would stop reading there
        return unreadable("the plan contains a NUL character")
    if kind == "sql":
        from . import sql_plan

        return sql_plan.read(text)
    if kind == "terraform":
        from . import terraform_plan

        return terraform_plan.read(text)
    if kind == "kubernetes":
        from . import kube_plan

        return kube_plan.read(text)
    return unreadable(f"no reader for plans of kind {shown(kind, 30)}")


def _grouped(signals: list[str]) -> list[str]:
    """Signals that end with the same reason in brackets, as one entry: ``A, B
    (why)``; the reason is said once, where the first of them stood."""
    groups: dict[str, list[str]] = {}
    for signal in signals:
        cut = signal.rfind(" (")
        why = signal[cut:] if cut > 0 and signal.endswith(")") else ""
        groups.setdefault(why, []).append(signal[:cut] if why else signal)
    out: list[str] = []
    for why, heads in groups.items():
        out += [", ".join(heads) + why] if why else heads
    return out


def summarize(reading: Reading) -> str:
    """The destructive signals first (those with the same reason together),
    then the other changes, joined with `` · ``; cut at an entry's end, what is
    left off counted."""
    if reading.unreadable is not None:
        return f"the plan cannot be read: {reading.unreadable}"[:SUMMARY_KEEP]
    signals = list(dict.fromkeys(reading.signals))
    # a change a signal already names ("DELETE FROM t" beside "DELETE FROM t (no WHERE)")
    entries = _grouped(signals) + [c for c in dict.fromkeys(reading.changes) if not any(
        s == c or s.startswith(c + " ") or s.startswith(c + ":") for s in signals)]
    kept: list[str] = []
    used = 0
    for entry in entries:
        cost = len(entry) + (3 if kept else 0)
        if used + cost > SUMMARY_KEEP - 16:
            if not kept:
                kept.append(entry[:SUMMARY_KEEP - 32] + "...")
            break
        kept.append(entry)
        used += cost
    left = len(entries) - len(kept)
    return " · ".join(kept) + (f" · (+{left} more)" if left else "")


def _reasons(action: Action, reading: Reading | None) -> list[str]:
    reasons: list[str] = []
    if action.tier is Tier.DESTRUCTIVE:
        reasons.append("the action is destructive: a human approves every run")
    if reading is None:
        return reasons
    if reading.unreadable is not None:
        reasons.append(f"the plan cannot be read: {reading.unreadable}")
        return reasons
    if action.tier is Tier.READ and reading.writes:
        reasons.append("a read action's plan changes data")
    signals = list(dict.fromkeys(reading.signals))
    reasons += [f"destructive: {s}" for s in signals[:REASONS_KEEP]]
    if len(signals) > REASONS_KEEP:
        reasons.append(f"and {len(signals) - REASONS_KEEP} more destructive changes")
    return reasons


def _plan_text(action: Action, params: dict[str, Any]) -> str:
    """The plan exactly as given: a string as it is, any other JSON value as its
    compact JSON (``params.plan_text``)."""
    assert action.plan is not None
    value = params.get(action.plan.param)
    if isinstance(value, str):
        return value
    from .params import plan_text

    return plan_text(action, params) or ""


def _judge(action: Action, params: dict[str, Any]) -> Verdict:
    if action.plan is None:
        escalate = action.tier is Tier.DESTRUCTIVE
        return Verdict(escalate=escalate, reasons=_reasons(action, None),
                       summary="no plan", plan_digest=None)
    text = _plan_text(action, params)
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    reading = read_plan(action.plan.kind, text)
    if action.tier is Tier.DESTRUCTIVE:
        escalate = True
    elif reading.unreadable is not None:
        escalate = True
    elif action.tier is Tier.READ:
        escalate = reading.writes or bool(reading.signals)
    else:
        escalate = bool(reading.signals)
    return Verdict(escalate=escalate, reasons=_reasons(action, reading),
                   summary=summarize(reading), plan_digest=digest)


def judge(action: Action, params: dict[str, Any]) -> Verdict:
    """The gate's verdict on calling ``action`` with the validated ``params``."""
    try:
        return _judge(action, params)
    except Exception as exc:  # the gate fails closed, whatever failed
        why = f"the gate could not judge the plan: {shown(type(exc).__name__, 40)}: " \
              f"{shown(str(exc), 160)}"
        digest = None
        if action.plan is not None:
            try:
                text = _plan_text(action, params)
                digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
            except Exception:  # noqa: S110 (the verdict escalates either way)
                pass
        return Verdict(escalate=True, reasons=[why], summary=why[:SUMMARY_KEEP],
                       plan_digest=digest)
