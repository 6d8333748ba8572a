"""A validator for OCSF 1.7 events, driven by the OCSF 1.7.0 schema JSON that
pydantic-ocsf ships (``ocsf/schemas/v1_7_0.json``: the schema's own source
form: events and objects with ``extends``, the attribute dictionary, the
types with their regular expressions, enums and constraints).

Unlike the pydantic models, it enforces what the schema says: required
attributes, no attribute a class or object does not define, each value of its
dictionary type (objects recursively, arrays, the type's regex), enum values,
``*_name`` captions that agree with their ``*_id``, ``at_least_one`` and
``just_one`` constraints, and the class, category and type ids.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any


@cache
def schema() -> dict[str, Any]:
    import ocsf

    path = Path(ocsf.__file__).parent / "schemas" / "v1_7_0.json"
    doc: dict[str, Any] = json.loads(path.read_text())
    assert doc["version"] == "1.7.0"
    return doc


def _chain(kind: str, name: str) -> list[dict[str, Any]]:
    nodes = schema()[kind]
    node = nodes[name]
    chain = [node]
    while node.get("extends") and node["extends"] in nodes:
        node = nodes[node["extends"]]
        chain.append(node)
    return chain


@cache
def merged(kind: str, name: str) -> tuple[dict[str, dict[str, Any]], dict[str, list[str]]]:
    attrs: dict[str, dict[str, Any]] = {}
    constraints: dict[str, list[str]] = {}
    for node in reversed(_chain(kind, name)):
        for k, v in (node.get("attributes") or {}).items():
            if k != "$include":
                attrs[k] = {**attrs.get(k, {}), **v}
        constraints.update(node.get("constraints") or {})
    return attrs, constraints


def category_uid_of(event: str) -> int | None:
    cats = schema()["categories_meta"]["attributes"]
    for node in _chain("events", event):
        name = node.get("category") or node.get("name")
        if name in cats:
            return int(cats[name]["uid"])
    return None


@cache
def class_for(class_uid: int) -> str | None:
    for name, ev in schema()["events"].items():
        cat = category_uid_of(name)
        if cat is not None and "uid" in ev and cat * 1000 + int(ev["uid"]) == class_uid:
            return name
    return None


_STRUCTURAL = frozenset({"class_uid", "category_uid", "type_uid"})
_PY = {"string_t": str, "integer_t": int, "long_t": int, "float_t": (int, float),
       "boolean_t": bool, "json_t": object}


def _check_value(name: str, spec: dict[str, Any], value: Any, where: str,
                 errors: list[str]) -> None:
    dic = schema()["dictionary"]["attributes"].get(name, {})
    typ = spec.get("type") or dic.get("type")
    if spec.get("is_array", dic.get("is_array")):
        if not isinstance(value, list):
            errors.append(f"{where}: must be an array")
            return
        for i, item in enumerate(value):
            _check_scalar(typ, item, f"{where}[{i}]", errors)
        return
    _check_scalar(typ, value, where, errors)
    enum = ({**(dic.get("enum") or {}), **(spec.get("enum") or {})}
            if spec.get("enum") or dic.get("enum") else None)
    if name in _STRUCTURAL:
        return  # placeholders in base_event; checked against the class below
    if enum is not None and str(value) not in enum:
        errors.append(f"{where}: {value!r} is not one of {sorted(enum)}")


def _check_scalar(typ: str | None, value: Any, where: str, errors: list[str]) -> None:
    types = schema()["dictionary"]["types"]["attributes"]
    if typ is None:
        errors.append(f"{where}: no type in the schema")
        return
    if typ in schema()["objects"] and typ != "object":
        if not isinstance(value, dict):
            errors.append(f"{where}: must be an object ({typ})")
        else:
            validate_object(typ, value, where, errors)
        return
    if typ in ("object_t", "object"):  # free-form (``unmapped``)
        if not isinstance(value, dict):
            errors.append(f"{where}: must be an object")
        return
    base = typ
    regexes = []
    while base in types and base not in _PY:
        if types[base].get("regex"):
            regexes.append(types[base]["regex"])
        base = types[base].get("type", base) if types[base].get("type") != base else base
        if base == typ:
            break
    if base not in _PY:
        errors.append(f"{where}: unknown type {typ}")
        return
    want = _PY[base]
    if isinstance(value, bool) and base != "boolean_t":
        errors.append(f"{where}: {value!r} is a boolean, not {typ}")
    elif not isinstance(value, want):
        errors.append(f"{where}: {value!r} is not {typ}")
    elif isinstance(value, str):
        for rx in regexes:
            if not re.fullmatch(rx, value):
                errors.append(f"{where}: {value!r} does not match {typ}")


def _check_fields(kind: str, name: str, obj: dict[str, Any], where: str,
                  errors: list[str]) -> None:
    attrs, constraints = merged(kind, name)
    for attr, spec in attrs.items():
        if spec.get("requirement") == "required" and attr not in obj:
            errors.append(f"{where}: required attribute {attr!r} of {name} is missing")
    for key, value in obj.items():
        if key not in attrs:
            errors.append(f"{where}: {key!r} is not an attribute of {name}")
            continue
        _check_value(key, attrs[key], value, f"{where}.{key}", errors)
        if key.endswith("_id") and key != "type_uid":
            cap = key[:-3] + "_name" if key[:-3] + "_name" in attrs else (
                key[:-3] if key[:-3] in attrs and key[:-3] != key else None)
            enum = {**(schema()["dictionary"]["attributes"].get(key, {}).get("enum") or {}),
                    **(attrs[key].get("enum") or {})}
            if cap and cap in obj and enum and str(value) in enum and str(value) != "99":
                if obj[cap] != enum[str(value)]["caption"]:
                    errors.append(f"{where}.{cap}: {obj[cap]!r} disagrees with {key}={value} "
                                  f"({enum[str(value)]['caption']!r})")
    for rule, names in constraints.items():
        present = [n for n in names if n in obj]
        if rule == "at_least_one" and not present:
            errors.append(f"{where}: {name} needs at least one of {names}")
        if rule == "just_one" and len(present) != 1:
            errors.append(f"{where}: {name} needs exactly one of {names}, has {present}")


def validate_object(name: str, obj: dict[str, Any], where: str, errors: list[str]) -> None:
    _check_fields("objects", name, obj, where, errors)


def validate_event(ev: dict[str, Any]) -> list[str]:
    """Every way ``ev`` breaks the OCSF 1.7 schema (empty: valid)."""
    errors: list[str] = []
    uid = ev.get("class_uid")
    name = class_for(uid) if isinstance(uid, int) else None
    if name is None:
        return [f"class_uid {uid!r} is no OCSF 1.7 class"]
    _check_fields("events", name, ev, name, errors)
    cat = category_uid_of(name)
    if ev.get("category_uid") != cat:
        errors.append(f"{name}: category_uid {ev.get('category_uid')!r}, expected {cat}")
    if isinstance(ev.get("activity_id"), int) and ev.get("type_uid") != uid * 100 + ev[
            "activity_id"]:
        errors.append(f"{name}: type_uid {ev.get('type_uid')!r} is not class_uid*100+activity_id")
    return errors
