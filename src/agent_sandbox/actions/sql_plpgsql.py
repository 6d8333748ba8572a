"""The SQL inside a PL/pgSQL function body, read with PostgreSQL's PL/pgSQL
parser (pglast): every embedded statement and expression as SQL the gate reads
again, and dynamic SQL (``EXECUTE``), which no reader can judge. Pure."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .plan_reading import Unreadable
from .sql_nodes import parse_tree


def embedded_sql(source: str) -> Iterator[str | None]:
    """Each statement the body ``source`` runs, as SQL text; None for each dynamic
    statement. Raises ``Unreadable``."""
    stack: list[Any] = [parse_tree(source, plpgsql=True)]
    while stack:
        value = stack.pop()
        if isinstance(value, list):
            stack.extend(value)
            continue
        if not isinstance(value, dict):
            continue
        for key, child in value.items():
            if key in ("PLpgSQL_stmt_dynexecute", "PLpgSQL_stmt_dynfors") or (
                    key == "dynquery" and child):
                yield None
            if key == "PLpgSQL_expr" and isinstance(child, dict):
                yield from statements(child)
            elif isinstance(child, (dict, list)):
                stack.append(child)


def statements(expr: dict[str, Any]) -> list[str]:
    """The SQL an embedded PL/pgSQL expression stands for, as statements the
    SQL grammar parses (PostgreSQL's raw parse modes of RawParseMode)."""
    query = str(expr.get("query") or "")
    mode = int(expr.get("parseMode") or 0)
    if mode == 0:
        return [query]
    if mode == 2:
        return ["SELECT " + query]
    if mode in (3, 4, 5):
        target, value = split_assignment(query)
        return ["SELECT " + target, "SELECT " + value]
    raise Unreadable(f"a PL/pgSQL expression in parse mode {mode} cannot be read")


def split_assignment(query: str) -> tuple[str, str]:
    """``target := value`` (or ``=``) at the first assignment token outside
    brackets, found with the SQL scanner, not by text search."""
    from pglast import parser

    depth = 0
    try:
        tokens = parser.scan(query)  # offsets in characters, the end inclusive
    except parser.ParseError as exc:
        raise Unreadable(f"a PL/pgSQL assignment cannot be read: {exc}") from None
    for token in tokens:
        if token.name in ("ASCII_40", "ASCII_91"):  # ( [
            depth += 1
        elif token.name in ("ASCII_41", "ASCII_93"):  # ) ]
            depth -= 1
        elif depth == 0 and token.name in ("COLON_EQUALS", "ASCII_61"):  # := =
            return query[:token.start], query[token.end + 1:]
    raise Unreadable("a PL/pgSQL assignment has no ':='")
