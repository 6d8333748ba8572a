"""Whether a statement that changes rows already there pins the rows it
touches, and how many, or is a destructive signal: an allowlist, because
whether a condition is a tautology is undecidable, and a list of known
tautologies (``true``, ``id = id``, ...) always misses the next one (``ctid IS
NOT NULL``, ``id = id + 0``, ``id IN (SELECT id FROM t)``).

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

A value that may be a boolean never pins, for a boolean column has two values
and ``flag IN (true, false)`` names them all: ``true``/``false``, a cast to
``boolean`` (or to a type the reader does not know: a domain over boolean), a
string PostgreSQL reads as a boolean (``'t'``, ``'yes'``, ``'off'``, ``'1'``,
...: the reader does not know the column's type), and ``$n`` at the top level
(its value comes from outside the plan). Inside ``PREPARE`` ``$n`` pins; each
``EXECUTE`` passes its values, and the plan reader judges those.

How many: an equality names one value, ``IN`` as many as it lists (a ``MERGE``
source column as many as the source has rows); a statement touches at most
the fewest any of its pinning conjuncts names. That is a count of rows when the
column is a key, and the summary says which column, so an approver sees a
statement pinned by a column that is not. The plan reader adds the bounds of
all pinned statements up and stops a plan that names too many.

The statements: ``DELETE`` and ``UPDATE`` are signals unless their ``WHERE``
pins; in a function's body always (a name there may be a parameter, given per
call, and a query may call once per row). ``INSERT ... ON CONFLICT DO UPDATE``
is a signal unless its rows are a VALUES list of constants (then it touches at
most that many: its conflict target is unique; its own ``WHERE`` only
narrows). ``MERGE`` with ``UPDATE`` or ``DELETE`` is a signal unless its source
is a VALUES list of constants and its ``ON`` pins the target to constants or to
that source's columns; ``WHEN NOT MATCHED BY SOURCE`` is one always. Each
reason says that a human judges.

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
# every text PostgreSQL's boolean input reads (parse_bool: a unique prefix of
# true/false/yes/no, on/off, 1/0; case and surrounding blanks ignored)
BOOLEAN_WORDS = frozenset({"t", "tr", "tru", "true", "f", "fa", "fal", "fals", "false", "y",
                           "ye", "yes", "n", "no", "on", "of", "off", "1", "0"})
# built-in types a value cast to is known not to be a boolean (pg_catalog's, or unqualified)
NOT_BOOLEAN_TYPES = frozenset({
    "int2", "int4", "int8", "smallint", "integer", "int", "bigint", "numeric", "decimal",
    "float4", "float8", "real", "text", "varchar", "bpchar", "char", "uuid", "date",
    "timestamp", "timestamptz", "time", "timetz", "interval", "bytea", "oid", "name", "money",
    "inet", "cidr", "macaddr", "json", "jsonb",
})
_EQUALS = (["="], ["pg_catalog", "="])
_PLAIN_SELECT = frozenset({"valuesLists", "limitOption", "op"})  # VALUES and nothing else


@dataclass(frozen=True)
class Scope:
    """How the names of one statement's condition read. ``qualifiers``: what
    qualifies a column of the target (its alias if it has one, else its name);
    ``bare``: whether an unqualified name is the target's (nothing else is in
    scope: no ``USING``, ``FROM`` or ``MERGE`` source); ``params``: whether
    ``$n`` is one value for the whole statement; ``prepared``: whether that
    value is judged where it is given (an ``EXECUTE`` of a ``PREPARE``), else
    it may be a boolean; ``fixed``: qualifiers whose columns are constants (a
    ``MERGE`` source that is a VALUES list of constants), ``fixed_rows`` how
    many rows that source has, ``fixed_boolean`` whether any of its values may
    be a boolean."""

    qualifiers: frozenset[str]
    bare: bool
    params: bool
    prepared: bool = False
    fixed: frozenset[str] = frozenset()
    fixed_rows: int = 0
    fixed_boolean: bool = False


@dataclass(frozen=True)
class Touch:
    """What a statement does to rows already there: ``reason`` why it is a
    signal (then nothing else is known); else at most ``bound`` rows, pinned by
    the column ``by`` (0 rows and no column: it touches none)."""

    reason: str | None = None
    bound: int = 0
    by: str = ""


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


def pinned(where: Any, scope: Scope, booleans: bool = False) -> tuple[int, str] | None:
    """(at most how many rows, by which column) when ``where`` has a conjunct
    that pins the target by equality to constants, the fewest of all; None
    when none does. ``booleans``: whether values that may be booleans pin (only
    to tell an approver why nothing pinned)."""
    if where is None:
        return None
    pins = [p for p in (_pin(c, scope, booleans) for c in conjuncts(where)) if p is not None]
    return min(pins) if pins else None


def _pin(expr: Any, scope: Scope, booleans: bool) -> tuple[int, str] | None:
    kind, body = _node(expr)
    if kind != "A_Expr" or body is None or _strings(body.get("name")) not in _EQUALS:
        return None
    left, right = body.get("lexpr"), body.get("rexpr")
    if body.get("kind") == "AEXPR_OP":
        for column, value in ((left, right), (right, left)):
            if _target_column(column, scope) and is_constant(value, scope):
                count = _count([value], scope, booleans)
                return None if count is None else (count, _column_name(column))
        return None
    if body.get("kind") == "AEXPR_IN":
        items = _list_items(right)
        if not (_target_column(left, scope) and items and all(
                is_constant(i, scope) for i in items)):
            return None
        count = _count(items, scope, booleans)
        return None if count is None else (count, _column_name(left))
    return None


def _count(values: list[Any], scope: Scope, booleans: bool) -> int | None:
    """How many rows of a key column ``values`` name (a source column: one per
    source row); None when one may be a boolean (it names no key)."""
    if not booleans and any(may_be_boolean(v, scope) for v in values):
        return None
    return sum(scope.fixed_rows if _is_fixed(v, scope) else 1 for v in values)


def _column_name(expr: Any) -> str:
    names = _column_fields(expr) or ["?"]
    return names[-1]


def may_be_boolean(expr: Any, scope: Scope) -> bool:
    """Whether the constant ``expr`` may be a boolean: ``true``/``false``, a
    string PostgreSQL reads as one, a cast to ``boolean`` or to a type not known
    to be another, ``$n`` whose value is not judged elsewhere, a column of a
    source holding any of these."""
    kind, body = _node(expr)
    if body is None:
        return True
    if kind == "A_Const":
        if "boolval" in body:
            return True
        text = (body.get("sval") or {}).get("sval") if isinstance(body.get("sval"), dict) else None
        return isinstance(text, str) and text.strip().lower() in BOOLEAN_WORDS
    if kind == "TypeCast":
        names = [n.lower() for n in _strings((body.get("typeName") or {}).get("names"))]
        builtin = len(names) == 1 or (len(names) == 2 and names[0] == "pg_catalog")
        return not (builtin and names[-1] in NOT_BOOLEAN_TYPES)
    if kind == "ParamRef":
        return not scope.prepared
    if _is_fixed(expr, scope):
        return scope.fixed_boolean
    return True


def _is_fixed(expr: Any, scope: Scope) -> bool:
    names = _column_fields(expr)
    return names is not None and len(names) == 2 and names[0] in scope.fixed


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
    return _is_fixed(expr, scope)


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


def _any_boolean(select: Any, scope: Scope) -> bool:
    """Whether any value of a VALUES list of constants may be a boolean."""
    _, body = _node(select)
    return any(may_be_boolean(item, scope) for row in (body or {}).get("valuesLists") or []
               for item in _list_items(row))


# ------------------------------------------------ the statements that change rows

HUMAN = "a human judges"
# in a function's body a name may be one of its parameters (a SQL function's,
# qualified with the function's name too; a PL/pgSQL variable or block label):
# the caller's values, which a query may pass once per row
IN_A_BODY = f"(in a function's body its names may be parameters: {HUMAN})"


def target_scope(rv: dict[str, Any], bare: bool, params: bool = True,
                 prepared: bool = False) -> Scope:
    """How a condition on the target ``rv`` (a RangeVar) reads: its alias
    qualifies its columns when it has one (its name then no longer does), else
    its name."""
    alias = (rv.get("alias") or {}).get("aliasname")
    qualifier = str(alias) if alias else str(rv.get("relname") or "")
    return Scope(qualifiers=frozenset({qualifier}), bare=bare, params=params, prepared=prepared)


def _not_pinned(where: Any, scope: Scope, clause: str) -> str:
    if pinned(where, scope, booleans=True) is not None:
        return (f"({clause} compares with values that may be booleans, which pin no rows: "
                f"{HUMAN})")
    return f"({clause} does not pin rows by equality: {HUMAN})"


def dml_touch(body: dict[str, Any], in_body: bool, prepared: bool = False) -> Touch:
    """What a ``DELETE`` or ``UPDATE`` touches. ``in_body``: it is in a
    function's body; ``prepared``: in a ``PREPARE`` (``$n`` is judged where
    ``EXECUTE`` gives it)."""
    where = body.get("whereClause")
    others = body.get("usingClause") or body.get("fromClause")
    if where is None:
        return Touch("(no WHERE)")
    if in_body:
        return Touch(IN_A_BODY)
    scope = target_scope(body.get("relation") or {}, bare=not others, prepared=prepared)
    pin = pinned(where, scope)
    if pin is None:
        return Touch(_not_pinned(where, scope, "WHERE"))
    return Touch(None, pin[0], pin[1])


def upsert_touch(body: dict[str, Any], in_body: bool) -> Touch:
    """What an ``INSERT`` touches: ``DO UPDATE`` changes rows already there, at
    most one per row of a VALUES list of constants (the conflict target is
    unique), any number for the rows a query yields (its own ``WHERE`` only
    narrows); anything else none."""
    conflict = body.get("onConflictClause") or {}
    if conflict.get("action") != "ONCONFLICT_UPDATE":
        return Touch()
    scope = target_scope(body.get("relation") or {}, bare=False, params=not in_body)
    rows = constant_values(body.get("selectStmt"), scope, defaults=True)
    if rows is None:
        return Touch(f"ON CONFLICT DO UPDATE (its rows are not a VALUES list of constants: "
                     f"{HUMAN})")
    elems = [_node(e)[1] or {} for e in (conflict.get("infer") or {}).get("indexElems") or []]
    by = ", ".join(str(e["name"]) for e in elems[:3] if e.get("name")) or "its key"
    return Touch(None, rows, by)


def merge_touch(body: dict[str, Any], in_body: bool, prepared: bool = False) -> Touch:
    """What a ``MERGE`` touches: only ``UPDATE`` and ``DELETE`` change rows
    already there; they are pinned when the source is a VALUES list of
    constants and ``ON`` pins the target to constants or to the source's
    columns (one row of constants at a time)."""
    clauses = [_node(c)[1] or {} for c in body.get("mergeWhenClauses") or []]
    touching = [c for c in clauses if c.get("commandType") in ("CMD_UPDATE", "CMD_DELETE")]
    if not touching:  # INSERT or DO NOTHING: no row already there changes
        return Touch()
    verbs = "... " + "/".join(dict.fromkeys(str(c["commandType"])[4:] for c in touching))
    kind, source = _node(body.get("sourceRelation"))
    alias = ((source or {}).get("alias") or {}).get("aliasname")
    scope = target_scope(body.get("relation") or {}, bare=False, prepared=prepared)
    subquery = (source or {}).get("subquery")
    rows = constant_values(subquery, scope) if kind == "RangeSubselect" else None
    if any(c.get("matchKind") == "MERGE_WHEN_NOT_MATCHED_BY_SOURCE" for c in touching):
        return Touch(f"{verbs} WHEN NOT MATCHED BY SOURCE (every row the source does not "
                     f"name: {HUMAN})")
    if in_body:
        return Touch(f"{verbs} {IN_A_BODY}")
    if rows is None:
        return Touch(f"{verbs} (its source is not a VALUES list of constants: {HUMAN})")
    scope = Scope(scope.qualifiers, False, True, prepared,
                  fixed=frozenset({str(alias)} if alias else ()), fixed_rows=rows,
                  fixed_boolean=_any_boolean(subquery, scope))
    pin = pinned(body.get("joinCondition"), scope)
    if pin is None:
        return Touch(f"{verbs} {_not_pinned(body.get('joinCondition'), scope, 'ON')}")
    return Touch(None, pin[0], pin[1])
