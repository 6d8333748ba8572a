"""What a SQL plan changes, read with PostgreSQL's own parser: which statements
destroy data or access (the gate stops those at a human), and whether the plan
writes at all (a ``read`` action's plan must not).

The parser is pglast (the server's grammar as a library), GPL-3.0-or-later, so
in this Apache-2.0 project it is the optional ``sql`` extra, imported only when
a SQL plan is read; without it every SQL plan is unreadable and escalates.

The reader walks the whole parse tree, never the text: every statement of a
multi-statement string, statements nested in CTEs, ``EXPLAIN ANALYZE`` (which
executes), ``PREPARE``, ``CREATE RULE`` actions, ``COPY (query)``, the bodies of
``LANGUAGE sql`` functions (``AS '...'`` parsed again, ``BEGIN ATOMIC``) and of
PL/pgSQL functions (every embedded statement and expression parsed again).
Comments, case, quoting and dollar quoting are the parser's: they disguise nothing.

A ``write`` plan runs without a human only when it is plainly harmless, so
three classes are signals beside the destructive ones:

Rows already there (``sql_where``): a ``DELETE``, ``UPDATE``, ``INSERT ...
ON CONFLICT DO UPDATE`` or ``MERGE`` that changes them, wherever it is (top
level, CTE, ``PREPARE``, rule action, function body), is harmless only when it
pins the rows it touches by equality to constants that cannot be booleans
(``WHERE id = 5``, ``id IN (1, 2)``, a VALUES list of constants); anything
else is a signal that says a human judges how many rows it touches, for
whether a condition keeps every row is undecidable. Each pinned statement
counts the keys it names (an ``IN`` list its constants, a VALUES list its
rows, a ``PREPARE``d one at every ``EXECUTE``) and its change says so
("DELETE FROM orders (at most 2 rows by id)"); a plan whose pinned statements
name more than ``MAX_PINNED_ROWS`` together is a signal.

Code that stays behind (``sql_kinds``, which lists and explains each kind):
every object that carries code someone may later run with another role's
rights, and every call or operator in a stored expression that is not a
built-in of ``STORED_FUNCTIONS``/``STORED_OPERATORS``.

Foreign keys that ``CASCADE`` or ``SET NULL``/``DEFAULT`` on delete or update:
a later pinned delete of one row would reach every row that refers to it.

Other destructive signals: ``DROP`` of anything, ``TRUNCATE``,
``ALTER ... DROP`` (column, constraint, default, not null,
identity, inheritance, ...), ``ALTER COLUMN ... TYPE`` (rewrites the data),
``DETACH PARTITION``, ``SET UNLOGGED``, every ``RENAME`` and ``SET SCHEMA``,
``GRANT``/``REVOKE`` and every role, ownership, policy and row-security change,
``SECURITY DEFINER`` functions, and what the gate cannot judge: ``DO``,
``CALL``, ``EXECUTE`` of a statement prepared outside the plan, dynamic SQL
in PL/pgSQL, function bodies in other languages, ``COPY ... PROGRAM`` and
``COPY`` to or from a server file, ``VACUUM FULL``, ``REINDEX``, ``CLUSTER``,
``LOCK``, ``CHECKPOINT``, ``LOAD``, ``ALTER SYSTEM``/``DATABASE``, two-phase
commit, ``SET`` of a setting not known to be harmless (``SET ROLE``,
``session_replication_role``) and a ``search_path`` that puts a schema
before ``pg_catalog``, calls of administrative or dynamic-SQL functions
(``pg_terminate_backend``, ``set_config``, ``dblink_exec``, ``query_to_xml``,
``lo_unlink``, ...) and any statement type this reader does not know.

What it cannot see: what was there before the plan (triggers, rules, views,
column defaults and foreign keys' cascades defined earlier, a function that
shadows a built-in one on a role's own search path, whether a pinned column
is a key). Those are bounded by the action's credential, whose grants match
its tier; the gate is the second line, not the only one. It never executes
anything and never raises on what the plan says: a plan it cannot parse is
unreadable, and escalates.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from .plan_reading import Reading, Unreadable, shown, unreadable
from .sql_describe import DEFINED_CODE as _DEFINED_CODE
from .sql_describe import catalog_not_first as _catalog_not_first
from .sql_describe import describe as _describe
from .sql_describe import explain_runs as _explain_runs
from .sql_describe import is_builtin as _builtin
from .sql_describe import object_word as _object_word
from .sql_describe import option_on as _option_on
from .sql_describe import qualified_name as _name
from .sql_describe import relation as _relation
from .sql_describe import words as _words
from .sql_kinds import (
    ACCESS,
    ADMIN_FUNCTIONS,
    ALTER_DROPS,
    BEYOND,
    BEYOND_STATEMENTS,
    CODE,
    CODE_STATEMENTS,
    FK_ACTIONS,
    MAX_PINNED_ROWS,
    POWERFUL_EXTENSIONS,
    READ_ONLY,
    REWINDING_FUNCTIONS,
    REWINDS,
    SAFE_SETTINGS,
    SESSION,
    STORED_EXPRESSIONS,
    STORED_FUNCTIONS,
    STORED_KINDS,
    STORED_OPERATORS,
    TWO_PHASE,
    UNJUDGEABLE,
    WRITES,
    WRITING_FUNCTIONS,
    sequence_moves,
)
from .sql_nodes import node as _node
from .sql_nodes import nodes as _nodes
from .sql_nodes import parse as _parse
from .sql_nodes import strings as _strings
from .sql_plpgsql import embedded_sql
from .sql_where import HUMAN, Scope, Touch, dml_touch, may_be_boolean, merge_touch, upsert_touch

MAX_BODY_DEPTH = 4  # function bodies inside function bodies, at most


@dataclass(frozen=True)
class _Ctx:
    executes: bool = True  # False under EXPLAIN without ANALYZE
    where: str = ""  # "in function f: " for what a body does
    depth: int = 0
    prepared: str | None = None  # under PREPARE of this name: runs once per EXECUTE
    stored: str = ""  # under a statement whose expressions are stored: which one


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


class _Reader:
    def __init__(self) -> None:
        self.changes: list[str] = []
        self.signals: list[str] = []
        self.writes = False
        self.prepared: set[str] = set()  # PREPAREd earlier in this plan: judged there
        # rows already there that pinned statements touch: (target, at most), each time
        # a statement runs; a PREPAREd statement's count each time it is EXECUTEd
        self.touched: list[tuple[str, int]] = []
        self.prepared_rows: dict[str, list[tuple[str, int]]] = {}
        self.bounded: list[tuple[int, str]] = []  # (id of the node, its change with the bound)

    def plan(self, text: str) -> Reading:
        raw = text.encode("utf-8", "surrogatepass")
        for entry in _parse(text):
            stmt = entry.get("stmt") or {}
            start = int(entry.get("stmt_location") or 0)
            length = entry.get("stmt_len")
            end = start + int(length) if length else len(raw)
            source = raw[start:end].decode("utf-8", "surrogatepass")
            tops = _nodes(stmt)
            for node_type, body in tops:
                self.changes.append(_describe(node_type, body))
            at, mark = len(self.changes) - 1, len(self.bounded)
            self.walk(stmt, _Ctx(), source)
            for ident, described in self.bounded[mark:]:
                if tops and ident == id(tops[0][1]):
                    self.changes[at] = described  # the statement itself, with its bound
                else:
                    self.changes.append(described)
        if not self.changes:
            self.changes.append("no statements")
        self.total_rows()
        return Reading(changes=tuple(self.changes), signals=tuple(dict.fromkeys(self.signals)),
                       writes=self.writes or bool(self.signals))

    def total_rows(self) -> None:
        """The bounds of every pinned statement, added up: a plan of many pinned
        statements, or of one that lists many keys, touches as many rows."""
        total = sum(n for _, n in self.touched)
        if total <= MAX_PINNED_ROWS:
            return
        per: dict[str, int] = {}
        for target, n in self.touched:
            per[target] = per.get(target, 0) + n
        parts = ", ".join(f"{target} {n}" for target, n in list(per.items())[:4])
        more = ", ..." if len(per) > 4 else ""
        self.signals.append(f"the plan touches up to {total} rows already there ({parts}{more}),"
                            f" more than {MAX_PINNED_ROWS}: {HUMAN}")

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
        if kind == "A_Expr" and ctx.stored:
            self.operator(body, ctx)
            return ctx
        if kind == "Constraint":
            self.constraint(body, ctx)
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
        else:
            result = self.other(kind, body, ctx)
        if kind in STORED_EXPRESSIONS:
            return replace(result, stored=_describe(kind, body))
        return result

    def other(self, kind: str, body: dict[str, Any], ctx: _Ctx) -> _Ctx:
        if kind.startswith("Drop"):
            self.signal(ctx, _describe(kind, body))
        elif kind in UNJUDGEABLE:
            self.signal(ctx, f"{UNJUDGEABLE[kind]} (the gate cannot judge it)")
        elif kind in ACCESS:
            self.signal(ctx, f"{ACCESS[kind]} (changes access)")
        elif kind in CODE_STATEMENTS:
            self.signal(ctx, f"{_describe(kind, body)} ({CODE})")
        elif kind in BEYOND_STATEMENTS:
            self.signal(ctx, f"{_describe(kind, body)} ({BEYOND})")
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
            name = str(body.get("name") or "")
            self.prepared.add(name)
            self.prepared_rows[name] = []
            return replace(ctx, prepared=name)
        elif kind == "DeallocateStmt":
            if body.get("isall") or not body.get("name"):
                self.prepared.clear()
                self.prepared_rows.clear()
            else:
                self.prepared.discard(str(body["name"]))
                self.prepared_rows.pop(str(body["name"]), None)
        return ctx

    def call(self, body: dict[str, Any], ctx: _Ctx) -> None:
        names = _strings(body.get("funcname"))
        name = names[-1].lower() if names else ""
        # the planner may run a function while it plans: EXPLAIN does not hide one
        if name in ADMIN_FUNCTIONS:
            self.signal(ctx, f"calls {shown(name)}() (the gate cannot judge it)")
        elif name in REWINDING_FUNCTIONS:
            self.writes = self.writes or ctx.executes
            self.signal(ctx, f"calls {shown(name)}() ({REWINDS})")
        elif name in WRITING_FUNCTIONS and ctx.executes:
            self.writes = True
        if ctx.stored and not _builtin(names, STORED_FUNCTIONS):
            self.signal(ctx, f"{ctx.stored}: calls {_name(body.get('funcname'))}() in a stored "
                             f"expression ({CODE})")

    def operator(self, body: dict[str, Any], ctx: _Ctx) -> None:
        """An operator in a stored expression: a built-in comparison or arithmetic
        (``STORED_OPERATORS``), or a human judges (it may be a user's function)."""
        names = _strings(body.get("name"))
        if body.get("kind") in STORED_KINDS and _builtin(names, STORED_OPERATORS):
            return
        self.signal(ctx, f"{ctx.stored}: operator {_name(body.get('name'))} in a stored "
                         f"expression ({CODE})")

    def constraint(self, body: dict[str, Any], ctx: _Ctx) -> None:
        """Foreign keys whose actions reach the referencing table; exclusion
        constraints with operators other than the built-in comparisons."""
        where = ctx.stored or "a constraint"
        if body.get("contype") == "CONSTR_FOREIGN":
            actions = [(word, FK_ACTIONS[str(body.get(key))]) for word, key in (
                ("DELETE", "fk_del_action"), ("UPDATE", "fk_upd_action"))
                if str(body.get(key)) in FK_ACTIONS]
            if actions:
                what = " ".join(f"ON {word} {action}" for word, action in actions)
                verbs = " and ".join(f"{word.lower()}s" for word, _ in actions)
                self.signal(ctx, f"{where}: REFERENCES {_relation(body.get('pktable') or {})} "
                                 f"{what} (makes later {verbs} reach other tables: {HUMAN})")
        elif body.get("contype") == "CONSTR_EXCLUSION":
            for pair in body.get("exclusions") or []:
                ops = _strings((_node(pair)[1] or {}).get("items", [None, None])[1:])
                if not _builtin(ops, STORED_OPERATORS):
                    self.signal(ctx, f"{where}: EXCLUDE with operator {shown('.'.join(ops))} "
                                     f"({CODE})")

    # statements with rules of their own
    # rows already there: what sql_where finds, named with the statement's target
    def stmt_DeleteStmt(self, body: dict[str, Any], ctx: _Ctx, source: str) -> _Ctx:
        self.rows("DELETE FROM", body, dml_touch(body, ctx.depth > 0, ctx.prepared is not None),
                  ctx)
        return ctx

    def stmt_UpdateStmt(self, body: dict[str, Any], ctx: _Ctx, source: str) -> _Ctx:
        self.rows("UPDATE", body, dml_touch(body, ctx.depth > 0, ctx.prepared is not None), ctx)
        return ctx

    def stmt_InsertStmt(self, body: dict[str, Any], ctx: _Ctx, source: str) -> _Ctx:
        self.rows("INSERT INTO", body, upsert_touch(body, ctx.depth > 0), ctx)
        return ctx

    def stmt_MergeStmt(self, body: dict[str, Any], ctx: _Ctx, source: str) -> _Ctx:
        self.rows("MERGE INTO", body, merge_touch(body, ctx.depth > 0, ctx.prepared is not None),
                  ctx)
        return ctx

    def rows(self, verb: str, body: dict[str, Any], touch: Touch, ctx: _Ctx) -> None:
        target = f"{verb} {_relation(body.get('relation') or {})}"
        if touch.reason is not None:
            self.signal(ctx, f"{target} {touch.reason}")
            return
        if not touch.bound or ctx.depth > 0:  # a body's: the function is a signal itself
            return
        rows = f"at most {touch.bound} row{'s' if touch.bound != 1 else ''} by {shown(touch.by)}"
        if ctx.prepared is not None:
            self.prepared_rows.setdefault(ctx.prepared, []).append((target, touch.bound))
            self.bounded.append((id(body), f"{target} ({rows}, at each EXECUTE)"))
        else:
            self.touched.append((target, touch.bound))
            self.bounded.append((id(body), f"{target} ({rows})"))

    def stmt_AlterSeqStmt(self, body: dict[str, Any], ctx: _Ctx, source: str) -> _Ctx:
        moved = sequence_moves(body.get("options"))
        if moved:
            self.signal(ctx, f"ALTER SEQUENCE {_relation(body.get('sequence') or {})} {moved} "
                             f"({REWINDS})")
        return ctx

    def stmt_DefineStmt(self, body: dict[str, Any], ctx: _Ctx, source: str) -> _Ctx:
        kind = body.get("kind")
        name = _name(body.get("defnames"))
        if kind == "OBJECT_OPERATOR":  # "=" might no longer be equality
            self.signal(ctx, f"CREATE OPERATOR {name} (changes what later comparisons mean: "
                             f"{CODE})")
        elif kind == "OBJECT_TYPE" and body.get("definition"):  # a shell type has no code
            self.signal(ctx, f"CREATE TYPE {name} (a base type, with input and output "
                             f"functions: {CODE})")
        elif kind in _DEFINED_CODE:
            self.signal(ctx, f"CREATE {_DEFINED_CODE[kind]} {name} ({CODE})")
        return ctx

    def stmt_CreateFunctionStmt(self, body: dict[str, Any], ctx: _Ctx, source: str) -> _Ctx:
        word = "PROCEDURE" if body.get("is_procedure") else "FUNCTION"
        replaces = "OR REPLACE " if body.get("replace") else ""
        self.signal(ctx, f"CREATE {replaces}{word} {_name(body.get('funcname'))} ({CODE})")
        return self.function(body, ctx, source)

    def stmt_CreateTrigStmt(self, body: dict[str, Any], ctx: _Ctx, source: str) -> _Ctx:
        replaces = "OR REPLACE " if body.get("replace") else ""
        self.signal(ctx, f"CREATE {replaces}TRIGGER {shown(body.get('trigname', ''))} ON "
                         f"{_relation(body.get('relation') or {})} ({CODE})")
        return ctx

    def stmt_CreateTableAsStmt(self, body: dict[str, Any], ctx: _Ctx, source: str) -> _Ctx:
        if body.get("objtype") == "OBJECT_MATVIEW":  # its query runs again at each REFRESH
            rel = _relation((body.get("into") or {}).get("rel") or {})
            self.signal(ctx, f"CREATE MATERIALIZED VIEW {rel} ({CODE})")
        return ctx

    def stmt_CreateDomainStmt(self, body: dict[str, Any], ctx: _Ctx, source: str) -> _Ctx:
        if any((_node(c)[1] or {}).get("contype") == "CONSTR_CHECK"
               for c in body.get("constraints") or []):
            self.signal(ctx, f"CREATE DOMAIN {_name(body.get('domainname'))} with CHECK "
                             f"({CODE})")
        return ctx

    def stmt_CreateRangeStmt(self, body: dict[str, Any], ctx: _Ctx, source: str) -> _Ctx:
        for option in body.get("params") or []:
            _, elem = _node(option)
            if elem and elem.get("defname") in ("subtype_diff", "canonical"):
                self.signal(ctx, f"CREATE TYPE {_name(body.get('typeName'))} AS RANGE with "
                                 f"{elem['defname']} ({CODE})")
        return ctx

    def stmt_CreateExtensionStmt(self, body: dict[str, Any], ctx: _Ctx, source: str) -> _Ctx:
        name = str(body.get("extname") or "")
        if name.lower() in POWERFUL_EXTENSIONS:  # CREATE LANGUAGE is parsed as this too
            self.signal(ctx, f"CREATE EXTENSION {shown(name)} (reaches beyond the database: "
                             "the gate cannot judge it)")
        else:
            self.signal(ctx, f"CREATE EXTENSION {shown(name)} ({CODE})")
        return ctx

    def stmt_ExecuteStmt(self, body: dict[str, Any], ctx: _Ctx, source: str) -> _Ctx:
        # what this plan PREPAREd was judged where it was written; anything else
        # (a statement prepared before the plan) the gate has not seen
        name = str(body.get("name") or "")
        if name not in self.prepared:
            self.signal(ctx, f"EXECUTE {shown(name)} of a statement prepared "
                             "outside the plan (the gate cannot judge it)")
            return ctx
        rows = self.prepared_rows.get(name) or []
        if not rows:
            return ctx
        if any(may_be_boolean(v, _TOP) for v in body.get("params") or []):
            self.signal(ctx, f"EXECUTE {shown(name)} with a value that may be a boolean "
                             f"(it pins no rows: {HUMAN})")
            return ctx
        self.touched.extend(rows)
        bound = sum(n for _, n in rows)
        self.bounded.append((id(body), f"EXECUTE {shown(name)} (at most {bound} "
                                       f"row{'s' if bound != 1 else ''})"))
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

    def stmt_AlterOpFamilyStmt(self, body: dict[str, Any], ctx: _Ctx, source: str) -> _Ctx:
        name = _name(body.get("opfamilyname"))
        if body.get("isDrop"):
            self.signal(ctx, f"ALTER OPERATOR FAMILY {name} DROP")
        else:
            self.signal(ctx, f"ALTER OPERATOR FAMILY {name} ADD ({CODE})")
        return ctx

    def stmt_AlterDomainStmt(self, body: dict[str, Any], ctx: _Ctx, source: str) -> _Ctx:
        name = _name(body.get("typeName"))
        drops = {"X": "DROP CONSTRAINT", "N": "DROP NOT NULL"}
        if body.get("subtype") in drops:
            self.signal(ctx, f"ALTER DOMAIN {name} {drops[body['subtype']]}")
        elif body.get("subtype") == "T" and body.get("def") is None:
            self.signal(ctx, f"ALTER DOMAIN {name} DROP DEFAULT")
        elif body.get("subtype") == "C" and (_node(body.get("def"))[1] or {}).get(
                "contype") == "CONSTR_CHECK":
            self.signal(ctx, f"ALTER DOMAIN {name} ADD CHECK ({CODE})")
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
        words = {"AP_DropObjects": "DROP", "AP_SetObjects": "SET", "AP_AddObjects": "ADD"}
        self.signal(ctx, f"ALTER PUBLICATION {shown(body.get('pubname', ''))} "
                         f"{words.get(str(body.get('action')), 'SET')} ({BEYOND})")
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

    def stmt_AlterFunctionStmt(self, body: dict[str, Any], ctx: _Ctx, source: str) -> _Ctx:
        name = _name((body.get("func") or {}).get("objname"))
        for option in body.get("actions") or []:
            _, elem = _node(option)
            if elem and elem.get("defname") == "security" and _option_on(elem):
                self.signal(ctx, f"ALTER FUNCTION {name} SECURITY DEFINER (changes access)")
        return ctx

    def plpgsql(self, source: str, ctx: _Ctx) -> None:
        for text in embedded_sql(source):
            if text is None:
                self.signal(ctx, "dynamic SQL (EXECUTE: the gate cannot judge it)")
                continue
            for entry in _parse(text):
                self.walk(entry.get("stmt") or {}, ctx, text)

    def function(self, body: dict[str, Any], ctx: _Ctx, source: str) -> _Ctx:
        """A function's body, read where the gate can: what it would do when called."""
        word = "PROCEDURE" if body.get("is_procedure") else "FUNCTION"
        name = _name(body.get("funcname"))
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




_TOP = Scope(frozenset(), False, True)  # a value at the top level: $n is given from outside
