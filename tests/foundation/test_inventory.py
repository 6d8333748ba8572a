"""Inventories: the lean YAML reader gives safe_load's data, and a malformed
hosts.yml is a SpecError naming the host or group, never a traceback."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_sandbox.errors import SpecError
from agent_sandbox.inventory import Inventory, lean_yaml

from .conftest import EXAMPLE_FLEET, write


@pytest.mark.parametrize("text", [
    (EXAMPLE_FLEET / "hosts.yml").read_text(),
    "a: &x {b: [1, 2.5, true, null, ~, '1', 0x10, !!str 5, -3, .inf]}\nc: *x\n",
    "- {a: b}\n- [c, {d: e}]\n- 'q: r'\n- \"s\\tt\"\n- |\n  block\n",
    "",
])
def test_lean_reader_matches_safe_load(text: str) -> None:
    assert lean_yaml(io.StringIO(text)) == yaml.safe_load(text)


@pytest.mark.parametrize(("text", "key", "fragment"), [
    ("all: {hosts: [a, b]}", "all.hosts", "expected a mapping"),
    ("all: {hosts: {h: 5}}", "all.hosts.h", "must be a mapping"),
    ("all: {hosts: {h: {sandbox_os: plan9}}}", "h.sandbox_os", "unknown OS"),
    ("all: {hosts: {h: {sandbox_users: [alice]}}}", "h.sandbox_users[0]", "name: USER"),
    ("all: {hosts: {h: {sandbox_users: [{name: a, home: [x]}]}}}", "h.sandbox_users[0].home",
     "expected a path"),
    ("all: {hosts: {h: {sandbox_repositories: /x}}}", "h.sandbox_repositories", "list"),
    ("all: {hosts: {h: {sandbox_python: 3}}}", "h.sandbox_python", "expected a path"),
    ("all: {hosts: {h: {sandbox_python: 'python3'}}}", "h.sandbox_python", "absolute"),
    ("all: {hosts: {h: {sandbox_python: '/x\"; id; \"'}}}", "h.sandbox_python", "quotes"),
    ("all: {hosts: {h: {sandbox_prefix: '/opt/$(id)'}}}", "h.sandbox_prefix", "'$'"),
    ("all: {hosts: {h: {sandbox_python: 'C:\\\\py\\\\python.exe'}}}", "h.sandbox_python",
     "forward slashes"),
    ("all: {children: &a {x: {children: *a}}}", "x", "nested more than"),
    ("[1, 2]", "", "must be a mapping"),
    ("a: 1\n---\nb: 2\n", "", "one YAML document"),
    ("all: {hosts: {h: {}}}\nx: !!int abc\n", "", "invalid YAML value"),
])
def test_malformed_inventories(tmp_path: Path, text: str, key: str, fragment: str) -> None:
    write(tmp_path / "hosts.yml", text + "\n")
    with pytest.raises(SpecError) as info:
        inv = Inventory.load(str(tmp_path))
        for host in inv:
            inv.facts(host)
    [p] = info.value.problems
    assert p.file == str(tmp_path / "hosts.yml")
    assert p.key == key and fragment in p.message


def test_group_vars_inherit_and_hosts_merge(tmp_path: Path) -> None:
    write(tmp_path / "hosts.yml", """
        all:
          vars: {sandbox_os: macos}
          children:
            devs:
              vars: {sandbox_python: /opt/py/bin/python3}
              hosts:
                m1: {sandbox_users: [{name: ann}]}
            ci:
              hosts:
                m1: {sandbox_repositories: [/w]}
    """)
    write(tmp_path / "sandbox" / "groups" / "ci.yml", "commands: {default: deny}\n")
    write(tmp_path / "sandbox" / "fleet.yml", "{}\n")
    inv = Inventory.load(str(tmp_path))
    facts = inv.facts("m1")
    assert facts.os == "macos" and facts.python == "/opt/py/bin/python3"
    assert [u.home for u in facts.users] == ["/Users/ann"]
    assert facts.repositories == ("/w",) and facts.groups == ("devs", "ci")
    assert [Path(p).name for p in inv.layer_paths("m1")] == ["fleet.yml", "ci.yml"]


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8),
              st.sampled_from(["linux", "macos", "plan9", "/home/x", "sandbox_os"])),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from(["all", "hosts", "vars", "children", "h1", "g",
                                         "sandbox_os", "sandbox_users", "name", "home",
                                         "sandbox_repositories", "sandbox_python"]),
                        inner, max_size=4)),
    max_leaves=15))
def test_random_inventories_only_raise_spec_error(tmp_path: Path, data: object) -> None:
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(data), encoding="utf-8")
    try:
        inv = Inventory.load(str(tmp_path))
        for host in inv:
            inv.facts(host)
            inv.layer_paths(host)
    except SpecError as exc:
        assert exc.problems


def test_inventory_problems_carry_their_line(tmp_path: Path) -> None:
    write(tmp_path / "hosts.yml", """
        all:
          children:
            devs:
              hosts:
                ok-1: {sandbox_os: linux}
                bad-1:
                  sandbox_users: [{name: ann}]
                  sandbox_os: plan9
    """)
    inv = Inventory.load(str(tmp_path))
    inv.facts("ok-1")
    with pytest.raises(SpecError) as info:
        inv.facts("bad-1")
    [p] = info.value.problems
    assert (p.line, p.column, p.key) == (8, 11, "bad-1.sandbox_os")
    assert not inv._positions  # only the few places kept, not every key
