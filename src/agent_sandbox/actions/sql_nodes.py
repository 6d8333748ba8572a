"""Reading pglast's JSON parse trees: a wrapped node's type and fields, and every
string under a node. Pure; shared by the SQL gate's readers."""

from __future__ import annotations

import json
from typing import Any

from .plan_reading import Unreadable


def node(value: Any) -> tuple[str, dict[str, Any] | None]:
    """(type, fields) of a wrapped node ``{"Type": {...}}``."""
    if isinstance(value, dict) and len(value) == 1:
        ((kind, body),) = value.items()
        if isinstance(body, dict):
            return kind, body
    return "", None


def nodes(stmt: Any) -> list[tuple[str, dict[str, Any]]]:
    kind, body = node(stmt)
    return [(kind, body)] if body is not None else []


def strings(value: Any) -> list[str]:
    """Every String's text under ``value``, in order."""
    out: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(reversed(item))
        elif isinstance(item, dict):
            if set(item) == {"String"} and isinstance(item["String"], dict):
                out.append(str(item["String"].get("sval", "")))
            else:
                stack.extend(reversed(list(item.values())))
    return out


def parse_tree(text: str, *, plpgsql: bool = False) -> Any:
    """pglast's JSON parse tree of SQL ``text`` (or of a PL/pgSQL body): one reading
    for both, ``Unreadable`` when PostgreSQL's grammar refuses it or the tree
    cannot be read."""
    from pglast import parser

    what = "a PL/pgSQL body" if plpgsql else "it"
    try:
        return json.loads(parser.parse_plpgsql_json(text) if plpgsql
                          else parser.parse_sql_json(text))
    except parser.ParseError as exc:
        raise Unreadable(f"PostgreSQL cannot parse {what}: {exc}") from None
    except (ValueError, RecursionError):
        raise Unreadable("a PL/pgSQL body cannot be read" if plpgsql
                         else "the parse tree cannot be read") from None


def parse(text: str) -> list[dict[str, Any]]:
    """The statements of ``text`` as pglast's JSON parse tree (``Unreadable`` when
    PostgreSQL's grammar refuses it)."""
    tree = parse_tree(text)
    stmts = tree.get("stmts") if isinstance(tree, dict) else None
    return stmts if isinstance(stmts, list) else []
