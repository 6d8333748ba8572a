"""No traceback for bad input: random and mutated specs reach the loader, the
layer merge and the ``validate`` command, and the only error is SpecError.
Any spec that loads must also render: its JSON and TOML parse, and its Claude
Code settings and Codex hooks validate against the published schemas."""

from __future__ import annotations

import io
import json
import tomllib
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_sandbox.cli.main import run
from agent_sandbox.errors import SpecError
from agent_sandbox.inventory import HostFacts, User
from agent_sandbox.render import render
from agent_sandbox.spec.loader import load_stack, parse_yaml

from .conftest import EXAMPLE_FLEET, load_schema


def claude_validator() -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator(
        load_schema("claude-code", "claude-code-settings.schema.json"))


def codex_hooks_validator() -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator(load_schema("codex", "codex-hooks.schema.json"))

FLEET_TEXT = (EXAMPLE_FLEET / "sandbox" / "fleet.yml").read_text(encoding="utf-8")
FLEET_DATA = yaml.safe_load(FLEET_TEXT)
FUZZ = settings(max_examples=200, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

HOSTS = [
    HostFacts("l", "linux", (User("u", "/home/u"),), ("/home/u/r",)),
    HostFacts("m", "macos", (User("u", "/Users/u"),), ("/Users/u/r",)),
    HostFacts("w", "windows", (User("u", "C:/Users/u"),), ("C:/Users/u/r",)),
]

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True),
    st.text(max_size=20),
    st.sampled_from(["*", "*.com", "github.com", "~/.ssh", "**/.env", "30m", "allow", "deny",
                     "Bash(ls *)", "https://x.y", "0x7f.1", "[::1]", "claude", "", "\x00"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.text(max_size=12), inner, max_size=4)),
    max_leaves=12,
)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*prefix, i))
    return out


ALL_PATHS = _paths(FLEET_DATA)[1:]


@st.composite
def mutated_specs(draw: st.DrawFn) -> Any:
    data = json.loads(json.dumps(FLEET_DATA))
    for _ in range(draw(st.integers(1, 4))):
        path = draw(st.sampled_from(ALL_PATHS))
        parent: Any = data
        try:
            for part in path[:-1]:
                parent = parent[part]
            op = draw(st.sampled_from(["replace", "delete", "add"]))
            if op == "replace":
                parent[path[-1]] = draw(values)
            elif op == "delete":
                del parent[path[-1]]
            elif isinstance(parent, dict):
                parent[draw(st.text(max_size=10))] = draw(values)
            else:
                parent.append(draw(values))
        except (KeyError, IndexError, TypeError, AttributeError):
            continue
    return data


@st.composite
def mutated_text(draw: st.DrawFn) -> str:
    text = FLEET_TEXT
    for _ in range(draw(st.integers(1, 6))):
        i = draw(st.integers(0, len(text)))
        j = min(len(text), i + draw(st.integers(0, 8)))
        text = text[:i] + draw(st.text(alphabet="{}[]:,-&*!|>'\"#\n\t ?%@`aZ09.~/", max_size=6)) \
            + text[j:]
    return text


def check_layers(texts: list[str]) -> None:
    try:
        spec = load_stack([parse_yaml(t, f"layer{i}.yml") for i, t in enumerate(texts)])
    except SpecError as exc:
        assert exc.problems
        for p in exc.problems:
            assert p.line >= 1 and p.column >= 1 and p.file.startswith("layer")
            assert p.message and "Traceback" not in p.message
        return
    for facts in HOSTS:
        for art in render(spec, facts).values():
            if art.target.endswith(".json"):
                doc = json.loads(art.content)
                if art.kind in ("claude-managed-settings", "claude-settings"):
                    errors = list(claude_validator().iter_errors(doc))
                    assert not errors, [e.message for e in errors[:3]]
                elif art.kind == "codex-hooks":
                    assert not list(codex_hooks_validator().iter_errors(doc))
            elif art.target.endswith(".toml"):
                tomllib.loads(art.content.decode())


def dump(data: Any) -> str:
    return yaml.safe_dump(data, allow_unicode=True, sort_keys=False)


@FUZZ
@given(st.text(max_size=300))
def test_random_text(text: str) -> None:
    check_layers([text])


@FUZZ
@given(mutated_text())
def test_mutated_text(text: str) -> None:
    check_layers([text])


@FUZZ
@given(mutated_specs())
def test_mutated_structure(data: Any) -> None:
    check_layers([dump(data)])


@settings(FUZZ, max_examples=100)
@given(mutated_specs(), mutated_specs())
def test_mutated_layer_stacks(upper: Any, lower: Any) -> None:
    check_layers([FLEET_TEXT, dump(lower)])
    check_layers([dump(upper), dump(lower)])


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.one_of(mutated_text(), mutated_specs().map(dump)))
def test_validate_command_never_raises(tmp_path: Path, text: str) -> None:
    path = tmp_path / "spec.yml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    err, out = io.StringIO(), io.StringIO()
    with redirect_stderr(err), redirect_stdout(out):
        code = run(["validate", str(EXAMPLE_FLEET / "sandbox" / "fleet.yml"), str(path)])
    assert code in (0, 1)
    assert "Traceback" not in err.getvalue()
    if code == 1:
        lines = err.getvalue().strip().splitlines()
        assert lines[-1].endswith("found")
        assert all(line.startswith(str(tmp_path)) or line.startswith(str(EXAMPLE_FLEET))
                   for line in lines[:-1]), lines
