"""Whether a ``WHERE`` condition keeps every row of its target: a constant truth
(``true``, ``1=1``, ``'a'='a'``, ``NOT false``, ``x = x``, ``x IS NULL OR x IS
NOT NULL``) or a condition that names no column of the target. Pure; read from
pglast's JSON parse tree (``sql_nodes``), never from the text."""

from __future__ import annotations

import json
from decimal import Decimal, InvalidOperation
from typing import Any

from .sql_nodes import node as _node
from .sql_nodes import strings as _strings

_TRUE_WORDS = ("t", "tr", "tru", "true", "y", "ye", "yes", "on", "1")
_FALSE_WORDS = ("f", "fa", "fal", "fals", "false", "n", "no", "of", "off", "0")


def selects_every_row(where: Any, target: set[str]) -> bool:
    """True when ``where`` keeps every row: it is always true, or it names no
    column of the target (its value is the same for every row: all or none)."""
    truth = _truth(where)
    if truth is not None:
        return truth
    return not _names_target(where, target)


def _names_target(expr: Any, target: set[str]) -> bool:
    """Whether ``expr`` (subqueries too) names a column that may be the
    target's: unqualified, or qualified with the target's name or alias."""
    stack = [expr]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            if "CurrentOfExpr" in item:
                return True
            ref = item.get("ColumnRef")
            if isinstance(ref, dict):
                fields = ref.get("fields") or []
                if len(fields) < 2:
                    return True
                qualifier = _strings(fields[-2])
                if not qualifier or qualifier[0] in target:
                    return True
                continue
            stack.extend(item.values())
    return False


def _plain(expr: Any) -> Any:
    """``expr`` without source positions, to compare two expressions."""
    if isinstance(expr, dict):
        return {k: _plain(v) for k, v in expr.items() if k != "location"}
    if isinstance(expr, list):
        return [_plain(v) for v in expr]
    return expr


def _has(expr: Any, kinds: tuple[str, ...]) -> bool:
    return any(f'"{k}"' in json.dumps(expr) for k in kinds)


def _constant(expr: Any) -> Any:
    """The Python value of a literal (bool, int, Decimal, str), else None."""
    kind, body = _node(expr)
    if kind != "A_Const" or body is None or body.get("isnull"):
        return None
    if "boolval" in body:
        return bool((body["boolval"] or {}).get("boolval"))
    if "ival" in body:
        return int((body["ival"] or {}).get("ival", 0))
    if "fval" in body:
        try:
            return Decimal(str((body["fval"] or {}).get("fval", "0")))
        except InvalidOperation:
            return None
    if "sval" in body:
        return str((body["sval"] or {}).get("sval", ""))
    return None


def _as_bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        word = value.strip().lower()
        if word in _TRUE_WORDS:
            return True
        if word in _FALSE_WORDS:
            return False
    return None


_SAME_TRUE = frozenset({"=", "<=", ">="})
_SAME_FALSE = frozenset({"<>", "!=", "<", ">"})


def _truth(expr: Any) -> bool | None:
    """What ``expr`` is for every row: True, False, or None (depends, or
    unknown). Volatile calls are never taken as equal to themselves."""
    kind, body = _node(expr)
    if body is None:
        return None
    if kind == "A_Const":
        return _as_bool(_constant(expr))
    if kind == "TypeCast":
        names = _strings((body.get("typeName") or {}).get("names"))
        if names and names[-1].lower() in ("bool", "boolean"):
            value = _constant(body.get("arg"))
            if isinstance(value, int) and not isinstance(value, bool):
                return value != 0
            inner = _truth(body.get("arg"))
            return inner if inner is not None else _as_bool(value)
        return None
    if kind == "BoolExpr":
        args = body.get("args") or []
        op = body.get("boolop")
        if op == "NOT_EXPR":
            inner = _truth(args[0]) if args else None
            return None if inner is None else not inner
        values = [_truth(a) for a in args]
        if op == "OR_EXPR":
            if True in values or _complementary(args):
                return True
            return False if values and all(v is False for v in values) else None
        if op == "AND_EXPR":
            if False in values:
                return False
            return True if values and all(v is True for v in values) else None
        return None
    if kind == "BooleanTest":
        inner = _truth(body.get("arg"))
        if inner is None:
            return None
        return {"IS_TRUE": inner, "IS_NOT_FALSE": inner, "IS_FALSE": not inner,
                "IS_NOT_TRUE": not inner}.get(str(body.get("booltesttype")))
    if kind == "NullTest":
        arg = _node(body.get("arg"))[1]
        if arg is not None and _node(body.get("arg"))[0] == "A_Const":
            is_null = bool(arg.get("isnull"))
            return is_null if body.get("nulltesttype") == "IS_NULL" else not is_null
        return None
    if kind == "A_Expr":
        return _comparison(body)
    return None


def _comparison(body: dict[str, Any]) -> bool | None:
    ops = _strings(body.get("name"))
    op = ops[-1] if ops else ""
    left, right = body.get("lexpr"), body.get("rexpr")
    kind = body.get("kind")
    volatile = _has([left, right], ("FuncCall", "SubLink", "ParamRef"))
    if not volatile and left is not None and _plain(left) == _plain(right):
        if kind == "AEXPR_NOT_DISTINCT":
            return True
        if kind == "AEXPR_DISTINCT":
            return False
        if kind == "AEXPR_OP":
            if op in _SAME_TRUE:
                return True
            if op in _SAME_FALSE:
                return False
    if kind != "AEXPR_OP":
        return None
    a, b = _constant(left), _constant(right)
    if a is None or b is None:
        return None
    numbers = (int, Decimal)
    same_kind = (isinstance(a, bool) and isinstance(b, bool)) or (
        isinstance(a, str) and isinstance(b, str)) or (
        isinstance(a, numbers) and isinstance(b, numbers)
        and not isinstance(a, bool) and not isinstance(b, bool))
    if not same_kind:
        return None
    compare = {"=": lambda x, y: x == y, "<>": lambda x, y: x != y, "!=": lambda x, y: x != y,
               "<": lambda x, y: x < y, ">": lambda x, y: x > y, "<=": lambda x, y: x <= y,
               ">=": lambda x, y: x >= y}
    if op not in compare:
        return None
    return bool(compare[op](a, b))


def _complementary(args: list[Any]) -> bool:
    """An OR of ``E`` and ``NOT E``, or of ``E IS NULL`` and ``E IS NOT NULL``."""
    plain = [_plain(a) for a in args]
    for item in plain:
        kind, body = _node(item)
        if kind == "BoolExpr" and body and body.get("boolop") == "NOT_EXPR":
            if (body.get("args") or [None])[0] in plain:
                return True
        if kind == "NullTest" and body:
            other = dict(body)
            other["nulltesttype"] = ("IS_NOT_NULL" if body.get("nulltesttype") == "IS_NULL"
                                     else "IS_NULL")
            if {"NullTest": other} in plain:
                return True
    return False
