"""Actions in the spec: what a declaration may say, how layers merge them (a
lower layer may switch an action off or narrow it, never add or widen one),
and how parameters reach argv (schema first, whole elements, no shell)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from agent_sandbox.actions import catalog
from agent_sandbox.actions.params import ActionParamsError, render_argv, validate
from agent_sandbox.errors import SpecError
from agent_sandbox.spec.actions import Action
from agent_sandbox.spec.loader import load_spec

QUERY: dict[str, Any] = {
    "description": "Read the orders table", "tier": "read",
    "image": "localhost/agent-sandbox-base:bookworm",
    "argv": ["psql", "--no-psqlrc", "-c", "{sql}", "--set=limit={limit}"],
    "params": {"type": "object", "additionalProperties": False, "required": ["sql"],
               "properties": {"sql": {"type": "string", "maxLength": 4000},
                              "limit": {"type": "integer", "minimum": 1, "default": 100},
                              "ref": {"type": "string"}}},
    "plan": {"kind": "sql", "param": "sql"},
    "credential": {"engine": "database", "connection": "orders", "ttl": "5m"},
    "egress": ["api.example.com"], "connect": ["127.0.0.1:5432"],
    "limits": {"timeout": "30s", "pids": 64}, "approvers": ["alice", "bob"],
}


def action(**over: Any) -> Action:
    return Action.model_validate({**QUERY, **over})


@pytest.mark.parametrize("over, fragment", [
    ({"argv": ["psql", "{nope}"]}, "does not declare"),
    ({"argv": ["psql", "{sql"]}, "lone"),
    ({"argv": ["psql", "x}"]}, "lone"),
    ({"argv": []}, "at least 1"),
    ({"params": {"type": "string"}}, "type object"),
    ({"params": {"type": "object", "properties": {"sql": {"type": "nonsense"}}}},
     "not a valid JSON Schema"),
    ({"plan": {"kind": "sql", "param": "ref"}}, "must be a required parameter"),
    ({"plan": {"kind": "sql", "param": "other"}}, "not a declared parameter"),
    ({"plan": {"kind": "shell", "param": "sql"}}, "sql"),
    ({"tier": "admin"}, "read"),
    ({"credential": {"engine": "database"}}, "needs connection"),
    ({"credential": {"engine": "kubernetes", "role": "ops"}}, "needs namespace"),
    ({"credential": {"engine": "token"}}, "needs policies"),
    ({"credential": {"engine": "database", "connection": "o", "ttl": "11m"}}, "10m"),
    ({"credential": {"engine": "database", "connection": "o", "ttl": 0}}, "between 1s"),
    ({"credential": {"engine": "database", "connection": "o", "owner": "Robert'); --"}},
     "pattern"),
    ({"connect": ["db.example.com"]}, "host:port"),
    ({"connect": ["db.example.com:99999"]}, "host:port"),
    ({"egress": ["*.com"]}, ""),
    ({"limits": {"timeout": "2h"}}, "1h"),
    ({"limits": {"memory_mb": 1}}, "16"),
    ({"image": "x; rm -rf /"}, "pattern"),
    ({"secret": "x"}, "Extra inputs"),
])
def test_a_bad_declaration_is_a_precise_error(over: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ValidationError) as info:
        action(**over)
    assert fragment in str(info.value)


def test_a_good_declaration_keeps_every_field() -> None:
    a = action()
    assert a.credential is not None and a.credential.ttl == 300
    assert a.limits.timeout == 30 and a.limits.pids == 64 and a.limits.memory_mb == 256
    assert a.connect == ["127.0.0.1:5432"]


# -- parameters into argv ------------------------------------------------------

def test_parameters_become_whole_elements_never_shell_text() -> None:
    a = action()
    sql = "select * from orders where note = '$(rm -rf ~)'; -- `id` | tee x"
    assert render_argv(a, validate(a, {"sql": sql})) == [
        "psql", "--no-psqlrc", "-c", sql, "--set=limit=100"]
    assert render_argv(a, validate(a, {"sql": "x", "limit": 7}))[-1] == "--set=limit=7"


@pytest.mark.parametrize("params, fragment", [
    ({}, "'sql' is a required property"),
    ({"sql": 5}, "is not of type 'string'"),
    ({"sql": "x", "limit": 0}, "minimum"),
    ({"sql": "x", "extra": 1}, "Additional properties"),
    ({"sql": "x" * 4001}, "is too long"),
    ("select 1", "must be an object"),
    (["sql"], "must be an object"),
])
def test_parameters_outside_the_schema_are_refused(params: Any, fragment: str) -> None:
    with pytest.raises(ActionParamsError) as info:
        validate(action(), params)
    assert fragment in str(info.value)


@pytest.mark.parametrize("value", ["--output=/etc/passwd", "-c", "-"])
def test_a_whole_element_parameter_may_not_pose_as_an_option(value: str) -> None:
    a = action()
    with pytest.raises(ActionParamsError, match="read as an option"):
        render_argv(a, validate(a, {"sql": value}))


def test_embedded_dash_is_fine_and_braces_are_literal() -> None:
    a = action(argv=["tool", "--ref={ref}", "{{literal}}", "{sql}"])
    assert render_argv(a, validate(a, {"sql": "x", "ref": "-HEAD"})) == [
        "tool", "--ref=-HEAD", "{literal}", "x"]


def test_nul_and_huge_values_are_refused() -> None:
    a = action(argv=["psql", "-c", "{sql}"], plan=None,
               params={"type": "object", "required": ["sql"],
                       "properties": {"sql": {"type": "string"}}})
    with pytest.raises(ActionParamsError, match="NUL"):
        render_argv(a, validate(a, {"sql": "a\x00b"}))
    with pytest.raises(ActionParamsError, match="KiB"):
        render_argv(a, validate(a, {"sql": "a" * (200 * 1024)}))


def test_a_missing_optional_parameter_named_by_argv_is_an_error() -> None:
    a = action(argv=["tool", "{ref}"])
    with pytest.raises(ActionParamsError, match="needs parameter ref"):
        render_argv(a, validate(a, {"sql": "x"}))


# -- layers --------------------------------------------------------------------

def _write(path: Path, data: Any) -> str:
    path.write_text(json.dumps(data) if not isinstance(data, str) else textwrap.dedent(data))
    return str(path)


def test_a_lower_layer_may_switch_off_and_narrow(tmp_path: Path) -> None:
    fleet = _write(tmp_path / "fleet.yml", {"actions": {"query": QUERY, "other": QUERY}})
    repo = _write(tmp_path / "repo.yml", {"actions": {
        "query": {"limits": {"timeout": "10s", "memory_mb": 128}, "egress": [],
                  "approvers": ["alice"]},
        "other": {"enabled": False}}})
    spec = load_spec(fleet, repo)
    q = spec.actions["query"]
    assert (q.limits.timeout, q.limits.memory_mb, q.limits.pids) == (10, 128, 64)
    assert q.egress == [] and q.approvers == ["alice"]
    assert q.argv == QUERY["argv"] and q.credential is not None
    assert spec.actions["other"].enabled is False


@pytest.mark.parametrize("lower, fragment", [
    ({"new": QUERY}, "adding action 'new'"),
    ({"query": {"tier": "destructive"}}, "changing action 'query''s tier"),
    ({"query": {"argv": ["sh", "-c", "{sql}"]}}, "changing action 'query''s argv"),
    ({"query": {"image": "evil/image:1"}}, "changing action 'query''s image"),
    ({"query": {"credential": {"engine": "token", "policies": ["root"]}}},
     "changing action 'query''s credential"),
    ({"query": {"params": {"type": "object"}}}, "changing action 'query''s params"),
    ({"query": {"limits": {"timeout": "5m"}}}, "raising 'query''s timeout"),
    ({"query": {"egress": ["evil.example.com"]}}, "'evil.example.com' is not in"),
    ({"query": {"connect": ["10.0.0.1:5432"]}}, "'10.0.0.1:5432' is not in"),
    ({"query": {"approvers": ["mallory"]}}, "'mallory' is not in"),
])
def test_a_lower_layer_cannot_add_or_widen(tmp_path: Path, lower: dict[str, Any],
                                           fragment: str) -> None:
    fleet = _write(tmp_path / "fleet.yml", {"actions": {"query": QUERY}})
    repo = _write(tmp_path / "repo.yml", {"actions": lower})
    with pytest.raises(SpecError) as info:
        load_spec(fleet, repo)
    text = str(info.value)
    assert fragment in text and "may only tighten" in text


def test_switched_off_stays_off(tmp_path: Path) -> None:
    fleet = _write(tmp_path / "fleet.yml", {"actions": {"query": {**QUERY, "enabled": False}}})
    repo = _write(tmp_path / "repo.yml", {"actions": {"query": {"enabled": True}}})
    with pytest.raises(SpecError, match="switching action 'query' back on"):
        load_spec(fleet, repo)


def test_delegation_lets_a_lower_layer_declare_actions(tmp_path: Path) -> None:
    fleet = _write(tmp_path / "fleet.yml", {"delegate": ["actions"]})
    repo = _write(tmp_path / "repo.yml", {"actions": {"query": QUERY}})
    assert "query" in load_spec(fleet, repo).actions


# -- the catalog a repository reads -------------------------------------------

def test_the_catalog_reads_the_effective_policy_and_hides_credentials(tmp_path: Path) -> None:
    (tmp_path / ".sandbox").mkdir()
    (tmp_path / ".sandbox" / "policy.json").write_text(json.dumps({"actions": {
        "query": QUERY, "off": {**QUERY, "enabled": False}}}))
    [item] = catalog.listing(str(tmp_path))
    assert item["name"] == "query" and item["tier"] == "read"
    assert item["credential"] == "database" and "connection" not in json.dumps(item)
    with pytest.raises(catalog.ActionCatalogError, match="switched off"):
        catalog.get(str(tmp_path), "off")
    with pytest.raises(catalog.ActionCatalogError, match="declared: query"):
        catalog.get(str(tmp_path), "drop-everything")


@pytest.mark.parametrize("doc, fragment", [
    ("{not json", "cannot read"),
    (json.dumps({"actions": {"q": {**QUERY, "argv": "psql"}}}), "actions.q.argv"),
])
def test_a_broken_catalog_is_a_clear_error(tmp_path: Path, doc: str, fragment: str) -> None:
    (tmp_path / ".sandbox").mkdir()
    (tmp_path / ".sandbox" / "policy.json").write_text(doc)
    with pytest.raises(catalog.ActionCatalogError, match=fragment):
        catalog.load(str(tmp_path))
    with pytest.raises(catalog.ActionCatalogError, match="sandbox init"):
        catalog.load(str(tmp_path / "nowhere"))


def test_an_incomplete_declaration_is_not_an_action(tmp_path: Path) -> None:
    fleet = _write(tmp_path / "fleet.yml", {"actions": {"query": {"enabled": True,
                                                                  "tier": "read"}}})
    with pytest.raises(SpecError, match="'query' is not declared: a declaration gives"):
        load_spec(fleet)
    fleet = _write(tmp_path / "fleet.yml", {"delegate": ["actions"]})
    repo = _write(tmp_path / "repo.yml", {"actions": {"query": {"limits": {"pids": 8}}}})
    with pytest.raises(SpecError, match="'query' is not declared above"):
        load_spec(fleet, repo)
