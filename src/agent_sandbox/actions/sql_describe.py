"""How the SQL gate names a statement in its summary (its verb and what it
names, identifiers quoted only where PostgreSQL would need it) and reads the
options that change what a statement does (``EXPLAIN ANALYZE``, a boolean
option, a ``search_path`` that puts another schema before pg_catalog). Pure."""

from __future__ import annotations

import re
from typing import Any

from .plan_reading import shown
from .sql_kinds import BEYOND_STATEMENTS, CODE_STATEMENTS
from .sql_nodes import node as _node
from .sql_nodes import strings as _strings

_SIMPLE_IDENT = re.compile(r"[a-z_][a-z0-9_$]*")
_CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z])")
# CREATE ... whose object is code (DefineStmt's kinds)
DEFINED_CODE = {
    "OBJECT_AGGREGATE": "AGGREGATE", "OBJECT_TSPARSER": "TEXT SEARCH PARSER",
    "OBJECT_TSDICTIONARY": "TEXT SEARCH DICTIONARY", "OBJECT_TSTEMPLATE": "TEXT SEARCH TEMPLATE",
    "OBJECT_TSCONFIGURATION": "TEXT SEARCH CONFIGURATION",
}


# where a statement of CODE_STATEMENTS or BEYOND_STATEMENTS keeps its object's name
NAME_KEYS = ("servername", "schemaname", "extname", "pubname", "remote_schema", "fdwname")
NAME_LISTS = ("conversion_name", "opclassname", "opfamilyname", "typeName")


def ident(name: str) -> str:
    return name if _SIMPLE_IDENT.fullmatch(name) else '"' + name.replace('"', '""') + '"'


def qualified_name(value: Any) -> str:
    parts = _strings(value)
    return shown(".".join(ident(p) for p in parts)) if parts else "?"


def relation(rv: dict[str, Any]) -> str:
    parts = [rv[k] for k in ("catalogname", "schemaname", "relname") if rv.get(k)]
    return shown(".".join(ident(str(p)) for p in parts)) if parts else "?"


def words(kind: str) -> str:
    return _CAMEL.sub(" ", kind.removesuffix("Stmt")).upper().replace("_", " ")


def object_word(objtype: Any) -> str:
    word = str(objtype or "OBJECT_TABLE").removeprefix("OBJECT_")
    return {"MATVIEW": "MATERIALIZED VIEW", "TABCONSTRAINT": "TABLE ... CONSTRAINT",
            "DOMCONSTRAINT": "DOMAIN ... CONSTRAINT", "FDW": "FOREIGN DATA WRAPPER",
            "FOREIGN_SERVER": "SERVER"}.get(word, word.replace("_", " "))


DESCRIBE_VERBS = {
    "InsertStmt": "INSERT INTO", "UpdateStmt": "UPDATE", "DeleteStmt": "DELETE FROM",
    "MergeStmt": "MERGE INTO", "CreateStmt": "CREATE TABLE", "ViewStmt": "CREATE VIEW",
    "CreateSeqStmt": "CREATE SEQUENCE", "AlterSeqStmt": "ALTER SEQUENCE",
    "RefreshMatViewStmt": "REFRESH MATERIALIZED VIEW", "CreateTableAsStmt": "CREATE TABLE AS",
}


def describe(kind: str, body: dict[str, Any]) -> str:
    """One statement in a few words: its verb and what it names."""
    if kind == "CreateTableAsStmt" and body.get("objtype") == "OBJECT_MATVIEW":
        return f"CREATE MATERIALIZED VIEW {relation((body.get('into') or {}).get('rel') or {})}"
    if kind in DESCRIBE_VERBS:
        rv = body.get("relation") or body.get("view") or body.get("sequence") or (
            body.get("into") or {}).get("rel") or {}
        return f"{DESCRIBE_VERBS[kind]} {relation(rv)}"
    if kind in CODE_STATEMENTS or kind in BEYOND_STATEMENTS:
        label = CODE_STATEMENTS.get(kind) or BEYOND_STATEMENTS[kind]
        rv = body.get("relation") or (body.get("base") or {}).get("relation")
        named = next((body[k] for k in NAME_KEYS if isinstance(body.get(k), str)), None)
        listed = next((body[k] for k in NAME_LISTS if body.get(k)), None)
        if kind == "AlterOperatorStmt":
            listed = (body.get("opername") or {}).get("objname")
        name = relation(rv) if rv else shown(named) if named else qualified_name(listed) if listed \
            else shown(body["amname"]) if isinstance(body.get("amname"), str) else "?"
        return f"{label} {name}" if name != "?" else label
    if kind == "CreateTrigStmt":
        return f"CREATE TRIGGER {shown(body.get('trigname', ''))} ON " \
               f"{relation(body.get('relation') or {})}"
    if kind == "CreateExtensionStmt":
        return f"CREATE EXTENSION {shown(body.get('extname', ''))}"
    if kind == "CreateDomainStmt":
        return f"CREATE DOMAIN {qualified_name(body.get('domainname'))}"
    if kind == "DefineStmt":
        word = str(body.get("kind") or "OBJECT_TYPE").removeprefix("OBJECT_")
        word = DEFINED_CODE.get(str(body.get("kind")), word.replace("_", " "))
        return f"CREATE {word} {qualified_name(body.get('defnames'))}"
    if kind == "DropStmt":
        objects = body.get("objects") or []
        names = ", ".join(qualified_name(o) for o in objects[:5])
        names += " ..." if len(objects) > 5 else ""
        cascade = " CASCADE" if body.get("behavior") == "DROP_CASCADE" else ""
        return f"DROP {object_word(body.get('removeType'))} {names}{cascade}"
    if kind == "TruncateStmt":
        rels = body.get("relations") or []
        names = ", ".join(relation(_node(r)[1] or {}) for r in rels[:5])
        return f"TRUNCATE {names}{' ...' if len(rels) > 5 else ''}"
    if kind == "DropRoleStmt":
        roles = [shown((_node(r)[1] or {}).get("rolename", "?")) for r in body.get("roles") or []]
        return f"DROP ROLE {', '.join(roles[:5])}"
    if kind == "DropdbStmt":
        return f"DROP DATABASE {shown(body.get('dbname', ''))}"
    if kind == "IndexStmt":
        return f"CREATE INDEX ON {relation(body.get('relation') or {})}"
    if kind == "AlterTableStmt":
        return f"ALTER {object_word(body.get('objtype'))} {relation(body.get('relation') or {})}"
    if kind == "CreateFunctionStmt":
        word = "PROCEDURE" if body.get("is_procedure") else "FUNCTION"
        replaces = "OR REPLACE " if body.get("replace") else ""
        return f"CREATE {replaces}{word} {qualified_name(body.get('funcname'))}"
    if kind == "SelectStmt":
        return "SELECT" + (" INTO" if body.get("intoClause") else "")
    if kind == "ExplainStmt":
        return "EXPLAIN ANALYZE" if explain_runs(body) else "EXPLAIN"
    if kind == "VariableSetStmt":
        reset = str(body.get("kind", "")).startswith("VAR_RESET")
        return f"{'RESET' if reset else 'SET'} {shown(body.get('name') or 'ALL')}"
    if kind == "TransactionStmt":
        return words(str(body.get("kind", "TRANS_STMT_BEGIN")).removeprefix("TRANS_STMT_"))
    if kind.startswith("Drop"):
        return f"DROP {words(kind[4:]) or 'OBJECT'}"
    return words(kind)


def option_on(elem: dict[str, Any]) -> bool:
    """A DefElem's boolean value as PostgreSQL's defGetBoolean reads it; what it
    cannot read counts as on."""
    arg = elem.get("arg")
    if arg is None:
        return True
    kind, body = _node(arg)
    if kind == "Boolean":
        return bool((body or {}).get("boolval"))
    if kind == "Integer":
        return bool((body or {}).get("ival", 0) != 0)
    if kind == "String":
        return str((body or {}).get("sval", "")).lower() not in ("false", "off", "0")
    return True


def catalog_not_first(args: Any) -> bool:
    """Whether a search_path names pg_catalog after another schema (unnamed,
    PostgreSQL searches it first); a value it cannot read counts as yes."""
    schemas: list[str] = []
    for arg in args or []:
        kind, body = _node(arg)
        value = ((body or {}).get("sval") or {}).get("sval") if kind == "A_Const" else None
        if not isinstance(value, str):
            return True
        schemas += [p.strip().strip('"').lower() for p in value.split(",")]
    return "pg_catalog" in schemas[1:]


def explain_runs(body: dict[str, Any]) -> bool:
    for option in body.get("options") or []:
        _, elem = _node(option)
        if elem and elem.get("defname") == "analyze" and option_on(elem):
            return True
    return False


def is_builtin(names: list[str], allowed: frozenset[str]) -> bool:
    """Whether a function's or operator's name is in ``allowed``, unqualified or
    qualified with pg_catalog."""
    return (len(names) == 1 and names[0] in allowed) or (
        len(names) == 2 and names[0] == "pg_catalog" and names[1] in allowed)
