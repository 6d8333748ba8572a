"""Ansible filters that merge a fleet's ``sandbox verify`` reports on the controller
(``playbooks/verify.yml``).

``agent_sandbox_verify_junit(text, host)``: one host's JSON report (``sandbox verify
--format json``'s output) as JUnit XML. ``agent_sandbox_fleet_report(folder,
hosts)``: the reports kept in ``<folder>/hosts/<host>.json`` merged into
``{"junit": <one <testsuites>, a suite per host>, "summary": <Markdown>, "failed":
[hosts]}``. A host whose report is missing or unreadable (unreachable, or verify
stopped before it reported) is a failed host with an error case, never left out.

The JUnit form is the package's (``agent_sandbox.hostcheck.junit``); these filters
only read the files and lay out the fleet. They never touch a host.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from typing import Any

from ansible.errors import AnsibleFilterError

STATUSES = ("passed", "failed", "waived", "waiver-expired")


def _junit() -> Any:
    """``agent_sandbox.hostcheck.junit``, found as the renderer's filters find the
    package (their ``import_project``, from the file beside this one)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "agent_sandbox_filters", os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                              "agent_sandbox.py"))
    if spec is None or spec.loader is None:
        raise AnsibleFilterError("agent-sandbox's filters are not beside this plugin")
    filters = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(filters)
    return filters.import_project("agent_sandbox.hostcheck.junit")


def parse_report(text: Any) -> tuple[dict[str, Any] | None, str]:
    """(the report, "") or (None, why there is none)."""
    if not isinstance(text, str) or not text.strip():
        return None, "verify gave no report"
    try:
        doc = json.loads(text)
    except ValueError as exc:
        return None, f"the report is not JSON: {exc}"
    if not isinstance(doc, dict):
        return None, "the report is not a JSON object"
    if "error" in doc:
        return None, f"verify did not run: {doc['error']}"
    if not isinstance(doc.get("checks"), list):
        return None, "the report lists no checks"
    return doc, ""


def agent_sandbox_verify_junit(text: Any, host: str) -> str:
    junit = _junit()
    doc, why = parse_report(text)
    suite = junit.testsuite(doc, host=str(host)) if doc else junit.error_suite(str(host), why)
    return str(junit.document([suite]))


def _read(folder: str, host: str) -> tuple[dict[str, Any] | None, str]:
    path = os.path.join(folder, "hosts", f"{host}.json")
    try:
        with open(path, encoding="utf-8") as fh:
            return parse_report(fh.read())
    except OSError as exc:
        return None, f"no report from the host ({exc.strerror}: {path})"


def _cell(value: Any) -> str:
    """Text for one Markdown table cell: one line, what a terminal would not show
    escaped (a check's detail may quote what a sandbox wrote), pipes escaped."""
    text = " ".join(str(value).split())
    text = "".join(ch if ch.isprintable() else f"\\u{ord(ch):04x}" for ch in text)
    return text.replace("\\", "\\\\").replace("|", "\\|") or "-"


def _host_row(host: str, doc: dict[str, Any] | None, why: str) -> tuple[str, bool]:
    if doc is None:
        return f"| {_cell(host)} | FAILED | 0 | 0 | 0 | 0 | {_cell(why)} |", False
    checks = [c for c in doc["checks"] if isinstance(c, dict)]
    counts = {s: sum(c.get("status") == s for c in checks) for s in STATUSES}
    ok = doc.get("ok") is True and bool(checks)
    failures = [f"{c.get('name')}: {c.get('detail')}" for c in checks
                if c.get("status") == "failed"]
    failures += [f"{c.get('name')}: waiver expired {c.get('waiver', {}).get('expires')}"
                 for c in checks if c.get("status") == "waiver-expired"]
    row = (f"| {_cell(host)} | {'ok' if ok else 'FAILED'} | {counts['passed']} | "
           f"{counts['failed']} | {counts['waived']} | {counts['waiver-expired']} | "
           f"{_cell('; '.join(failures) or 'none')} |")
    return row, ok


def _waiver_rows(host: str, doc: dict[str, Any] | None) -> list[str]:
    rows = []
    for c in (doc or {}).get("checks", []):
        waiver = c.get("waiver") if isinstance(c, dict) else None
        if isinstance(waiver, dict):
            real = "passed" if c.get("passed") is True else "failed"
            rows.append(f"| {_cell(host)} | {_cell(c.get('name'))} | {_cell(c.get('status'))} "
                        f"| {real} | {_cell(waiver.get('expires'))} | "
                        f"{_cell(waiver.get('layer'))} | {_cell(waiver.get('justification'))} |")
    return rows


Reports = list[tuple[str, dict[str, Any] | None, str]]


def summary(reports: Reports, when: str) -> tuple[str, list[str]]:
    """The Markdown summary and the hosts that failed."""
    rows, waivers, failed = [], [], []
    for host, doc, why in reports:
        row, ok = _host_row(host, doc, why)
        rows.append(row)
        waivers += _waiver_rows(host, doc)
        if not ok:
            failed.append(host)
    lines = ["# agent-sandbox fleet verify", "",
             f"{len(reports)} host(s): {len(reports) - len(failed)} passed, {len(failed)} failed "
             f"({when} UTC).", "",
             "| host | result | passed | failed | waived | waiver expired | failures |",
             "| --- | --- | --- | --- | --- | --- | --- |", *rows, "", "## Waivers", ""]
    if waivers:
        lines += ["| host | check | status | real result | expires | by | justification |",
                  "| --- | --- | --- | --- | --- | --- | --- |", *waivers]
    else:
        lines.append("No check is waived on any host.")
    return "\n".join(lines) + "\n", failed


def agent_sandbox_fleet_report(folder: str, hosts: list[str]) -> dict[str, Any]:
    junit = _junit()
    names = sorted({str(h) for h in hosts})
    reports = [(h, *_read(str(folder), h)) for h in names]
    suites = [junit.testsuite(doc, host=h) if doc else junit.error_suite(h, why)
              for h, doc, why in reports]
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M")
    text, failed = summary(reports, when)
    return {"junit": junit.document(suites, name="agent-sandbox fleet verify"),
            "summary": text, "failed": failed}


class FilterModule:
    """agent-sandbox fleet report filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "agent_sandbox_verify_junit": agent_sandbox_verify_junit,
            "agent_sandbox_fleet_report": agent_sandbox_fleet_report,
        }
