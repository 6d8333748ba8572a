"""The statement kinds, settings and functions the SQL gate (``sql_plan``) knows:
which only read, which write, which it cannot judge, which change access,
which store code, which settings and functions are harmless or administrative,
what a stored expression may call, and how many rows a plan may name. Data
only: adding a name here changes a verdict, so each table says what it is for.

Code that stays behind (it may run later with another role's rights: an
index expression runs as the table's owner under VACUUM and ANALYZE, a view's
query, a trigger, an operator, a cast or a type's functions as whoever uses
them): every ``CREATE [OR REPLACE] FUNCTION``/``PROCEDURE`` in any language,
``TRIGGER``, ``RULE``, ``VIEW``, ``MATERIALIZED VIEW``, ``SCHEMA``, base
``TYPE`` (its I/O functions) and ranges naming functions, ``DOMAIN`` with
``CHECK``, ``AGGREGATE``, ``OPERATOR`` (class, family), ``CAST``, ``POLICY``,
``EVENT TRIGGER``, ``LANGUAGE``, ``EXTENSION`` (and its ``UPDATE``),
``CONVERSION``, text search objects, foreign data wrappers, servers and
tables, publications and subscriptions, ``ALTER DEFAULT PRIVILEGES`` and
``ALTER ... OWNER``. Enum, composite and shell types, plain ranges and
domains without ``CHECK`` hold no code and pass. In the expressions such a
statement stores (column defaults, ``CHECK``, generated columns, index
expressions and predicates, partition keys and bounds, statistics, ``SET
DEFAULT``/``SET EXPRESSION``, ``ADD CONSTRAINT``), every function call is a
signal unless it is one of ``STORED_FUNCTIONS`` (``now``, ``lower``, ...)
called unqualified or by its pg_catalog name, and every operator unless it is
a built-in comparison, arithmetic, ``LIKE`` or ``BETWEEN``
(``STORED_OPERATORS``); ``CURRENT_TIMESTAMP`` and its kin, ``COALESCE``,
``GREATEST`` and ``CASE`` are no calls.
"""

from __future__ import annotations

from typing import Any

# statements that neither write nor change the session's rights
READ_ONLY = frozenset({
    "SelectStmt", "VariableShowStmt", "ExplainStmt", "DeclareCursorStmt", "FetchStmt",
    "ClosePortalStmt", "DiscardStmt", "ListenStmt", "UnlistenStmt", "DeallocateStmt",
    "ConstraintsSetStmt", "ReturnStmt", "SetOperationStmt", "PrepareStmt",
})
# statements that write and are not destructive in themselves (what they
# contain is walked like everything else)
WRITES = frozenset({
    "InsertStmt", "CreateStmt", "CreateTableAsStmt", "CreateSeqStmt",
    "AlterSeqStmt", "IndexStmt", "CompositeTypeStmt", "CreateEnumStmt",
    "CreateRangeStmt", "CreateDomainStmt", "DefineStmt", "CreateStatsStmt", "AlterStatsStmt",
    "CreateTableSpaceStmt", "AlterTableSpaceOptionsStmt", "AlterTableMoveAllStmt",
    "CommentStmt", "SecLabelStmt", "RefreshMatViewStmt", "NotifyStmt",
    "AlterCollationStmt", "AlterTSDictionaryStmt",
    "AlterObjectDependsStmt", "ReplicaIdentityStmt", "CreatedbStmt",
    "AlterDatabaseRefreshCollStmt", "PLAssignStmt",
})
# what a statement that stores code is: the code runs later, maybe as another
# role (an index expression runs as the table's owner under VACUUM and ANALYZE;
# a view's query, a trigger, an operator's or a type's functions as whoever
# uses them), so a human judges every one, whatever it says today
CODE = "creates code that may later run with another role's rights: a human judges"
# statements that store code (beside the ones with rules of their own in
# sql_plan: functions, triggers, materialized views, aggregates, operators,
# base types, text search objects, domains with CHECK, ranges with functions,
# extensions)
CODE_STATEMENTS = {
    "ViewStmt": "CREATE VIEW", "CreateSchemaStmt": "CREATE SCHEMA",
    "CreateConversionStmt": "CREATE CONVERSION", "CreateCastStmt": "CREATE CAST",
    "CreateOpClassStmt": "CREATE OPERATOR CLASS", "CreateOpFamilyStmt": "CREATE OPERATOR FAMILY",
    "CreateAmStmt": "CREATE ACCESS METHOD", "CreateTransformStmt": "CREATE TRANSFORM",
    "AlterOperatorStmt": "ALTER OPERATOR", "AlterTypeStmt": "ALTER TYPE",
    "AlterExtensionStmt": "ALTER EXTENSION",
    "CreateFdwStmt": "CREATE FOREIGN DATA WRAPPER", "AlterFdwStmt": "ALTER FOREIGN DATA WRAPPER",
}
# statements that reach beyond the database: rows sent to or read from elsewhere
BEYOND = "reaches beyond the database: a human judges"
BEYOND_STATEMENTS = {
    "CreateForeignServerStmt": "CREATE SERVER", "AlterForeignServerStmt": "ALTER SERVER",
    "CreateForeignTableStmt": "CREATE FOREIGN TABLE",
    "ImportForeignSchemaStmt": "IMPORT FOREIGN SCHEMA",
    "CreatePublicationStmt": "CREATE PUBLICATION",
}
# statements whose expressions are stored and evaluated later, maybe as another
# role (defaults, CHECK, generated columns, index expressions and predicates,
# partition keys, extended statistics): every function call and operator in
# them is judged (STORED_FUNCTIONS, STORED_OPERATORS)
STORED_EXPRESSIONS = frozenset({
    "CreateStmt", "AlterTableStmt", "IndexStmt", "CreateDomainStmt", "AlterDomainStmt",
    "CreateStatsStmt", "CreateForeignTableStmt",
})
# the only functions a stored expression may call without a human: built-in,
# side-effect free, called unqualified or by their pg_catalog name. Kept tiny on
# purpose: any other call may be a user's function (or become one on another
# search_path), and what it does is not in the plan. CURRENT_TIMESTAMP,
# CURRENT_USER and their kin are no calls (SQLValueFunction), COALESCE,
# GREATEST, NULLIF and CASE are expressions of their own.
STORED_FUNCTIONS = frozenset({"now", "gen_random_uuid", "lower", "upper", "length"})
# the only operators a stored expression may use without a human: the built-in
# comparisons, arithmetic, LIKE and BETWEEN (unqualified or pg_catalog's)
STORED_OPERATORS = frozenset({
    "=", "<>", "!=", "<", ">", "<=", ">=", "+", "-", "*", "/", "%", "~~", "!~~", "~~*", "!~~*",
    "BETWEEN", "NOT BETWEEN", "BETWEEN SYMMETRIC", "NOT BETWEEN SYMMETRIC",
})
# foreign key actions that make a later delete or update reach the referencing table
FK_ACTIONS = {"c": "CASCADE", "n": "SET NULL", "d": "SET DEFAULT"}
# the most rows already there the pinned statements of one plan may name
# together before a human judges (a key named in an IN list, a VALUES row)
MAX_PINNED_ROWS = 20
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
# functions that move a sequence anywhere: it may hand out values already used, and
# every later INSERT that takes one fails on a duplicate key (a human judges)
REWINDING_FUNCTIONS = frozenset({"setval"})
REWINDS = ("moves the values a sequence hands out: it may give out ones already used, and "
           "later INSERTs fail on a duplicate key: a human judges")
# ALTER SEQUENCE options that move its next values (OWNED BY, CACHE do not)
SEQUENCE_MOVES = frozenset({"restart", "start", "increment", "minvalue", "maxvalue", "cycle",
                            "as"})


def sequence_moves(options: Any) -> str:
    """The options of an ``ALTER SEQUENCE`` (pglast's ``DefElem`` list) among
    ``SEQUENCE_MOVES``, as the statement spells them; "" for none."""
    names = {str((o.get("DefElem") or o).get("defname")) for o in options or ()
             if isinstance(o, dict)}
    return ", ".join(sorted(n.upper() for n in names & SEQUENCE_MOVES))
# functions that write, and nothing worse
WRITING_FUNCTIONS = frozenset({
    "nextval", "lo_create", "lo_creat", "lo_from_bytea", "lo_put", "lo_truncate",
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
# the A_Expr kinds a stored expression may use (with a STORED_OPERATORS name)
STORED_KINDS = frozenset({
    "AEXPR_OP", "AEXPR_OP_ANY", "AEXPR_OP_ALL", "AEXPR_DISTINCT", "AEXPR_NOT_DISTINCT",
    "AEXPR_NULLIF", "AEXPR_IN", "AEXPR_LIKE", "AEXPR_ILIKE", "AEXPR_BETWEEN",
    "AEXPR_NOT_BETWEEN", "AEXPR_BETWEEN_SYM", "AEXPR_NOT_BETWEEN_SYM",
})
