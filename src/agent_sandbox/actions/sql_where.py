"""Whether a statement that changes rows already there pins the rows it
touches, or is a destructive signal: an allowlist, because whether a condition
is a tautology is undecidable, and a list of known tautologies (``true``, ``id
= id``, ...) always misses the next one (``ctid IS NOT NULL``, ``id = id + 0``,
``id IN (SELECT id FROM t)``).

A ``WHERE`` (or a ``MERGE``'s ``ON``) pins its rows when, read as a top-level
``AND`` of conjuncts, at least one conjunct is an equality of a plain column of
the target with constants: ``col = const``, ``const = col`` or ``col IN (const,
...)``, with ``=`` itself as the operator (``pg_catalog.=`` too). The column
is unqualified (only where nothing but the target is in scope) or qualified
with the target's name, or with its alias when it has one; never a system
column (``ctid``, ``tableoid``, ``xmin``, ...) or a whole row. A constant is a
literal, a literal under plain casts, or ``$n`` outside function bodies (one
value for the whole statement). Nothing else pins: ranges, ``IS [NOT] NULL``,
``OR`` at the top level, functions, subqueries, ``CURRENT OF``, a column
compared with a column.

The statements: ``DELETE`` and ``UPDATE`` are signals unless their ``WHERE``
pins; in a function's body always (a name there may be a parameter, given per
call, and a query may call once per row). ``INSERT ... ON CONFLICT DO UPDATE``
is a signal unless its rows are a VALUES list of constants (then it touches at
most that many; its own ``WHERE`` only narrows). ``MERGE`` with ``UPDATE`` or
``DELETE`` is a signal unless its source is a VALUES list of constants and its
``ON`` pins the target to constants or to that source's columns; ``WHEN NOT
MATCHED BY SOURCE`` is one always. Each reason says that a human judges.

Pure; read from pglast's JSON parse tree (``sql_nodes``), never from the text.
It never calls a statement harmless on what it cannot read: an unknown shape
does not pin.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .sql_nodes import node as _node
from .sql_nodes import strings as _strings

SYSTEM_COLUMNS = frozenset({"ctid", "tableoid", "xmin", "xmax", "cmin", "cmax", "oid"})
_EQUALS = (["="], ["pg_catalog", "="])
_PLAIN_SELECT = frozenset({"valuesLists", "limitOption", "op"})  # VALUES and nothing else


@dataclass(frozen=True)
class Scope:
    """How the names of one statement's condition read. ``qualifiers``: what
    qualifies a column of the target (its alias if it has one, else its name);
    ``bare``: whether an unqualified name is the target's (nothing else is in
    scope: no ``USING``, ``FROM`` or ``MERGE`` source); ``params``: whether
    ``$n`` is one value for the whole statement; ``fixed``: qualifiers whose
    columns are constants (a ``MERGE`` source that is a VALUES list of
    constants)."""

    qualifiers: frozenset[str]
    bare: bool
    params: bool
    fixed: frozenset[str] = frozenset()


def conjuncts(expr: Any) -> list[Any]:
    """``expr`` as the conjuncts of its top-level ``AND`` (nested ``AND``s flattened)."""
    out: list[Any] = []
    stack = [expr]
    while stack:
        item = stack.pop()
        kind, body = _node(item)
        if kind == "BoolExpr" and body is not None and body.get("boolop") == "AND_EXPR":
            stack.extend(reversed(body.get("args") or []))
        else:
            out.append(item)
    return out


def pins_rows(where: Any, scope: Scope) -> bool:
    """Whether ``where`` has a conjunct that pins the target by equality to constants."""
    if where is None:
        return False
    return any(_pins(c, scope) for c in conjuncts(where))


def _pins(expr: Any, scope: Scope) -> bool:
    kind, body = _node(expr)
    if kind != "A_Expr" or body is None or _strings(body.get("name")) not in _EQUALS:
        return False
    left, right = body.get("lexpr"), body.get("rexpr")
    if body.get("kind") == "AEXPR_OP":
        return (_target_column(left, scope) and is_constant(right, scope)) or (
            _target_column(right, scope) and is_constant(left, scope))
    if body.get("kind") == "AEXPR_IN":
        items = _list_items(right)
        return _target_column(left, scope) and bool(items) and all(
            is_constant(i, scope) for i in items)
    return False


def _list_items(value: Any) -> list[Any]:
    if isinstance(value, list):
        return value
    kind, body = _node(value)
    if kind == "List" and body is not None and isinstance(body.get("items"), list):
        return list(body["items"])
    return []


def _column_fields(expr: Any) -> list[str] | None:
    """The names of a column reference, or None (not one, or a whole row ``t.*``)."""
    kind, body = _node(expr)
    if kind != "ColumnRef" or body is None:
        return None
    fields = body.get("fields") or []
    names: list[str] = []
    for field in fields:
        part, inner = _node(field)
        if part != "String" or inner is None:
            return None
        names.append(str(inner.get("sval", "")))
    return names or None


def _target_column(expr: Any, scope: Scope) -> bool:
    names = _column_fields(expr)
    if names is None or names[-1] in SYSTEM_COLUMNS:
        return False
    if len(names) == 1:
        return scope.bare
    return len(names) == 2 and names[0] in scope.qualifiers


def is_constant(expr: Any, scope: Scope) -> bool:
    """A literal (``NULL`` too), a literal under plain casts, ``$n`` where it is
    one value for the statement, or a column of a ``fixed`` source."""
    kind, body = _node(expr)
    if body is None:
        return False
    if kind == "A_Const":
        return True
    if kind == "TypeCast":
        return is_constant(body.get("arg"), scope)
    if kind == "ParamRef":
        return scope.params
    names = _column_fields(expr)
    return names is not None and len(names) == 2 and names[0] in scope.fixed


def constant_values(select: Any, scope: Scope, defaults: bool = False) -> int | None:
    """How many rows ``select`` has when it is a VALUES list of constants and
    nothing else (``DEFAULT`` counts as one when ``defaults``); None otherwise."""
    kind, body = _node(select)
    if kind != "SelectStmt" or body is None or not set(body) <= _PLAIN_SELECT:
        return None
    rows = body.get("valuesLists")
    if not isinstance(rows, list) or not rows:
        return None
    for row in rows:
        items = _list_items(row)
        if not items:
            return None
        for item in items:
            if defaults and _node(item)[0] == "SetToDefault":
                continue
            if not is_constant(item, Scope(frozenset(), False, scope.params)):
                return None
    return len(rows)


# ------------------------------------------------ the statements that change rows

HUMAN = "a human judges"
# in a function's body a name may be one of its parameters (a SQL function's,
# qualified with the function's name too; a PL/pgSQL variable or block label):
# the caller's values, which a query may pass once per row
IN_A_BODY = f"(in a function's body its names may be parameters: {HUMAN})"


def target_scope(rv: dict[str, Any], bare: bool, params: bool = True,
                 fixed: frozenset[str] = frozenset()) -> Scope:
    """How a condition on the target ``rv`` (a RangeVar) reads: its alias
    qualifies its columns when it has one (its name then no longer does), else
    its name."""
    alias = (rv.get("alias") or {}).get("aliasname")
    qualifier = str(alias) if alias else str(rv.get("relname") or "")
    return Scope(qualifiers=frozenset({qualifier}), bare=bare, params=params, fixed=fixed)


def dml_reason(body: dict[str, Any], in_body: bool) -> str | None:
    """Why a ``DELETE`` or ``UPDATE`` is a signal, or None when its ``WHERE``
    pins its rows. ``in_body``: it is in a function's body."""
    where = body.get("whereClause")
    others = body.get("usingClause") or body.get("fromClause")
    if where is None:
        return "(no WHERE)"
    if in_body:
        return IN_A_BODY
    if not pins_rows(where, target_scope(body.get("relation") or {}, bare=not others)):
        return f"(WHERE does not pin rows by equality: {HUMAN})"
    return None


def upsert_reason(body: dict[str, Any], in_body: bool) -> str | None:
    """Why an ``INSERT`` is a signal, or None: ``DO UPDATE`` changes rows already
    there, at most one per row of a VALUES list of constants, any number for
    the rows a query yields (its own ``WHERE`` only narrows)."""
    conflict = body.get("onConflictClause") or {}
    if conflict.get("action") != "ONCONFLICT_UPDATE":
        return None
    scope = target_scope(body.get("relation") or {}, bare=False, params=not in_body)
    if constant_values(body.get("selectStmt"), scope, defaults=True) is None:
        return f"ON CONFLICT DO UPDATE (its rows are not a VALUES list of constants: {HUMAN})"
    return None


def merge_reason(body: dict[str, Any], in_body: bool) -> str | None:
    """Why a ``MERGE`` is a signal, or None: only ``UPDATE`` and ``DELETE``
    change rows already there; they are pinned when the source is a VALUES list
    of constants and ``ON`` pins the target to constants or to the source's
    columns (one row of constants at a time)."""
    clauses = [_node(c)[1] or {} for c in body.get("mergeWhenClauses") or []]
    touching = [c for c in clauses if c.get("commandType") in ("CMD_UPDATE", "CMD_DELETE")]
    if not touching:  # INSERT or DO NOTHING: no row already there changes
        return None
    verbs = "... " + "/".join(dict.fromkeys(str(c["commandType"])[4:] for c in touching))
    kind, source = _node(body.get("sourceRelation"))
    alias = ((source or {}).get("alias") or {}).get("aliasname")
    scope = target_scope(body.get("relation") or {}, bare=False,
                         fixed=frozenset({str(alias)} if alias else ()))
    rows = constant_values((source or {}).get("subquery"), scope) if (
        kind == "RangeSubselect") else None
    if any(c.get("matchKind") == "MERGE_WHEN_NOT_MATCHED_BY_SOURCE" for c in touching):
        return f"{verbs} WHEN NOT MATCHED BY SOURCE (every row the source does not name: {HUMAN})"
    if in_body:
        return f"{verbs} {IN_A_BODY}"
    if rows is None:
        return f"{verbs} (its source is not a VALUES list of constants: {HUMAN})"
    if not pins_rows(body.get("joinCondition"), scope):
        return f"{verbs} (ON does not pin rows by equality: {HUMAN})"
    return None
