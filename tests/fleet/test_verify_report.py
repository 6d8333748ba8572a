"""`sandbox verify`'s reports without a host: each status (passed, failed, waived,
waiver expired) in text, JSON and JUnit XML, the JUnit valid against the schema CI
systems read (schemas/junit-10.xsd, validated with xmlschema), expiry judged on the
day in UTC, the host's waivers file read or refused whole, and drift as cases."""

from __future__ import annotations

import datetime as dt
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import xmlschema

from agent_sandbox.hostcheck import VerifyError
from agent_sandbox.hostcheck.checks import CheckResult
from agent_sandbox.hostcheck.drift import DriftItem
from agent_sandbox.hostcheck.report import check_report, drift_report, judge, output, to_json
from agent_sandbox.hostcheck.waivers import Waiver, parse_waivers, read_waivers

XSD = xmlschema.XMLSchema(str(Path(__file__).parent / "schemas" / "junit-10.xsd"))
NOW = dt.datetime(2029, 6, 30, 23, 30, tzinfo=dt.UTC)
RESULTS = [CheckResult("denied_read", True, "~/.ssh hidden", 1.5),
           CheckResult("denied_domain", False, "evil.test reached \x1b[2J the <upstream> & more"),
           CheckResult("audit", True, "chains verify"),
           CheckResult("escalation", False, "no escalation was queued")]
WAIVERS = {
    "denied_domain": Waiver("denied_domain", "proxy swap this week", dt.date(2029, 6, 30),
                            "hosts/h1.yml"),
    "audit": Waiver("audit", "log moves", dt.date(2029, 6, 29), "fleet.yml"),
    "allowed_domain": Waiver("allowed_domain", "not run here", dt.date(2020, 1, 1), "fleet.yml"),
}


def report() -> object:
    return check_report(RESULTS, WAIVERS, host="h1", now=NOW)


def cases(xml: str) -> dict[str, ET.Element]:
    return {c.get("name", ""): c for c in ET.fromstring(xml).iter("testcase")}


def test_each_status_and_the_verdict() -> None:
    doc = to_json(report())  # type: ignore[arg-type]
    status = {c["name"]: (c["status"], c["passed"]) for c in doc["checks"]}
    assert status == {"denied_read": ("passed", True),
                      "denied_domain": ("waived", False),        # expires today: in force
                      "audit": ("waiver-expired", True),         # expired yesterday
                      "escalation": ("failed", False)}
    assert doc["totals"] == {"passed": 1, "failed": 1, "waived": 1, "waiver-expired": 1}
    assert (doc["passed"], doc["total"], doc["ok"]) == (2, 4, False)
    assert doc["host"] == "h1" and doc["time"] == "2029-06-30T23:30:00Z"
    waived = next(c for c in doc["checks"] if c["name"] == "denied_domain")
    assert waived["waiver"] == {"justification": "proxy swap this week",
                                "expires": "2029-06-30", "layer": "hosts/h1.yml"}
    assert "waiver" not in doc["checks"][0] and doc["checks"][0]["seconds"] == 1.5
    # every waiver of the host is listed, with whether it has expired: one of a check
    # that did not run (allowed_domain) fails nothing
    assert [(w["check"], w["expired"]) for w in doc["waivers"]] == [
        ("allowed_domain", True), ("audit", True), ("denied_domain", False)]


def test_only_passed_or_waived_checks_and_no_expired_waiver_pass() -> None:
    ok = [CheckResult("denied_read", True, "d"), CheckResult("denied_domain", False, "x")]
    assert check_report(ok, WAIVERS, host="h", now=NOW).ok()
    # the same waiver a day later has expired: the run fails, though the check is as before
    assert not check_report(ok, WAIVERS, host="h", now=NOW + dt.timedelta(hours=1)).ok()
    # an expired waiver of a check that passes still fails the run
    assert not check_report([CheckResult("audit", True, "a")], WAIVERS, host="h", now=NOW).ok()
    assert not check_report([], {}, host="h", now=NOW).ok()  # nothing ran: never a pass


def test_expiry_is_judged_on_the_utc_day() -> None:
    w = Waiver("audit", "x", dt.date(2029, 6, 30))
    late = dt.datetime(2029, 7, 1, 1, 0, tzinfo=dt.timezone(dt.timedelta(hours=5)))  # 20:00 UTC
    assert check_report([CheckResult("audit", False, "")], {"audit": w}, host="h",
                        now=late).cases[0].status == "waived"
    assert judge("audit", False, "", w, dt.date(2029, 7, 1)).status == "waiver-expired"


def test_blocking_client_findings_fail_the_run_and_notices_do_not() -> None:
    class Finding:
        def __init__(self, problem: str) -> None:
            self.client, self.problem, self.detail = "codex", problem, "d"

    ok = [CheckResult("denied_read", True, "d")]
    assert check_report(ok, {}, [Finding("outside-boundary")], host="h", now=NOW).ok()
    assert not check_report(ok, {}, [Finding("hooks-skipped")], host="h", now=NOW).ok()


def test_junit_validates_and_says_each_status() -> None:
    xml = output(report(), "junit")  # type: ignore[arg-type]
    XSD.validate(xml)
    root = ET.fromstring(xml)
    (suite,) = root.iter("testsuite")
    assert (suite.get("name"), suite.get("hostname")) == ("agent-sandbox verify", "h1")
    assert [suite.get(k) for k in ("tests", "failures", "errors", "skipped")] == \
        ["4", "2", "0", "1"]
    assert suite.get("timestamp") == "2029-06-30T23:30:00"
    assert suite.get("time") == "1.500" and root.get("time") == "1.500"
    by_name = cases(xml)
    assert all(c.get("classname") == "agent-sandbox.h1" for c in by_name.values())
    assert list(by_name["denied_read"]) and by_name["denied_read"][0].tag == "system-out"
    assert by_name["denied_read"].get("time") == "1.500"
    skipped = by_name["denied_domain"].find("skipped")
    assert skipped is not None
    assert skipped.get("message") == "waived: proxy swap this week (until 2029-06-30)"
    real = by_name["denied_domain"].findtext("system-out") or ""
    assert real.startswith("failed: evil.test reached \\x1b[2J the <upstream> & more")
    assert "hosts/h1.yml" in real
    expired = by_name["audit"].find("failure")
    assert expired is not None and expired.get("type") == "waiver-expired"
    assert expired.get("message") == ("waiver expired on 2029-06-29 (log moves); the check "
                                      "passed: chains verify")
    failed = by_name["escalation"].find("failure")
    assert failed is not None and failed.get("message") == "no escalation was queued"


def test_the_schema_refuses_what_ci_would_not_read() -> None:
    # a control: the schema used above does reject a malformed report
    xml = output(report(), "junit").replace(' tests="4"', ' tests="four"', 1)  # type: ignore[arg-type]
    assert not XSD.is_valid(xml)
    assert not XSD.is_valid("<testsuites><testcase name='x'/></testsuites>")


def test_text_keeps_the_summary_line_and_marks_waivers() -> None:
    text = output(report(), "text")  # type: ignore[arg-type]
    lines = text.splitlines()
    assert lines[0].startswith("PASS  denied_read")
    assert lines[1].startswith("WAIVE denied_domain")
    assert "[waived until 2029-06-30 by hosts/h1.yml: proxy swap this week]" in lines[1]
    assert "\x1b" not in text  # what a check quotes is shown escaped
    assert lines[2].startswith("PASS  audit") and "[expired on 2029-06-29" in lines[2]
    assert lines[3].startswith("FAIL  escalation")
    assert lines[-1] == "2/4 checks passed; 1 waived; 1 waiver(s) expired"
    assert json.loads(output(report(), "json"))["checks"][1]["status"] == "waived"  # type: ignore[arg-type]


def test_drift_reports_each_path_or_one_passing_case() -> None:
    items = [DriftItem("/etc/a", "modified", "sha256 1 != 2"), DriftItem("/etc/a", "mode",
                                                                         "0600 != 0644"),
             DriftItem("/etc/b", "missing")]
    found = drift_report(items, "/etc/agent-sandbox/manifest.json", host="h", now=NOW)
    doc = to_json(found)
    assert [(c["name"], c["status"]) for c in doc["checks"]] == [("/etc/a", "failed"),
                                                                   ("/etc/b", "failed")]
    assert doc["checks"][0]["detail"] == "modified (sha256 1 != 2); mode (0600 != 0644)"
    assert doc["kind"] == "drift" and len(doc["drift"]) == 3 and not found.ok()
    XSD.validate(output(found, "junit"))
    clean = drift_report([], "/m.json", host="h", now=NOW)
    assert [(c.name, c.status) for c in clean.cases] == [("drift", "passed")] and clean.ok()
    XSD.validate(output(clean, "junit"))


def test_the_waivers_file_is_read_whole_or_refused(tmp_path: Path) -> None:
    assert read_waivers(str(tmp_path / "none.json")) == {}  # not provisioned: no waivers
    good = tmp_path / "verify.json"
    good.write_text(json.dumps({"version": 1, "waivers": [
        {"check": "audit", "justification": "j", "expires": "2029-01-01", "layer": "fleet.yml"}]}))
    assert read_waivers(str(good)) == {"audit": Waiver("audit", "j", dt.date(2029, 1, 1),
                                                       "fleet.yml")}
    torn = tmp_path / "torn.json"
    torn.write_text('{"version": 1, "waivers": [')
    with pytest.raises(VerifyError, match="cannot read the host's waivers"):
        read_waivers(str(torn))
    for bad in ({"waivers": {}}, {"waivers": [{"check": "audit", "justification": "j"}]},
                {"waivers": [{"check": "audit", "justification": "j", "expires": "soon"}]},
                {"waivers": [{"check": "a", "justification": "j", "expires": "2029-01-01"}] * 2}):
        with pytest.raises(VerifyError, match=r"verify\.json"):
            parse_waivers(bad, "verify.json")
