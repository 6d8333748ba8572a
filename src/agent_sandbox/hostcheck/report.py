"""``sandbox verify``'s report: every check with the host's waivers applied, in the
formats a fleet reads: text, one JSON document, JUnit XML (``hostcheck.junit``).

How a waiver (``hostcheck.waivers``) counts, checked on the day of the run in UTC:

- in force (it expires today or later): the check is ``waived``; it still ran, and
  its real result (``passed``, ``detail``) is reported beside the waiver;
- expired: it waives nothing. The check counts as it really is, its status is
  ``waiver-expired``, and the run fails, so that a stale waiver is noticed.

The run passes (exit 0) only when every check passed or is waived, no waiver in
force for a check that ran has expired, and no client would skip the hooks. The
``--drift`` comparison reports the same way: each drifted file a failing case named
for its path, or one passing case ``drift``. Pure: the command gathers, this judges
and formats; it never turns a failure into a pass.
"""

from __future__ import annotations

import datetime as dt
import json
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..display import printable
from .waivers import Waiver

STATUSES = ("passed", "failed", "waived", "waiver-expired")
FORMATS = ("text", "json", "junit")
VERSION = 1
# client findings a run passes with (the hook's own verdicts still hold): calls
# outside the boundary, hooks a client lets a call past when they cannot answer
CLIENT_NOTICES = ("outside-boundary", "fails-open")


@dataclass(frozen=True)
class Case:
    """One check (or one drifted file) as reported."""

    name: str
    passed: bool  # the real result, waived or not
    detail: str
    status: str  # one of STATUSES
    waiver: Waiver | None = None
    seconds: float = 0.0


@dataclass(frozen=True)
class Report:
    host: str
    time: dt.datetime  # UTC
    kind: str  # "checks" or "drift"
    cases: tuple[Case, ...]
    clients: tuple[Mapping[str, str], ...] = ()
    waivers: tuple[Waiver, ...] = ()
    drift: tuple[Mapping[str, str], ...] = ()

    def totals(self) -> dict[str, int]:
        return {s: sum(c.status == s for c in self.cases) for s in STATUSES}

    def blocking_clients(self) -> list[Mapping[str, str]]:
        return [c for c in self.clients if c.get("problem") not in CLIENT_NOTICES]

    def ok(self) -> bool:
        return (bool(self.cases) and all(c.status in ("passed", "waived") for c in self.cases)
                and not self.blocking_clients())


def judge(name: str, passed: bool, detail: str, waiver: Waiver | None, today: dt.date,
          seconds: float = 0.0) -> Case:
    """One check's status under its waiver (if any) on ``today`` (UTC)."""
    if waiver is None:
        return Case(name, passed, detail, "passed" if passed else "failed", None, seconds)
    status = "waiver-expired" if waiver.expired(today) else "waived"
    return Case(name, passed, detail, status, waiver, seconds)


def _utc(now: dt.datetime | None) -> dt.datetime:
    return (now or dt.datetime.now(dt.UTC)).astimezone(dt.UTC).replace(microsecond=0)


def check_report(results: Iterable[Any], waivers: Mapping[str, Waiver],
                 clients: Iterable[Any] = (), *, host: str | None = None,
                 now: dt.datetime | None = None) -> Report:
    """``results``: ``CheckResult`` items (name, passed, detail); ``clients``: client
    findings (client, problem, detail)."""
    when = _utc(now)
    cases = tuple(judge(r.name, bool(r.passed), str(r.detail), waivers.get(r.name), when.date(),
                        float(getattr(r, "seconds", 0.0)))
                  for r in results)
    found = tuple({"client": str(f.client), "problem": str(f.problem), "detail": str(f.detail)}
                  for f in clients)
    return Report(host or socket.gethostname(), when, "checks", cases, found,
                  tuple(sorted(waivers.values(), key=lambda w: w.check)))


def drift_report(items: Iterable[Any], manifest: str, *, host: str | None = None,
                 now: dt.datetime | None = None) -> Report:
    """``items``: ``DriftItem`` (target, problem, detail); one failing case per path."""
    listed = [{"target": str(i.target), "problem": str(i.problem), "detail": str(i.detail)}
              for i in items]
    by_path: dict[str, list[str]] = {}
    for item in listed:
        said = item["problem"] + (f" ({item['detail']})" if item["detail"] else "")
        by_path.setdefault(item["target"], []).append(said)
    cases = tuple(Case(path, False, "; ".join(said), "failed") for path, said in by_path.items())
    if not cases:
        cases = (Case("drift", True, f"every file in {manifest} is as rendered", "passed"),)
    return Report(host or socket.gethostname(), _utc(now), "drift", cases, drift=tuple(listed))


def case_json(case: Case) -> dict[str, Any]:
    out: dict[str, Any] = {"name": case.name, "passed": case.passed, "detail": case.detail,
                           "status": case.status, "seconds": case.seconds}
    if case.waiver is not None:
        out["waiver"] = {"justification": case.waiver.justification,
                         "expires": case.waiver.expires.isoformat(),
                         "layer": case.waiver.layer}
    return out


def to_json(report: Report) -> dict[str, Any]:
    """The one JSON document (``passed``/``total``/``checks`` as before: real results)."""
    doc: dict[str, Any] = {
        "version": VERSION, "host": report.host,
        "time": report.time.strftime("%Y-%m-%dT%H:%M:%SZ"), "kind": report.kind,
        "ok": report.ok(), "passed": sum(c.passed for c in report.cases),
        "total": len(report.cases), "totals": report.totals(),
        "checks": [case_json(c) for c in report.cases],
        "clients": [dict(c) for c in report.clients],
        # every waiver of the host, those of checks that did not run too
        "waivers": [{**w.as_dict(), "expired": w.expired(report.time.date())}
                    for w in report.waivers],
    }
    if report.kind == "drift":
        doc["drift"] = [dict(i) for i in report.drift]
    return doc


def _waiver_note(case: Case) -> str:
    w = case.waiver
    if w is None:
        return ""
    state = "expired on" if case.status == "waiver-expired" else "waived until"
    by = f" by {w.layer}" if w.layer else ""
    return f"  [{state} {w.expires.isoformat()}{by}: {printable(w.justification)}]"


def _mark(case: Case) -> str:
    return "WAIVE" if case.status == "waived" else "PASS" if case.passed else "FAIL"


def to_text(report: Report) -> str:
    # an expired waiver waives nothing: the check shows as it really is, and the note
    lines = [f"{_mark(c):<5} {c.name:16} {printable(c.detail)}{_waiver_note(c)}"
             for c in report.cases]
    # a detail may quote a settings file an agent could write
    lines += [f"WARN  {c['client']}: {c['problem']}: {printable(c['detail'])}"
              for c in report.clients]
    totals = report.totals()
    summary = f"{sum(c.passed for c in report.cases)}/{len(report.cases)} checks passed"
    if totals["waived"]:
        summary += f"; {totals['waived']} waived"
    if totals["waiver-expired"]:
        summary += f"; {totals['waiver-expired']} waiver(s) expired"
    if report.clients:
        summary += f"; {len(report.clients)} client warning(s)"
    return "\n".join([*lines, summary])


def output(report: Report, fmt: str) -> str:
    """The report in ``fmt`` (one of ``FORMATS``), as printed."""
    if fmt == "json":
        return json.dumps(to_json(report), indent=2)
    if fmt == "junit":
        from .junit import document, testsuite

        return document([testsuite(to_json(report))])
    return to_text(report)
