"""What a SQL plan changes, read with PostgreSQL's own parser: which statements
destroy data or access (the gate stops those at a human), and whether the plan
writes at all (a ``read`` action's plan must not).

The parser is pglast (libpg_query: the server's grammar compiled as a library),
licensed GPL-3.0-or-later; this project is Apache-2.0, so pglast is the
optional ``sql`` extra (``pip install agent-sandbox[sql]``), imported only
here and only when a SQL plan is read. Without it every SQL plan is unreadable
and escalates.

The reader walks the whole parse tree, never the text: every statement of a
multi-statement string, statements nested in CTEs, ``EXPLAIN ANALYZE`` (which
executes), ``PREPARE``, ``CREATE RULE`` actions, ``COPY (query)``, the bodies of
``LANGUAGE sql`` functions (``AS '...'`` parsed again, ``BEGIN ATOMIC``) and of
PL/pgSQL functions (every embedded statement and expression parsed again).
Comments, case, quoted identifiers and dollar quoting are the parser's, so
they disguise nothing.

Rows already there (``sql_where``): a ``DELETE``, ``UPDATE``, ``INSERT ...
ON CONFLICT DO UPDATE`` or ``MERGE`` that changes them, wherever it is (top
level, CTE, ``PREPARE``, rule action, function body), is harmless only when it
pins the rows it touches by equality to constants (``WHERE id = 5``, ``id IN
(1, 2)``, a VALUES list of constants); anything else is a signal that says a
human judges how many rows it touches, for whether a condition keeps every row
is undecidable.

Other destructive signals: ``DROP`` of anything, ``TRUNCATE``,
``ALTER ... DROP`` (column, constraint, default, not null,
identity, inheritance, ...), ``ALTER COLUMN ... TYPE`` (rewrites the data),
``DETACH PARTITION``, ``SET UNLOGGED``, every ``RENAME`` and ``SET SCHEMA``,
``GRANT``/``REVOKE`` and every role, ownership, policy and row-security change,
``SECURITY DEFINER`` functions, and what the gate cannot judge: ``DO``,
``CALL``, ``EXECUTE``, dynamic SQL in PL/pgSQL, function bodies in other
languages, ``COPY ... PROGRAM`` and ``COPY`` to or from a server file, ``CREATE
OR REPLACE`` of functions and triggers, every ``CREATE RULE``, event triggers,
``VACUUM FULL``, ``REINDEX``, ``CLUSTER``, ``LOCK``, ``CHECKPOINT``, ``LOAD``,
``ALTER SYSTEM``/``DATABASE``, subscriptions, two-phase commit, ``SET`` of a
setting not known to be harmless (``SET ROLE``, ``session_replication_role``)
and a ``search_path`` that puts a schema before ``pg_catalog``, ``CREATE
OPERATOR`` and ``CREATE CAST`` (they change what ``=`` and a cast mean),
calls of administrative or dynamic-SQL functions (``pg_terminate_backend``,
``set_config``, ``dblink_exec``, ``query_to_xml``, ``lo_unlink``, ...) and any
statement type this reader does not know.

What it cannot see: functions reached other than by name (operators, casts,
column defaults, triggers and views defined before the plan), and rows that
foreign keys' cascades change in other tables. Those are bounded
by the action's credential, whose grants match its tier; the gate is the
second line, not the only one. It never executes anything and never raises on
what the plan says: a plan it cannot parse is unreadable, and escalates.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from .plan_reading import Reading, Unreadable, shown, unreadable
from .sql_kinds import (
    ACCESS,
    ADMIN_FUNCTIONS,
    ALTER_DROPS,
    POWERFUL_EXTENSIONS,
    READ_ONLY,
    SAFE_SETTINGS,
    SESSION,
    TWO_PHASE,
    UNJUDGEABLE,
    WRITES,
    WRITING_FUNCTIONS,
)
from .sql_nodes import node as _node
from .sql_nodes import nodes as _nodes
from .sql_nodes import strings as _strings
from .sql_where import dml_reason, merge_reason, upsert_reason

MAX_BODY_DEPTH = 4  # function bodies inside function bodies, at most
_SIMPLE_IDENT = re.compile(r"[a-z_][a-z0-9_$]*")
_CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z])")


@dataclass(frozen=True)
class _Ctx:
    executes: bool = True  # False under EXPLAIN without ANALYZE
    where: str = ""  # "in function f: " for what a body does
    depth: int = 0


def read(text: str) -> Reading:
    """What the SQL ``text`` changes; unreadable when PostgreSQL's grammar
    refuses it or the parser is not installed."""
    try:
        from pglast import parser  # noqa: F401 (the optional 'sql' extra)
    except ImportError:
        return unreadable("the SQL parser is not installed (pglast: "
                          "pip install 'agent-sandbox[sql]')")
    try:
        return _Reader().plan(text)
    except Unreadable as exc:
        return unreadable(str(exc))
    except RecursionError:
        return unreadable("the SQL is nested too deeply to judge")


def _parse(text: str) -> list[dict[str, Any]]:
    from pglast import parser

    try:
        tree = json.loads(parser.parse_sql_json(text))
    except parser.ParseError as exc:
        raise Unreadable(f"PostgreSQL cannot parse it: {exc}") from None
    except (ValueError, RecursionError):
        raise Unreadable("the parse tree cannot be read") from None
    stmts = tree.get("stmts") if isinstance(tree, dict) else None
    return stmts if isinstance(stmts, list) else []


class _Reader:
    def __init__(self) -> None:
        self.changes: list[str] = []
        self.signals: list[str] = []
        self.writes = False
        self.prepared: set[str] = set()  # PREPAREd earlier in this plan: judged there

    def plan(self, text: str) -> Reading:
        raw = text.encode("utf-8", "surrogatepass")
        for entry in _parse(text):
            stmt = entry.get("stmt") or {}
            start = int(entry.get("stmt_location") or 0)
            length = entry.get("stmt_len")
            end = start + int(length) if length else len(raw)
            source = raw[start:end].decode("utf-8", "surrogatepass")
            for node_type, body in _nodes(stmt):
                self.changes.append(_describe(node_type, body))
            self.walk(stmt, _Ctx(), source)
        if not self.changes:
            self.changes.append("no statements")
        return Reading(changes=tuple(self.changes), signals=tuple(dict.fromkeys(self.signals)),
                       writes=self.writes or bool(self.signals))

    # the walk: every node of the tree, iteratively (a deep tree is no stack risk)
    def walk(self, root: Any, ctx: _Ctx, source: str) -> None:
        stack: list[tuple[Any, _Ctx]] = [(root, ctx)]
        while stack:
            value, here = stack.pop()
            if isinstance(value, list):
                stack.extend((item, here) for item in value)
                continue
            if not isinstance(value, dict):
                continue
            for key, child in value.items():
                if key[:1].isupper() and isinstance(child, dict):
                    inner = self.node(key, child, here, source)
                    stack.append((child, inner))
                elif isinstance(child, (dict, list)):
                    stack.append((child, here))

    def signal(self, ctx: _Ctx, text: str) -> None:
        self.signals.append(ctx.where + text)

    def node(self, kind: str, body: dict[str, Any], ctx: _Ctx, source: str) -> _Ctx:
        """Judge one node; the context its children are judged in."""
        if kind == "FuncCall":
            self.call(body, ctx)
            return ctx
        if not kind.endswith("Stmt"):
            return ctx
        if not ctx.executes:  # under a plain EXPLAIN: planned, not run
            return ctx
        if kind in READ_ONLY:
            return self.read_only(kind, body, ctx)
        if kind not in SESSION:
            self.writes = True
        rule = getattr(self, "stmt_" + kind, None)
        if rule is not None:
            result: _Ctx = rule(body, ctx, source)
            return result
        if kind.startswith("Drop"):
            self.signal(ctx, _describe(kind, body))
        elif kind in UNJUDGEABLE:
            self.signal(ctx, f"{UNJUDGEABLE[kind]} (the gate cannot judge it)")
        elif kind in ACCESS:
            self.signal(ctx, f"{ACCESS[kind]} (changes access)")
        elif kind not in WRITES:
            self.signal(ctx, f"{_words(kind)} (a statement the gate does not know)")
        return ctx

    def read_only(self, kind: str, body: dict[str, Any], ctx: _Ctx) -> _Ctx:
        if kind == "SelectStmt":
            if body.get("intoClause"):
                self.writes = True
            if body.get("lockingClause"):
                self.writes = True  # row locks: FOR UPDATE, FOR SHARE
        elif kind == "ExplainStmt" and not _explain_runs(body):
            return _Ctx(executes=False, where=ctx.where, depth=ctx.depth)
        elif kind == "PrepareStmt":
            self.prepared.add(str(body.get("name") or ""))
        elif kind == "DeallocateStmt":
            if body.get("isall") or not body.get("name"):
                self.prepared.clear()
            else:
                self.prepared.discard(str(body["name"]))
        return ctx

    def call(self, body: dict[str, Any], ctx: _Ctx) -> None:
        names = _strings(body.get("funcname"))
        name = names[-1].lower() if names else ""
        # the planner may run a function while it plans: EXPLAIN does not hide one
        if name in ADMIN_FUNCTIONS:
            self.signal(ctx, f"calls {shown(name)}() (the gate cannot judge it)")
        elif name in WRITING_FUNCTIONS and ctx.executes:
            self.writes = True

    # statements with rules of their own
    # rows already there: what sql_where finds, named with the statement's target
    def stmt_DeleteStmt(self, body: dict[str, Any], ctx: _Ctx, source: str) -> _Ctx:
        self.rows("DELETE FROM", body, dml_reason(body, ctx.depth > 0), ctx)
        return ctx

    def stmt_UpdateStmt(self, body: dict[str, Any], ctx: _Ctx, source: str) -> _Ctx:
        self.rows("UPDATE", body, dml_reason(body, ctx.depth > 0), ctx)
        return ctx

    def stmt_InsertStmt(self, body: dict[str, Any], ctx: _Ctx, source: str) -> _Ctx:
        self.rows("INSERT INTO", body, upsert_reason(body, ctx.depth > 0), ctx)
        return ctx

    def stmt_MergeStmt(self, body: dict[str, Any], ctx: _Ctx, source: str) -> _Ctx:
        self.rows("MERGE INTO", body, merge_reason(body, ctx.depth > 0), ctx)
        return ctx

    def rows(self, verb: str, body: dict[str, Any], reason: str | None, ctx: _Ctx) -> None:
        if reason is not None:
            self.signal(ctx, f"{verb} {_relation(body.get('relation') or {})} {reason}")

    def stmt_DefineStmt(self, body: dict[str, Any], ctx: _Ctx, source: str) -> _Ctx:
        if body.get("kind") == "OBJECT_OPERATOR":  # "=" might no longer be equality
            self.signal(ctx, f"CREATE OPERATOR {_name(body.get('defnames'))} (changes what "
                             "later comparisons mean: the gate cannot judge it)")
        return ctx

    def stmt_CreateCastStmt(self, body: dict[str, Any], ctx: _Ctx, source: str) -> _Ctx:
        self.signal(ctx, "CREATE CAST (changes what later statements mean: the gate cannot "
                         "judge it)")
        return ctx

    def stmt_CreateExtensionStmt(self, body: dict[str, Any], ctx: _Ctx, source: str) -> _Ctx:
        name = str(body.get("extname") or "")
        if name.lower() in POWERFUL_EXTENSIONS:  # CREATE LANGUAGE is parsed as this too
            self.signal(ctx, f"CREATE EXTENSION {shown(name)} (reaches beyond the database: "
                             "the gate cannot judge it)")
        return ctx

    def stmt_ExecuteStmt(self, body: dict[str, Any], ctx: _Ctx, source: str) -> _Ctx:
        # what this plan PREPAREd was judged where it was written; anything else
        # (a statement prepared before the plan) the gate has not seen
        if str(body.get("name") or "") not in self.prepared:
            self.signal(ctx, f"EXECUTE {shown(body.get('name', ''))} of a statement prepared "
                             "outside the plan (the gate cannot judge it)")
        return ctx

    def stmt_TruncateStmt(self, body: dict[str, Any], ctx: _Ctx, source: str) -> _Ctx:
        self.signal(ctx, _describe("TruncateStmt", body))
        return ctx

    def stmt_AlterTableStmt(self, body: dict[str, Any], ctx: _Ctx, source: str) -> _Ctx:
        what = f"ALTER {_object_word(body.get('objtype'))} {_relation(body.get('relation') or {})}"
        for cmd in body.get("cmds") or []:
            _, sub = _node(cmd)
            if not sub:
                continue
            subtype = sub.get("subtype")
            column = f" {shown(sub['name'])}" if sub.get("name") else ""
            if subtype in ALTER_DROPS:
                self.signal(ctx, f"{what} {ALTER_DROPS[subtype]}{column}")
            elif subtype == "AT_ColumnDefault" and sub.get("def") is None:
                self.signal(ctx, f"{what} ALTER COLUMN{column} DROP DEFAULT")
        return ctx

    def stmt_RenameStmt(self, body: dict[str, Any], ctx: _Ctx, source: str) -> _Ctx:
        word = _object_word(body.get("renameType"))
        old = _relation(body["relation"]) if body.get("relation") else _name(body.get("object"))
        sub = f" {shown(body['subname'])}" if body.get("subname") else ""
        self.signal(ctx, f"ALTER {word} {old}{sub} RENAME TO {shown(body.get('newname', ''))}")
        return ctx

    def stmt_AlterObjectSchemaStmt(self, body: dict[str, Any], ctx: _Ctx, source: str) -> _Ctx:
        old = _relation(body["relation"]) if body.get("relation") else _name(body.get("object"))
        self.signal(ctx, f"ALTER {_object_word(body.get('objectType'))} {old} "
                         f"SET SCHEMA {shown(body.get('newschema', ''))}")
        return ctx

    def stmt_AlterEnumStmt(self, body: dict[str, Any], ctx: _Ctx, source: str) -> _Ctx:
        if body.get("oldVal") is not None:
            self.signal(ctx, f"ALTER TYPE {_name(body.get('typeName'))} RENAME VALUE")
        return ctx

    def stmt_AlterDomainStmt(self, body: dict[str, Any], ctx: _Ctx, source: str) -> _Ctx:
        drops = {"X": "DROP CONSTRAINT", "N": "DROP NOT NULL"}
        if body.get("subtype") in drops:
            self.signal(ctx, f"ALTER DOMAIN {_name(body.get('typeName'))} "
                             f"{drops[body['subtype']]}")
        elif body.get("subtype") == "T" and body.get("def") is None:
            self.signal(ctx, f"ALTER DOMAIN {_name(body.get('typeName'))} DROP DEFAULT")
        return ctx

    def stmt_AlterOpFamilyStmt(self, body: dict[str, Any], ctx: _Ctx, source: str) -> _Ctx:
        if body.get("isDrop"):
            self.signal(ctx, f"ALTER OPERATOR FAMILY {_name(body.get('opfamilyname'))} DROP")
        return ctx

    def stmt_AlterTSConfigurationStmt(self, body: dict[str, Any], ctx: _Ctx,
                                      source: str) -> _Ctx:
        if body.get("kind") == "ALTER_TSCONFIG_DROP_MAPPING":
            self.signal(ctx, f"ALTER TEXT SEARCH CONFIGURATION {_name(body.get('cfgname'))} "
                             "DROP MAPPING")
        return ctx

    def stmt_AlterExtensionContentsStmt(self, body: dict[str, Any], ctx: _Ctx,
                                        source: str) -> _Ctx:
        if body.get("action") == -1:
            self.signal(ctx, f"ALTER EXTENSION {shown(body.get('extname', ''))} DROP")
        return ctx

    def stmt_AlterPublicationStmt(self, body: dict[str, Any], ctx: _Ctx, source: str) -> _Ctx:
        if body.get("action") in ("AP_DropObjects", "AP_SetObjects"):
            self.signal(ctx, f"ALTER PUBLICATION {shown(body.get('pubname', ''))} "
                             f"{'DROP' if body['action'] == 'AP_DropObjects' else 'SET'}")
        return ctx

    def stmt_VariableSetStmt(self, body: dict[str, Any], ctx: _Ctx, source: str) -> _Ctx:
        kind = body.get("kind")
        name = str(body.get("name") or "").lower()
        if kind in ("VAR_RESET", "VAR_RESET_ALL"):
            return ctx
        if name == "search_path" and _catalog_not_first(body.get("args")):
            self.signal(ctx, "SET search_path with a schema before pg_catalog (its operators "
                             "and functions would shadow the built-in ones: the gate cannot "
                             "judge it)")
        elif name not in SAFE_SETTINGS:
            self.signal(ctx, f"SET {shown(name)} (the gate cannot judge it)")
        return ctx

    def stmt_TransactionStmt(self, body: dict[str, Any], ctx: _Ctx, source: str) -> _Ctx:
        if body.get("kind") in TWO_PHASE:
            self.signal(ctx, f"{_words(str(body['kind'])[11:])} (two-phase commit: the gate "
                             "cannot judge it)")
        return ctx

    def stmt_CopyStmt(self, body: dict[str, Any], ctx: _Ctx, source: str) -> _Ctx:
        what = _relation(body["relation"]) if body.get("relation") else "(query)"
        if body.get("is_program"):
            self.signal(ctx, f"COPY {what} {'FROM' if body.get('is_from') else 'TO'} PROGRAM "
                             "(the gate cannot judge it)")
        elif body.get("filename"):
            self.signal(ctx, f"COPY {what} {'FROM' if body.get('is_from') else 'TO'} a server "
                             "file (the gate cannot judge it)")
        return ctx

    def stmt_VacuumStmt(self, body: dict[str, Any], ctx: _Ctx, source: str) -> _Ctx:
        for option in body.get("options") or []:
            _, elem = _node(option)
            if elem and elem.get("defname") == "full" and _option_on(elem):
                self.signal(ctx, "VACUUM FULL (the gate cannot judge it)")
        return ctx

    def stmt_CreateTrigStmt(self, body: dict[str, Any], ctx: _Ctx, source: str) -> _Ctx:
        if body.get("replace"):
            self.signal(ctx, f"CREATE OR REPLACE TRIGGER {shown(body.get('trigname', ''))} "
                             "(the gate cannot judge it)")
        return ctx

    def stmt_AlterFunctionStmt(self, body: dict[str, Any], ctx: _Ctx, source: str) -> _Ctx:
        name = _name((body.get("func") or {}).get("objname"))
        for option in body.get("actions") or []:
            _, elem = _node(option)
            if elem and elem.get("defname") == "security" and _option_on(elem):
                self.signal(ctx, f"ALTER FUNCTION {name} SECURITY DEFINER (changes access)")
        return ctx

    def stmt_CreateFunctionStmt(self, body: dict[str, Any], ctx: _Ctx, source: str) -> _Ctx:
        word = "PROCEDURE" if body.get("is_procedure") else "FUNCTION"
        name = _name(body.get("funcname"))
        if body.get("replace"):
            self.signal(ctx, f"CREATE OR REPLACE {word} {name} (the gate cannot judge it)")
        options: dict[str, Any] = {}
        for option in body.get("options") or []:
            _, elem = _node(option)
            if elem and elem.get("defname"):
                options[elem["defname"]] = elem
        if "security" in options and _option_on(options["security"]):
            self.signal(ctx, f"{word} {name} is SECURITY DEFINER (changes access)")
        inner = _Ctx(executes=True, where=f"{ctx.where}in {word.lower()} {name}: ",
                     depth=ctx.depth + 1)
        if inner.depth > MAX_BODY_DEPTH:
            self.signal(ctx, f"{word} {name}: bodies nested too deeply to judge")
            return inner
        language = _strings((options.get("language") or {}).get("arg"))
        lang = language[0].lower() if language else "sql"
        bodies = _strings((options.get("as") or {}).get("arg"))
        if body.get("sql_body") is not None:
            return inner  # BEGIN ATOMIC: the statements are in the tree, walked next
        if lang == "sql":
            for text in bodies[:1]:
                for entry in _parse(text):
                    self.walk(entry.get("stmt") or {}, inner, text)
        elif lang == "plpgsql":
            self.plpgsql(source, inner)
        else:
            self.signal(ctx, f"{word} {name} in LANGUAGE {shown(lang)} (the gate cannot "
                             "read its body)")
        return inner

    def plpgsql(self, source: str, ctx: _Ctx) -> None:
        from pglast import parser

        try:
            tree = json.loads(parser.parse_plpgsql_json(source))
        except parser.ParseError as exc:
            raise Unreadable(f"PostgreSQL cannot parse a PL/pgSQL body: {exc}") from None
        except (ValueError, RecursionError):
            raise Unreadable("a PL/pgSQL body cannot be read") from None
        stack: list[Any] = [tree]
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
                    self.signal(ctx, "dynamic SQL (EXECUTE: the gate cannot judge it)")
                if key == "PLpgSQL_expr" and isinstance(child, dict):
                    for text in _plpgsql_statements(child):
                        for entry in _parse(text):
                            self.walk(entry.get("stmt") or {}, ctx, text)
                elif isinstance(child, (dict, list)):
                    stack.append(child)


def _plpgsql_statements(expr: dict[str, Any]) -> list[str]:
    """The SQL an embedded PL/pgSQL expression stands for, as statements the
    SQL grammar parses (PostgreSQL's raw parse modes of RawParseMode)."""
    query = str(expr.get("query") or "")
    mode = int(expr.get("parseMode") or 0)
    if mode == 0:
        return [query]
    if mode == 2:
        return ["SELECT " + query]
    if mode in (3, 4, 5):
        target, value = _split_assignment(query)
        return ["SELECT " + target, "SELECT " + value]
    raise Unreadable(f"a PL/pgSQL expression in parse mode {mode} cannot be read")


def _split_assignment(query: str) -> tuple[str, str]:
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


def _ident(name: str) -> str:
    return name if _SIMPLE_IDENT.fullmatch(name) else '"' + name.replace('"', '""') + '"'


def _name(value: Any) -> str:
    parts = _strings(value)
    return shown(".".join(_ident(p) for p in parts)) if parts else "?"


def _relation(rv: dict[str, Any]) -> str:
    parts = [rv[k] for k in ("catalogname", "schemaname", "relname") if rv.get(k)]
    return shown(".".join(_ident(str(p)) for p in parts)) if parts else "?"


def _words(kind: str) -> str:
    return _CAMEL.sub(" ", kind.removesuffix("Stmt")).upper().replace("_", " ")


def _object_word(objtype: Any) -> str:
    word = str(objtype or "OBJECT_TABLE").removeprefix("OBJECT_")
    return {"MATVIEW": "MATERIALIZED VIEW", "TABCONSTRAINT": "TABLE ... CONSTRAINT",
            "DOMCONSTRAINT": "DOMAIN ... CONSTRAINT", "FDW": "FOREIGN DATA WRAPPER",
            "FOREIGN_SERVER": "SERVER"}.get(word, word.replace("_", " "))


_DESCRIBE_VERBS = {
    "InsertStmt": "INSERT INTO", "UpdateStmt": "UPDATE", "DeleteStmt": "DELETE FROM",
    "MergeStmt": "MERGE INTO", "CreateStmt": "CREATE TABLE", "ViewStmt": "CREATE VIEW",
    "CreateSeqStmt": "CREATE SEQUENCE", "AlterSeqStmt": "ALTER SEQUENCE",
    "RefreshMatViewStmt": "REFRESH MATERIALIZED VIEW", "CreateTableAsStmt": "CREATE TABLE AS",
}


def _describe(kind: str, body: dict[str, Any]) -> str:
    """One statement in a few words: its verb and what it names."""
    if kind in _DESCRIBE_VERBS:
        rv = body.get("relation") or body.get("view") or body.get("sequence") or (
            body.get("into") or {}).get("rel") or {}
        return f"{_DESCRIBE_VERBS[kind]} {_relation(rv)}"
    if kind == "DropStmt":
        objects = body.get("objects") or []
        names = ", ".join(_name(o) for o in objects[:5]) + (" ..." if len(objects) > 5 else "")
        cascade = " CASCADE" if body.get("behavior") == "DROP_CASCADE" else ""
        return f"DROP {_object_word(body.get('removeType'))} {names}{cascade}"
    if kind == "TruncateStmt":
        rels = body.get("relations") or []
        names = ", ".join(_relation(_node(r)[1] or {}) for r in rels[:5])
        return f"TRUNCATE {names}{' ...' if len(rels) > 5 else ''}"
    if kind == "DropRoleStmt":
        roles = [shown((_node(r)[1] or {}).get("rolename", "?")) for r in body.get("roles") or []]
        return f"DROP ROLE {', '.join(roles[:5])}"
    if kind == "DropdbStmt":
        return f"DROP DATABASE {shown(body.get('dbname', ''))}"
    if kind == "IndexStmt":
        return f"CREATE INDEX ON {_relation(body.get('relation') or {})}"
    if kind == "AlterTableStmt":
        return f"ALTER {_object_word(body.get('objtype'))} {_relation(body.get('relation') or {})}"
    if kind == "CreateFunctionStmt":
        word = "PROCEDURE" if body.get("is_procedure") else "FUNCTION"
        return f"CREATE {word} {_name(body.get('funcname'))}"
    if kind == "SelectStmt":
        return "SELECT" + (" INTO" if body.get("intoClause") else "")
    if kind == "ExplainStmt":
        return "EXPLAIN ANALYZE" if _explain_runs(body) else "EXPLAIN"
    if kind == "VariableSetStmt":
        reset = str(body.get("kind", "")).startswith("VAR_RESET")
        return f"{'RESET' if reset else 'SET'} {shown(body.get('name') or 'ALL')}"
    if kind == "TransactionStmt":
        return _words(str(body.get("kind", "TRANS_STMT_BEGIN")).removeprefix("TRANS_STMT_"))
    if kind.startswith("Drop"):
        return f"DROP {_words(kind[4:]) or 'OBJECT'}"
    return _words(kind)


def _option_on(elem: dict[str, Any]) -> bool:
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


def _catalog_not_first(args: Any) -> bool:
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


def _explain_runs(body: dict[str, Any]) -> bool:
    for option in body.get("options") or []:
        _, elem = _node(option)
        if elem and elem.get("defname") == "analyze" and _option_on(elem):
            return True
    return False
