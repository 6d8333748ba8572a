"""The statement kinds, settings and functions the SQL gate (``sql_plan``) knows:
which only read, which write, which it cannot judge, which change access, which
settings and functions are harmless or administrative. Data only: adding a name
here changes a verdict, so each table says what it is for."""

from __future__ import annotations

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
