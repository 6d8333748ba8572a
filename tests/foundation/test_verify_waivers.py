"""The spec's ``verify`` section: waivers set in the fleet, group and host layers,
refused below a layer that lists the check under ``verify.unwaivable`` (one problem
naming both places), unknown checks and bad waivers refused, and the host's
effective waivers rendered to ``/etc/agent-sandbox/verify.json`` (never into the
policy the hooks read)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent_sandbox import contract
from agent_sandbox.errors import SpecError
from agent_sandbox.fleet import FleetRenderer
from agent_sandbox.spec.loader import load_spec

from .conftest import run_cli, write

FLEET = """
    verify:
      unwaivable: [denied_read]
      waivers:
        - {check: audit, justification: the proxy's log moves next week, expires: 2030-01-31}
"""


def inventory(tmp_path: Path, host_layer: str, group_layer: str = "version: 1\n") -> Path:
    root = tmp_path / "inv"
    write(root / "hosts.yml", """
        all:
          children:
            devs:
              hosts:
                h1: {sandbox_users: [{name: dev}]}
                h2: {sandbox_users: [{name: dev}]}
    """)
    write(root / "sandbox" / "fleet.yml", FLEET)
    write(root / "sandbox" / "groups" / "devs.yml", group_layer)
    write(root / "sandbox" / "hosts" / "h1.yml", host_layer)
    return root


def problems(*paths: Path) -> str:
    with pytest.raises(SpecError) as info:
        load_spec(*map(str, paths))
    return "\n".join(str(p) for p in info.value.problems)


def test_layers_add_waivers_and_name_where_each_comes_from(tmp_path: Path) -> None:
    root = inventory(tmp_path, """
        verify:
          waivers:
            - {check: escalation, justification: no repository on this host, expires: "2029-06-30"}
            - {check: audit, justification: the host's own reason, expires: 2029-01-01}
    """, group_layer="""
        verify:
          waivers:
            - {check: allowed_domain, justification: proxy rollout, expires: 2029-03-01}
    """)
    fr = FleetRenderer.from_path(str(root))
    h1 = {w.check: w for w in fr.spec_for("h1").verify.waivers}
    assert {c: (str(w.expires), w.layer) for c, w in h1.items()} == {
        "audit": ("2029-01-01", "hosts/h1.yml"),  # the host's replaces the fleet's
        "allowed_domain": ("2029-03-01", "groups/devs.yml"),
        "escalation": ("2029-06-30", "hosts/h1.yml")}
    h2 = {w.check: w.layer for w in fr.spec_for("h2").verify.waivers}
    assert h2 == {"audit": "fleet.yml", "allowed_domain": "groups/devs.yml"}
    # rendered for the host, sorted by check; the policy the hooks read has no verify
    arts = fr.render_host("h1")
    doc = json.loads(arts[contract.VERIFY_WAIVERS_FILE].content)
    assert arts[contract.VERIFY_WAIVERS_FILE].kind == "verify-waivers"
    assert [w["check"] for w in doc["waivers"]] == ["allowed_domain", "audit", "escalation"]
    assert doc["waivers"][1] == {"check": "audit", "justification": "the host's own reason",
                                 "expires": "2029-01-01", "layer": "hosts/h1.yml"}
    assert "verify" not in json.loads(arts[contract.POLICY_FILE].content)


def test_a_lower_layer_waiving_an_unwaivable_check_is_refused(tmp_path: Path) -> None:
    root = inventory(tmp_path, """
        verify:
          waivers:
            - {check: escalation, justification: fine, expires: 2029-01-01}
            - {check: denied_read, justification: the canary is odd, expires: 2029-01-01}
    """)
    with pytest.raises(SpecError) as info:
        FleetRenderer.from_path(str(root)).render_host("h1")
    (problem,) = info.value.problems
    text = str(problem)
    host, fleet = root / "sandbox" / "hosts" / "h1.yml", root / "sandbox" / "fleet.yml"
    assert text.startswith(f"{host}:4:")
    assert "verify.waivers[1].check: waiving 'denied_read' is refused" in text
    assert f"{fleet}:2:" in text and "verify.unwaivable" in text
    # h2 has no such layer: it renders
    assert FleetRenderer.from_path(str(root)).render_host("h2")


def test_a_group_refusal_holds_for_its_hosts_and_drops_waivers_from_above(
        tmp_path: Path) -> None:
    root = inventory(tmp_path, """
        verify:
          waivers:
            - {check: audit, justification: again, expires: 2029-01-01}
    """, group_layer="verify: {unwaivable: [audit]}\n")
    fr = FleetRenderer.from_path(str(root))
    assert fr.spec_for("h2").verify.waivers == []  # the fleet's audit waiver is gone below
    assert fr.spec_for("h2").verify.unwaivable == ["denied_read", "audit"]
    with pytest.raises(SpecError, match=r"groups/devs\.yml:1:\d+ lists it under"):
        fr.spec_for("h1")


@pytest.mark.parametrize(("waiver", "message"), [
    ("{check: denied_reads, justification: x, expires: 2029-01-01}",
     "unknown check 'denied_reads'"),
    ("{check: audit, justification: '  ', expires: 2029-01-01}", "needs a justification"),
    ("{check: audit, expires: 2029-01-01}", "justification: Field required"),
    ("{check: audit, justification: x, expires: 31.12.2029}", "expected a day as YYYY-MM-DD"),
    ("{check: audit, justification: x, expires: 1893456000}", "expected a day as YYYY-MM-DD"),
    ("{check: audit, justification: x, expires: \"2029-02-30\"}", "expected a day as YYYY-MM-DD"),
    ("{check: audit, justification: x, expires: 2029-02-30}", "day is out of range"),
    ("{check: audit, justification: x, expires: 2029-01-01T10:00:00}", "expected a day"),
    ("{check: audit, justification: \"a\\nb\", expires: 2029-01-01}", "one line"),
    ("{check: audit, justification: x, expires: 2029-01-01, layer: fleet.yml}",
     "set by the loader"),
    ("{check: audit, justification: x, expires: 2029-01-01, until: 2030-01-01}", "unknown key"),
])
def test_a_bad_waiver_is_a_clear_error(tmp_path: Path, waiver: str, message: str) -> None:
    spec = write(tmp_path / "fleet.yml", f"verify:\n  waivers:\n    - {waiver}\n")
    text = problems(spec)
    assert message in text and text.startswith(f"{spec}:"), text


def test_unknown_unwaivable_check_and_contradictions_are_refused(tmp_path: Path) -> None:
    assert "unknown check 'dns'" in problems(write(tmp_path / "a.yml",
                                                   "verify: {unwaivable: [dns]}\n"))
    both = write(tmp_path / "b.yml", """
        verify:
          unwaivable: [audit]
          waivers: [{check: audit, justification: x, expires: 2029-01-01}]
    """)
    assert "both waived and listed as unwaivable" in problems(both)
    twice = write(tmp_path / "c.yml", """
        verify:
          waivers:
            - {check: audit, justification: x, expires: 2029-01-01}
            - {check: audit, justification: y, expires: 2029-02-01}
    """)
    assert "waived twice" in problems(twice)


def test_a_repository_layer_cannot_waive_the_hosts_checks(tmp_path: Path) -> None:
    fleet = write(tmp_path / "fleet.yml", "version: 1\n")
    repo = write(tmp_path / "app" / ".sandbox" / "policy.yml", """
        verify:
          waivers: [{check: audit, justification: x, expires: 2029-01-01}]
    """)
    assert "a repository layer cannot waive the host's checks" in problems(fleet, repo)


def test_validate_reports_the_refusal_with_both_places(tmp_path: Path) -> None:
    fleet = write(tmp_path / "fleet.yml", "verify: {unwaivable: [escalation]}\n")
    host = write(tmp_path / "hosts" / "h.yml", """
        verify:
          waivers: [{check: escalation, justification: x, expires: 2029-01-01}]
    """)
    proc = run_cli("validate", str(fleet), str(host))
    assert proc.returncode != 0
    assert f"{host}:2:" in proc.stdout + proc.stderr
    assert f"{fleet}:1:" in proc.stdout + proc.stderr


def test_the_check_names_are_the_checks_verify_runs() -> None:
    from agent_sandbox.hostcheck.checks import CHECKS

    assert contract.VERIFY_CHECKS == (*(n for n, _ in CHECKS), "web_service")
