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

Destructive signals: ``DROP`` of anything, ``TRUNCATE``, ``DELETE`` and ``UPDATE``
whose ``WHERE`` is missing or selects every row (a constant truth such as
``true``, ``1=1``, ``'a'='a'``, ``NOT false``, ``x = x``, ``x IS NULL OR x IS NOT
NULL``, or a condition that names no column of the target at all, such as
``random() < 2`` or ``EXISTS (SELECT 1)``), ``MERGE ... DELETE`` or ``MERGE ON``
such a condition, ``ALTER ... DROP`` (column, constraint, default, not null,
identity, inheritance, ...), ``ALTER COLUMN ... TYPE`` (rewrites the data),
``DETACH PARTITION``, ``SET UNLOGGED``, every ``RENAME`` and ``SET SCHEMA``,
``GRANT``/``REVOKE`` and every role, ownership, policy and row-security change,
``SECURITY DEFINER`` functions, and what the gate cannot judge: ``DO``,
``CALL``, ``EXECUTE``, dynamic SQL in PL/pgSQL, function bodies in other
languages, ``COPY ... PROGRAM`` and ``COPY`` to or from a server file, ``CREATE
OR REPLACE`` of functions and triggers, every ``CREATE RULE``, event triggers,
``VACUUM FULL``, ``REINDEX``, ``CLUSTER``, ``LOCK``, ``CHECKPOINT``, ``LOAD``,
``ALTER SYSTEM``/``DATABASE``, subscriptions, two-phase commit, ``SET`` of a
setting not known to be harmless (``SET ROLE``, ``session_replication_role``),
calls of administrative or dynamic-SQL functions (``pg_terminate_backend``,
``set_config``, ``dblink_exec``, ``query_to_xml``, ``lo_unlink``, ...) and any
statement type this reader does not know.

What it cannot see: functions reached other than by name (operators, casts,
column defaults, triggers and views defined before the plan). Those are bounded
by the action's credential, whose grants match its tier; the gate is the
second line, not the only one. It never executes anything and never raises on
what the plan says: a plan it cannot parse is unreadable, and escalates.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from .plan_reading import Reading, Unreadable, shown, unreadable

# statements that neither write nor change the session's rights
READ_ONLY = frozenset({
    "SelectStmt", "VariableShowStmt", "ExplainStmt", "DeclareCursorStmt", "FetchStmt",
    "ClosePortalStmt", "DiscardStmt", "ListenStmt", "UnlistenStmt", "DeallocateStmt",
    "ConstraintsSetStmt", "ReturnStmt", "SetOperationStmt", "PrepareStmt",
})
# statements that write and are not destructive in themselves (what they
# contain is walked like everything else)
WRITES = frozenset({
    "InsertStmt", "CreateStmt", "CreateTableAsStmt", "CreateSchemaStmt", "CreateSeqStmt",
    "AlterSeqStmt", "IndexStmt", "ViewStmt", "CompositeTypeStmt", "CreateEnumStmt",
    "CreateRangeStmt", "CreateDomainStmt", "DefineStmt", "CreateExtensionStmt",
    "AlterExtensionStmt", "CreateCastStmt", "CreateConversionStmt", "CreateOpClassStmt",
    "CreateOpFamilyStmt", "CreateAmStmt", "CreateStatsStmt", "AlterStatsStmt",
    "CreateForeignTableStmt", "CreateForeignServerStmt", "AlterForeignServerStmt",
    "CreateFdwStmt", "AlterFdwStmt", "ImportForeignSchemaStmt", "CreatePublicationStmt",
    "CreateTableSpaceStmt", "AlterTableSpaceOptionsStmt", "AlterTableMoveAllStmt",
    "CommentStmt", "SecLabelStmt", "RefreshMatViewStmt", "NotifyStmt", "AlterTypeStmt",
    "AlterOperatorStmt", "AlterCollationStmt", "AlterTSDictionaryStmt",
    "AlterObjectDependsStmt", "ReplicaIdentityStmt", "CreatedbStmt",
    "AlterDatabaseRefreshCollStmt", "PLAssignStmt", "CreateTransformStmt",
})
# what the gate cannot judge: they run code it does not see or act beyond the plan
UNJUDGEABLE = {
    "DoStmt": "DO block", "CallStmt": "CALL",
    "LoadStmt": "LOAD of a server library", "ReindexStmt": "REINDEX", "ClusterStmt": "CLUSTER",
    "LockStmt": "LOCK", "CheckPointStmt": "CHECKPOINT", "AlterSystemStmt": "ALTER SYSTEM",
    "AlterDatabaseStmt": "ALTER DATABASE", "AlterDatabaseSetStmt": "ALTER DATABASE ... SET",
    "CreateSubscriptionStmt": "CREATE SUBSCRIPTION",
    "AlterSubscriptionStmt": "ALTER SUBSCRIPTION", "CreatePLangStmt": "CREATE LANGUAGE",
    "CreateEventTrigStmt": "CREATE EVENT TRIGGER", "AlterEventTrigStmt": "ALTER EVENT TRIGGER",
    "RuleStmt": "CREATE RULE (rewrites later statements)",
}
# access: who may do what, as whom
ACCESS = {
    "GrantStmt": "GRANT/REVOKE", "GrantRoleStmt": "GRANT/REVOKE of a role",
    "AlterDefaultPrivilegesStmt": "ALTER DEFAULT PRIVILEGES", "CreateRoleStmt": "CREATE ROLE",
    "AlterRoleStmt": "ALTER ROLE", "AlterRoleSetStmt": "ALTER ROLE ... SET",
    "AlterOwnerStmt": "ALTER ... OWNER TO", "ReassignOwnedStmt": "REASSIGN OWNED",
    "CreatePolicyStmt": "CREATE POLICY (row security)",
    "AlterPolicyStmt": "ALTER POLICY (row security)",
    "CreateUserMappingStmt": "CREATE USER MAPPING", "AlterUserMappingStmt": "ALTER USER MAPPING",
}
ALTER_DROPS = {
    "AT_DropColumn": "DROP COLUMN", "AT_DropConstraint": "DROP CONSTRAINT",
    "AT_DropNotNull": "DROP NOT NULL", "AT_DropExpression": "DROP EXPRESSION",
    "AT_DropIdentity": "DROP IDENTITY", "AT_DropInherit": "NO INHERIT",
    "AT_DropOf": "NOT OF", "AT_DropCluster": "SET WITHOUT CLUSTER",
    "AT_DropOids": "SET WITHOUT OIDS",
    "AT_DetachPartition": "DETACH PARTITION", "AT_DetachPartitionFinalize": "DETACH PARTITION",
    "AT_AlterColumnType": "ALTER COLUMN TYPE (rewrites its data)",
    "AT_SetUnLogged": "SET UNLOGGED (lost on a crash)", "AT_ChangeOwner": "OWNER TO",
    "AT_DisableRowSecurity": "DISABLE ROW LEVEL SECURITY",
    "AT_NoForceRowSecurity": "NO FORCE ROW LEVEL SECURITY",
    "AT_DisableTrig": "DISABLE TRIGGER", "AT_DisableTrigAll": "DISABLE TRIGGER ALL",
    "AT_DisableTrigUser": "DISABLE TRIGGER USER", "AT_DisableRule": "DISABLE RULE",
    "AT_EnableReplicaTrig": "ENABLE REPLICA TRIGGER", "AT_EnableReplicaRule": "ENABLE REPLICA RULE",
}
# settings a plan may SET without a human: they change nothing but this session's manners
SAFE_SETTINGS = frozenset({
    "statement_timeout", "lock_timeout", "idle_in_transaction_session_timeout",
    "idle_session_timeout", "transaction_timeout", "search_path", "timezone", "datestyle",
    "intervalstyle", "client_encoding", "client_min_messages", "application_name",
    "work_mem", "maintenance_work_mem", "extra_float_digits", "bytea_output",
    "standard_conforming_strings", "transaction", "transaction_isolation",
    "transaction_read_only", "transaction_deferrable", "default_transaction_isolation",
    "default_transaction_read_only", "session characteristics", "synchronous_commit",
    "jit", "random_page_cost", "seq_page_cost", "effective_cache_size", "lc_messages",
    "lc_monetary", "lc_numeric", "lc_time", "xmloption", "row_security", "enable_seqscan",
    "enable_indexscan", "enable_bitmapscan", "enable_hashjoin", "enable_mergejoin",
    "enable_nestloop", "enable_sort", "enable_hashagg", "max_parallel_workers_per_gather",
})
# functions that act on the server, files, other sessions or run SQL from text
ADMIN_FUNCTIONS = frozenset({
    "pg_terminate_backend", "pg_cancel_backend", "pg_reload_conf", "pg_rotate_logfile",
    "set_config", "pg_promote", "pg_switch_wal", "pg_create_restore_point", "pg_backup_start",
    "pg_backup_stop", "pg_start_backup", "pg_stop_backup", "pg_wal_replay_pause",
    "pg_wal_replay_resume", "pg_create_physical_replication_slot",
    "pg_create_logical_replication_slot", "pg_drop_replication_slot",
    "pg_copy_physical_replication_slot", "pg_copy_logical_replication_slot",
    "pg_replication_slot_advance", "pg_logical_slot_get_changes",
    "pg_logical_slot_get_binary_changes", "pg_replication_origin_create",
    "pg_replication_origin_drop", "pg_replication_origin_advance",
    "pg_replication_origin_session_setup", "pg_logical_emit_message", "pg_read_file",
    "pg_read_binary_file", "pg_ls_dir", "pg_stat_file", "pg_ls_logdir", "pg_ls_waldir",
    "pg_ls_tmpdir", "pg_ls_archive_statusdir", "pg_file_write", "pg_file_unlink",
    "pg_file_rename", "pg_file_sync", "pg_logdir_ls", "lo_import", "lo_export", "lo_unlink",
    "dblink", "dblink_exec", "dblink_connect", "dblink_connect_u", "dblink_send_query",
    "dblink_open", "dblink_fetch", "query_to_xml", "query_to_xmlschema",
    "query_to_xml_and_xmlschema", "cursor_to_xml", "cursor_to_xmlschema", "pg_stat_reset",
    "pg_stat_reset_shared", "pg_stat_reset_single_table_counters",
    "pg_stat_reset_single_function_counters", "pg_stat_reset_slru",
    "pg_stat_reset_replication_slot", "pg_stat_reset_subscription_stats",
    "pg_truncate_visibility_map", "pg_import_system_collations",
    "pg_log_backend_memory_contexts", "pg_sequence_last_value",
})
# functions that write, and nothing worse
WRITING_FUNCTIONS = frozenset({
    "nextval", "setval", "lo_create", "lo_creat", "lo_from_bytea", "lo_put", "lo_truncate",
    "lo_truncate64", "lowrite", "lo_open", "pg_notify", "pg_advisory_lock",
    "pg_advisory_lock_shared", "pg_advisory_xact_lock", "pg_advisory_xact_lock_shared",
    "pg_try_advisory_lock", "pg_try_advisory_lock_shared", "pg_try_advisory_xact_lock",
    "pg_try_advisory_xact_lock_shared", "pg_advisory_unlock", "pg_advisory_unlock_shared",
    "pg_advisory_unlock_all",
})
# statements that set up the session or the transaction: they write nothing
SESSION = frozenset({"VariableSetStmt", "TransactionStmt"})
# extensions that reach beyond the database: untrusted languages, files, other servers
POWERFUL_EXTENSIONS = frozenset({
    "plperlu", "plpython3u", "plpythonu", "plpython2u", "pltclu", "adminpack", "file_fdw",
    "dblink", "postgres_fdw", "pageinspect", "pg_buffercache",
})
TWO_PHASE = frozenset({"TRANS_STMT_PREPARE", "TRANS_STMT_COMMIT_PREPARED",
                       "TRANS_STMT_ROLLBACK_PREPARED"})
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
    def stmt_DeleteStmt(self, body: dict[str, Any], ctx: _Ctx, source: str) -> _Ctx:
        self.dml("DELETE FROM", body, ctx)
        return ctx

    def stmt_UpdateStmt(self, body: dict[str, Any], ctx: _Ctx, source: str) -> _Ctx:
        self.dml("UPDATE", body, ctx)
        return ctx

    def dml(self, verb: str, body: dict[str, Any], ctx: _Ctx) -> None:
        relation = body.get("relation") or {}
        target = f"{verb} {_relation(relation)}"
        where = body.get("whereClause")
        if where is None:
            self.signal(ctx, f"{target} (no WHERE)")
        elif _selects_every_row(where, _target_names(relation)):
            self.signal(ctx, f"{target} (its WHERE selects every row)")

    def stmt_MergeStmt(self, body: dict[str, Any], ctx: _Ctx, source: str) -> _Ctx:
        relation = body.get("relation") or {}
        target = f"MERGE INTO {_relation(relation)}"
        commands = {(_node(c)[1] or {}).get("commandType")
                    for c in body.get("mergeWhenClauses") or []}
        if "CMD_DELETE" in commands:
            self.signal(ctx, f"{target} ... DELETE")
        elif "CMD_UPDATE" in commands and _selects_every_row(
                body.get("joinCondition"), _target_names(relation)):
            self.signal(ctx, f"{target} (its ON selects every row)")
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
        if kind in ("VAR_RESET", "VAR_RESET_ALL") or name in SAFE_SETTINGS:
            return ctx
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


# reading nodes
def _node(value: Any) -> tuple[str, dict[str, Any] | None]:
    """(type, fields) of a wrapped node ``{"Type": {...}}``."""
    if isinstance(value, dict) and len(value) == 1:
        ((kind, body),) = value.items()
        if isinstance(body, dict):
            return kind, body
    return "", None


def _nodes(stmt: Any) -> list[tuple[str, dict[str, Any]]]:
    kind, body = _node(stmt)
    return [(kind, body)] if body is not None else []


def _strings(value: Any) -> list[str]:
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


def _ident(name: str) -> str:
    return name if _SIMPLE_IDENT.fullmatch(name) else '"' + name.replace('"', '""') + '"'


def _name(value: Any) -> str:
    parts = _strings(value)
    return shown(".".join(_ident(p) for p in parts)) if parts else "?"


def _relation(rv: dict[str, Any]) -> str:
    parts = [rv[k] for k in ("catalogname", "schemaname", "relname") if rv.get(k)]
    return shown(".".join(_ident(str(p)) for p in parts)) if parts else "?"


def _target_names(rv: dict[str, Any]) -> set[str]:
    names = {str(rv.get("relname") or "")}
    alias = rv.get("alias") or {}
    if alias.get("aliasname"):
        names.add(str(alias["aliasname"]))
    return names


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


def _explain_runs(body: dict[str, Any]) -> bool:
    for option in body.get("options") or []:
        _, elem = _node(option)
        if elem and elem.get("defname") == "analyze" and _option_on(elem):
            return True
    return False


# whether a WHERE filters rows at all
_TRUE_WORDS = ("t", "tr", "tru", "true", "y", "ye", "yes", "on", "1")
_FALSE_WORDS = ("f", "fa", "fal", "fals", "false", "n", "no", "of", "off", "0")


def _selects_every_row(where: Any, target: set[str]) -> bool:
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
