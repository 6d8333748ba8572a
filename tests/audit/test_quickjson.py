"""``quickjson`` against the ``json`` package it stands in for on the hook's
path: the same objects from the same text, the same errors, the same bytes
(the audit chain hashes canonical bytes, so one differing byte breaks it)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_sandbox import quickjson
from agent_sandbox.audit.canonical import canonical

values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=16)


def _same(a: Any, b: Any) -> bool:
    """Equal, NaN included (NaN != NaN)."""
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def _outcome(fn: Any, arg: Any) -> tuple[str, Any]:
    try:
        return "ok", fn(arg)
    except Exception as exc:
        return type(exc).__name__, str(exc)


def _check_loads(data: Any) -> None:
    want, got = _outcome(json.loads, data), _outcome(quickjson.loads, data)
    assert want[0] == got[0], (data, want, got)
    assert _same(want[1], got[1]) if want[0] == "ok" else want[1] == got[1], (data, want, got)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=values)
def test_writes_what_json_writes(value: Any) -> None:
    assert quickjson.dumps(value) == json.dumps(value)
    strict = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                              allow_nan=False)
    want, got = _outcome(strict.encode, value), _outcome(canonical, value)
    assert want[0] == got[0]
    if want[0] == "ok":
        assert got[1] == want[1].encode("utf-8", "backslashreplace")


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=values, pad=st.sampled_from(["", " ", "\n\t ", " \r\n"]),
       tail=st.sampled_from(["", " ", "x", "]", " {}", "\x00"]))
def test_reads_what_json_reads(value: Any, pad: str, tail: str) -> None:
    text = pad + json.dumps(value) + pad + tail
    _check_loads(text)
    _check_loads(text.encode("utf-8", "surrogatepass"))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=40))
def test_garbage_fails_as_json_fails(data: bytes) -> None:
    _check_loads(data)


@pytest.mark.parametrize("data", [
    b"", b" ", b"{", b'{"a":1}x', b'\xef\xbb\xbf{"a":1}', '{"a":1}'.encode("utf-16"),
    '{"a":1}'.encode("utf-32-le"), b'{"a":NaN,"b":-Infinity}', b"[1e999]", b'"\\ud800"',
    b'{"a":1,"a":2}', b"[" * 100_000, "\ufeff{}", '{"a": "\x01"}', 3, None, bytearray(b"[1]")])
def test_edge_cases(data: Any) -> None:
    _check_loads(data)


def test_the_comparison_can_fail() -> None:
    """Control: the judge above tells different writers and readers apart."""
    with pytest.raises(AssertionError):
        assert json.dumps({"a": 1}, separators=(",", ":")) == quickjson.dumps({"a": 1})
    with pytest.raises(AssertionError):
        assert _same(json.loads("[1.0]"), json.loads("[1]"))
    with pytest.raises(AssertionError):
        _outcome_differs = _outcome(json.loads, "{") != _outcome(json.loads, "[")
        assert not _outcome_differs


@pytest.mark.parametrize("text", ["NaN", "[Infinity]", '{"a": -Infinity}', b'{"a": NaN}'])
def test_strict_refuses_what_is_not_json(text: str | bytes) -> None:
    import json

    json.loads(text)  # control: json itself takes them
    with pytest.raises(ValueError, match="is not valid JSON"):
        quickjson.loads(text, strict=True)


def test_strict_reads_json_as_json_does() -> None:
    import json

    doc = '{"a": [1, 2.5e3, null, true, "\\u00e9"], "b": {}}'
    assert quickjson.loads(doc, strict=True) == json.loads(doc)
