"""The fleet's reports merged on the controller (plugins/filter/agent_sandbox_report.py,
as playbooks/verify.yml calls it), with no host: one JUnit file with a suite per
host that validates against the JUnit schema, a Markdown summary with each host's
counts, failures and waivers, and a host without a readable report failed, never
left out."""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import xmlschema

from agent_sandbox.hostcheck.checks import CheckResult
from agent_sandbox.hostcheck.report import check_report, output
from agent_sandbox.hostcheck.waivers import Waiver

from .conftest import REPO

spec = importlib.util.spec_from_file_location(
    "agent_sandbox_report_filters", REPO / "plugins" / "filter" / "agent_sandbox_report.py")
assert spec is not None and spec.loader is not None
filters = importlib.util.module_from_spec(spec)
spec.loader.exec_module(filters)

XSD = xmlschema.XMLSchema(str(REPO / "tests" / "fleet" / "schemas" / "junit-10.xsd"))
NOW = dt.datetime(2029, 6, 30, 12, 0, tzinfo=dt.UTC)


def host_json(host: str, results: list[CheckResult], waivers: dict[str, Waiver]) -> str:
    return output(check_report(results, waivers, host=f"{host}.internal", now=NOW), "json")


def fleet(tmp_path: Path) -> Path:
    hosts = tmp_path / "hosts"
    hosts.mkdir()
    ok = [CheckResult("denied_read", True, "hidden"), CheckResult("audit", False, "no | log")]
    (hosts / "web-1.json").write_text(host_json("web-1", ok, {
        "audit": Waiver("audit", "log | moves", dt.date(2029, 7, 1), "hosts/web-1.yml")}))
    (hosts / "web-2.json").write_text(host_json("web-2", ok, {
        "audit": Waiver("audit", "old", dt.date(2029, 1, 1), "fleet.yml")}))
    (hosts / "ci-1.json").write_text(host_json("ci-1", [
        CheckResult("denied_read", False, "read \x1b[2J through")], {}))
    (hosts / "broken.json").write_text('{"error": "sandbox verify: no sandbox settings"}')
    (hosts / "garbage.json").write_text("PASS but not json")
    return tmp_path


HOSTS = ["web-1", "web-2", "ci-1", "broken", "garbage", "gone"]


def test_the_fleet_junit_has_a_suite_per_host_and_validates(tmp_path: Path) -> None:
    merged = filters.agent_sandbox_fleet_report(str(fleet(tmp_path)), HOSTS)
    XSD.validate(merged["junit"])
    root = ET.fromstring(merged["junit"])
    suites = {s.get("hostname"): s for s in root.iter("testsuite")}
    assert sorted(suites) == sorted(HOSTS)  # inventory names, every host
    assert all(s.get("name") == "agent-sandbox verify" for s in suites.values())
    web1 = {c.get("name"): c for c in suites["web-1"].iter("testcase")}
    assert web1["audit"].get("classname") == "agent-sandbox.web-1"
    skipped = web1["audit"].find("skipped")
    assert skipped is not None
    assert skipped.get("message") == "waived: log | moves (until 2029-07-01)"
    web2 = {c.get("name"): c for c in suites["web-2"].iter("testcase")}
    expired = web2["audit"].find("failure")
    assert expired is not None and "waiver expired on 2029-01-01" in expired.get("message", "")
    for host in ("broken", "garbage", "gone"):
        (case,) = suites[host].iter("testcase")
        assert case.get("name") == "verify" and case.find("error") is not None, host
    assert "no sandbox settings" in (suites["broken"].find("testcase/error").get("message") or "")
    assert [root.get(k) for k in ("tests", "failures", "errors")] == ["8", "2", "3"]
    assert sorted(merged["failed"]) == ["broken", "ci-1", "garbage", "gone", "web-2"]


def test_the_summary_lists_hosts_failures_and_waivers(tmp_path: Path) -> None:
    text = filters.agent_sandbox_fleet_report(str(fleet(tmp_path)), HOSTS)["summary"]
    assert "6 host(s): 1 passed, 5 failed" in text
    assert "| web-1 | ok | 1 | 0 | 1 | 0 | none |" in text
    assert "| web-2 | FAILED | 1 | 0 | 0 | 1 | audit: waiver expired 2029-01-01 |" in text
    assert "| ci-1 | FAILED | 0 | 1 | 0 | 0 | denied_read: read \\\\u001b[2J through |" in text
    assert "| gone | FAILED | 0 | 0 | 0 | 0 | no report from the host" in text
    assert ("| web-1 | audit | waived | failed | 2029-07-01 | hosts/web-1.yml | "
            "log \\| moves |") in text
    assert "\x1b" not in text
    # every table row has the columns of its header (a pipe in a detail is escaped)
    for line in text.splitlines():
        if line.startswith("| "):
            assert line.replace("\\|", "").count("|") == 8, line


def test_one_hosts_junit_from_its_report(tmp_path: Path) -> None:
    doc = host_json("web-1", [CheckResult("denied_read", True, "hidden")], {})
    xml = filters.agent_sandbox_verify_junit(doc, "web-1")
    XSD.validate(xml)
    assert ET.fromstring(xml).find("testsuite").get("hostname") == "web-1"
    none = filters.agent_sandbox_verify_junit(json.dumps({"error": "boom"}), "web-2")
    XSD.validate(none)
    assert "boom" in none
