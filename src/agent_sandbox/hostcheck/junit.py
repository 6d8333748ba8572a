"""JUnit XML of ``sandbox verify`` reports, the form CI systems read (the Jenkins /
Ant ``junit-10.xsd`` schema): one ``<testsuite name="agent-sandbox verify">`` per
host, one ``<testcase classname="agent-sandbox.<host>" name="<check>">`` per check.

- failed: ``<failure message=...>`` with the check's detail;
- waived: ``<skipped message="waived: <justification> (until <date>)">``, the real
  result in the case's ``<system-out>``;
- waiver expired: ``<failure>`` saying the waiver expired, with the real result;
- a host whose verify did not run: one ``<error>`` case named ``verify``.

Built from the JSON document (``report.to_json``), so a fleet's reports fetched as
JSON merge into one file (``plugins/filter/agent_sandbox_report.py``). Text a check
quotes (sandbox-written, possibly) is escaped to what XML 1.0 can carry.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping
from typing import Any

from ..display import printable

SUITE = "agent-sandbox verify"
CLASS_PREFIX = "agent-sandbox."


def xml_text(value: Any) -> str:
    """``value`` as text XML 1.0 can hold (control characters and the like escaped)."""
    return printable(value)


def _timestamp(doc: Mapping[str, Any]) -> str:
    # junit-4 style: YYYY-MM-DDTHH:MM:SS, no zone (the report's time is UTC)
    return str(doc.get("time", "")).removesuffix("Z")[:19]


def _seconds(value: Any) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < 1e9
    return float(value) if ok else 0.0


def _case(suite: ET.Element, host: str, check: Mapping[str, Any]) -> str:
    """Add one check's case; returns its status."""
    name, status = str(check.get("name", "?")), str(check.get("status", ""))
    passed, detail = check.get("passed") is True, xml_text(check.get("detail", ""))
    case = ET.SubElement(suite, "testcase", classname=f"{CLASS_PREFIX}{host}",
                         name=xml_text(name), time=f"{_seconds(check.get('seconds')):.3f}")
    waiver = check.get("waiver") if isinstance(check.get("waiver"), Mapping) else None
    real = f"{'passed' if passed else 'failed'}: {detail}"
    if status == "waived" and waiver is not None:
        why, until = xml_text(waiver.get("justification", "")), xml_text(waiver.get("expires"))
        ET.SubElement(case, "skipped", message=f"waived: {why} (until {until})")
        by = xml_text(waiver.get("layer", ""))
        ET.SubElement(case, "system-out").text = real + (f" (waiver from {by})" if by else "")
    elif status == "waiver-expired" and waiver is not None:
        message = (f"waiver expired on {xml_text(waiver.get('expires'))} "
                   f"({xml_text(waiver.get('justification', ''))}); the check {real}")
        ET.SubElement(case, "failure", message=message, type="waiver-expired").text = message
    elif status == "passed" and passed:
        ET.SubElement(case, "system-out").text = detail
    else:
        status = "failed"
        ET.SubElement(case, "failure", message=detail or "failed", type="failed").text = detail
    return status


def testsuite(doc: Mapping[str, Any], host: str | None = None) -> ET.Element:
    """One host's suite from its JSON report (``host`` overrides the name it gives)."""
    name = xml_text(host or doc.get("host") or "unknown")
    suite = ET.Element("testsuite", name=SUITE, hostname=name, timestamp=_timestamp(doc))
    checks = doc.get("checks")
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    seconds = 0.0
    for check in checks if isinstance(checks, list) else []:
        if not isinstance(check, Mapping):
            continue
        status = _case(suite, name, check)
        seconds += _seconds(check.get("seconds"))
        counts["tests"] += 1
        counts["failures"] += status in ("failed", "waiver-expired")
        counts["skipped"] += status == "waived"
    clients = [c for c in doc.get("clients") or [] if isinstance(c, Mapping)]
    if clients:
        ET.SubElement(suite, "system-err").text = "\n".join(
            xml_text(f"client {c.get('client')}: {c.get('problem')}: {c.get('detail')}")
            for c in clients)
    if not counts["tests"]:
        _error(suite, name, "the report holds no check")
        counts["tests"], counts["errors"] = 1, 1
    suite.attrib.update({k: str(v) for k, v in counts.items()}, time=f"{seconds:.3f}")
    return suite


def _error(suite: ET.Element, host: str, message: str) -> None:
    case = ET.SubElement(suite, "testcase", classname=f"{CLASS_PREFIX}{host}", name="verify",
                         time="0")
    ET.SubElement(case, "error", message=xml_text(message), type="verify-error").text = \
        xml_text(message)


def error_suite(host: str, message: str, timestamp: str = "") -> ET.Element:
    """The suite of a host whose verify did not run (or gave no report)."""
    name = xml_text(host)
    suite = ET.Element("testsuite", name=SUITE, hostname=name, timestamp=timestamp[:19])
    _error(suite, name, message)
    suite.attrib.update(tests="1", failures="0", errors="1", skipped="0", time="0")
    return suite


def document(suites: Iterable[ET.Element], name: str = SUITE) -> str:
    """``<testsuites>`` around the suites, with their totals."""
    root = ET.Element("testsuites", name=name)
    totals = {"tests": 0, "failures": 0, "errors": 0}
    seconds = 0.0
    for suite in suites:
        root.append(suite)
        for key in totals:
            totals[key] += int(suite.get(key, "0"))
        seconds += float(suite.get("time", "0"))
    root.attrib.update({k: str(v) for k, v in totals.items()}, time=f"{seconds:.3f}")
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
