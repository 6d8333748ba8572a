"""The destructive-change gate: what each plan reader finds (SQL with
PostgreSQL's parser, Terraform's JSON plans, Kubernetes manifests and
operations), how the tier and the reading make a verdict, and that the gate
never raises. Every signal has disguises that must fire and controls that must
not; the SQL row cases are run on a real PostgreSQL to prove that every plan
the gate lets through leaves the rows it does not pin intact, and that the
plans it stops really change rows."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pglast import keywords as pg_keywords

from agent_sandbox.actions import gate, kube_plan, sql_plan, terraform_plan
from agent_sandbox.actions.plan_reading import Reading
from agent_sandbox.actions.sql_kinds import CODE, MAX_PINNED_ROWS
from agent_sandbox.actions.sql_where import SYSTEM_COLUMNS
from agent_sandbox.spec.actions import Action

DATA = Path(__file__).parent / "data"
PG_BIN = Path("/usr/lib/postgresql/15/bin")


def action(tier: str = "write", kind: str | None = "sql", param_type: str = "string") -> Action:
    spec: dict[str, Any] = {
        "description": "test action", "tier": tier, "image": "localhost/base:1",
        "argv": ["run", "{plan}"],
        "params": {"type": "object", "required": ["plan"],
                   "properties": {"plan": {"type": param_type}}},
    }
    if kind is not None:
        spec["plan"] = {"kind": kind, "param": "plan"}
    return Action.model_validate(spec)


def sql(text: str) -> Reading:
    reading = sql_plan.read(text)
    assert reading.unreadable is None, reading.unreadable
    return reading


# ---------------------------------------------------------------- SQL signals

PIN = "(WHERE does not pin rows by equality: a human judges)"
NOT_VALUES = "(its rows are not a VALUES list of constants: a human judges)"
IN_A_BODY = "(in a function's body its names may be parameters: a human judges)"
BOOLEANS = "compares with values that may be booleans, which pin no rows: a human judges"
STORED = f"in a stored expression ({CODE})"
CASCADES = "reach other tables: a human judges)"
MANY = f"more than {MAX_PINNED_ROWS}: a human judges"


def keys(first: int, last: int) -> str:
    return ", ".join(str(i) for i in range(first, last + 1))


# the second red team's plans, as they wrote them: each ran at once past the gate
# and reached a standing superuser or emptied a table
RED_INDEX = (
    "CREATE FUNCTION g(x int) RETURNS int LANGUAGE plpgsql AS $$ BEGIN "
    "INSERT INTO public.log VALUES (current_user); RETURN x; END $$; "
    "CREATE FUNCTION f(x int) RETURNS int LANGUAGE plpgsql IMMUTABLE AS $$ BEGIN "
    "RETURN public.g(x); END $$; "
    "CREATE TABLE t (col int); CREATE INDEX ON t ((f(col))); INSERT INTO t VALUES (1)")
RED_CASCADE = ("ALTER TABLE orders ADD COLUMN anchor int NOT NULL DEFAULT 1 "
               "REFERENCES fk_anchor(id) ON DELETE CASCADE")
RED_IN = f"DELETE FROM orders WHERE id IN ({keys(1, 700)})"

FIRES = [
    # DROP of anything, however written
    ("DROP TABLE users", "DROP TABLE users"),
    ('drop table "Users"', 'DROP TABLE "Users"'),
    ("DrOp TaBlE public.users CASCADE", "DROP TABLE public.users CASCADE"),
    ("/* hello */ DROP /* x */ TABLE -- y\n users", "DROP TABLE users"),
    ("DROP SCHEMA app CASCADE", "DROP SCHEMA app"),
    ("DROP INDEX CONCURRENTLY idx", "DROP INDEX idx"),
    ("DROP FUNCTION f(int)", "DROP FUNCTION f"),
    ("DROP ROLE bob", "DROP ROLE bob"),
    ("DROP DATABASE prod", "DROP DATABASE prod"),
    ("DROP OWNED BY bob", "DROP OWNED"),
    ("DROP VIEW v; DROP SEQUENCE s", "DROP SEQUENCE s"),
    ("DROP EXTENSION pgcrypto", "DROP EXTENSION pgcrypto"),
    ("DROP POLICY p ON t", "DROP POLICY"),
    ("DROP TRIGGER trg ON t", "DROP TRIGGER"),
    ("TRUNCATE orders", "TRUNCATE orders"),
    ("truncate table a, b restart identity", "TRUNCATE a, b"),
    # every statement of a multi-statement string
    ("SELECT 1; SELECT 2; DROP TABLE t", "DROP TABLE t"),
    ("SELECT $$; DROP TABLE t; $$; DELETE FROM u", "DELETE FROM u (no WHERE)"),
    ("SELECT 'a;'; DELETE FROM u", "DELETE FROM u (no WHERE)"),
    # DELETE/UPDATE without WHERE, or with one that does not pin its rows by equality
    ("DELETE FROM orders", "DELETE FROM orders (no WHERE)"),
    ("delete from ONLY orders", "DELETE FROM orders (no WHERE)"),
    ("DELETE FROM orders o RETURNING *", "DELETE FROM orders (no WHERE)"),
    ("UPDATE orders SET paid = true", "UPDATE orders (no WHERE)"),
    ("DELETE FROM t WHERE true", PIN),
    ("DELETE FROM t WHERE TRUE::boolean", PIN),
    ("DELETE FROM t WHERE 1=1", PIN),
    ("DELETE FROM t WHERE 1 = 1.0", PIN),
    ("DELETE FROM t WHERE 2 > 1", PIN),
    ("DELETE FROM t WHERE 'a'='a'", PIN),
    ("DELETE FROM t WHERE $q$a$q$ = $q$a$q$", PIN),
    ("DELETE FROM t WHERE NOT false", PIN),
    ("DELETE FROM t WHERE NOT NOT true", PIN),
    ("DELETE FROM t WHERE 'yes'", PIN),
    ("DELETE FROM t WHERE 'on'::bool", PIN),
    ("DELETE FROM t WHERE 1::boolean", PIN),
    ("DELETE FROM t WHERE true IS TRUE", PIN),
    ("DELETE FROM t WHERE null IS NULL", PIN),
    ("DELETE FROM t WHERE id = 5 OR true", PIN),
    ("DELETE FROM t WHERE id = 5 OR 1=1", PIN),
    ("DELETE FROM t WHERE (id = 5) OR NOT (id = 5)", PIN),
    ("DELETE FROM t WHERE id = id", PIN),
    ("DELETE FROM t WHERE t.id >= t.id", PIN),
    ("DELETE FROM t WHERE id IS NOT DISTINCT FROM id", PIN),
    ("DELETE FROM t WHERE x IS NULL OR x IS NOT NULL", PIN),
    ("DELETE FROM t WHERE random() < 2", PIN),
    ("DELETE FROM t WHERE now() > '2000-01-01'", PIN),
    ("DELETE FROM t WHERE EXISTS (SELECT 1)", PIN),
    ("DELETE FROM t WHERE (SELECT count(*) FROM pg_class) > 0", PIN),
    ("DELETE FROM t WHERE current_user = current_user", PIN),
    ("DELETE FROM t USING u WHERE u.flag", PIN),
    ("DELETE FROM t x USING u WHERE u.id = 3", PIN),
    ("UPDATE t SET x = 1 WHERE 'a' < 'b'",
     "UPDATE t (WHERE does not pin rows by equality: a human judges)"),
    ("MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN DELETE", "MERGE INTO t ... DELETE"),
    ("MERGE INTO t USING s ON true WHEN MATCHED THEN UPDATE SET x = 1",
     "MERGE INTO t ... UPDATE (its source is not a VALUES list of constants: a human judges)"),
    # the red team's plans: each emptied or overwrote a real table past the old gate
    ("DELETE FROM orders WHERE ctid IS NOT NULL", f"DELETE FROM orders {PIN}"),
    ("INSERT INTO orders SELECT * FROM orders ON CONFLICT (id) DO UPDATE SET item = 'gone', "
     "qty = 0", f"INSERT INTO orders ON CONFLICT DO UPDATE {NOT_VALUES}"),
    ("MERGE INTO orders USING orders s ON orders.id = s.id WHEN MATCHED THEN UPDATE SET "
     "item = 'gone'", "MERGE INTO orders ... UPDATE (its source is not a VALUES list"),
    ("UPDATE orders SET item = 'gone' WHERE id = id + 0", f"UPDATE orders {PIN}"),
    ("DELETE FROM orders WHERE id IN (SELECT id FROM orders)", f"DELETE FROM orders {PIN}"),
    ("DELETE FROM orders WHERE tableoid > 0", PIN),
    ("DELETE FROM orders WHERE (id = id) = true", PIN),
    ("DELETE FROM orders WHERE orders.* IS NOT NULL", PIN),
    ("WITH x AS (DELETE FROM orders WHERE id > 0 RETURNING *) SELECT count(*) FROM x",
     f"DELETE FROM orders {PIN}"),
    # the same class: no condition the gate cannot prove pins its rows passes
    ("DELETE FROM t WHERE id >= id", PIN),
    ("DELETE FROM t WHERE COALESCE(id, 0) = COALESCE(id, 0)", PIN),
    ("DELETE FROM t WHERE id = ANY(ARRAY(SELECT id FROM t))", PIN),
    ("DELETE FROM t WHERE id = ANY('{1,2}')", PIN),
    ("DELETE FROM t WHERE (id, x) = (id, x)", PIN),
    ("DELETE FROM t WHERE NOT (id <> id)", PIN),
    ("DELETE FROM t WHERE id BETWEEN -1e9 AND 1e9", PIN),
    ("DELETE FROM t WHERE id > 0", PIN),
    ("DELETE FROM t WHERE id <> 5", PIN),
    ("DELETE FROM t WHERE id NOT IN (5)", PIN),
    ("DELETE FROM t WHERE id IS NOT NULL", PIN),
    ("DELETE FROM t WHERE id = id + 0", PIN),
    ("DELETE FROM t WHERE id = (SELECT max(id) FROM t)", PIN),
    ("DELETE FROM t WHERE id = abs(id)", PIN),
    ("DELETE FROM t WHERE id = 5 OR id = 6", PIN),
    ("DELETE FROM t WHERE (id = 5) IS NOT FALSE OR true", PIN),
    ("DELETE FROM t WHERE id = 5 IS TRUE", PIN),
    ("DELETE FROM t WHERE id::int = 5", PIN),
    ("DELETE FROM t WHERE id OPERATOR(public.=) 5", PIN),
    ("DELETE FROM t WHERE xmin = 5", PIN),
    ("DELETE FROM t WHERE ctid = '(0,1)'", PIN),
    ("DELETE FROM t WHERE t = t", PIN),
    ("DELETE FROM t WHERE t.* = t.*", PIN),
    ("DELETE FROM t WHERE x = id", PIN),
    ("DELETE FROM t WHERE false", PIN),
    ("DELETE FROM t WHERE CURRENT OF c", PIN),
    ("DELETE FROM t WHERE id IN (1, id)", PIN),
    ("DELETE FROM t WHERE id IN (1, (SELECT 2))", PIN),
    ("DELETE FROM t o WHERE t.id = 5", PIN),  # the alias names the target, t does not
    ("DELETE FROM t USING u WHERE id = 5", PIN),  # id may be u's
    ("UPDATE t SET x = 0 FROM u WHERE id = 5", PIN),
    ("DELETE FROM t USING u WHERE t.id = u.id", PIN),
    ("DELETE FROM t WHERE other.id = 5", PIN),
    ("DELETE FROM t WHERE public.t.id = 5", PIN),
    ("DELETE FROM orders WHERE created < now() - interval '30 days'", PIN),
    ("DELETE FROM orders o WHERE o.id IN (SELECT order_id FROM refunds)", PIN),
    ("UPDATE t SET x = u.x FROM u WHERE t.id = u.id", PIN),
    ("PREPARE p AS DELETE FROM t WHERE id > $1; EXECUTE p(0)", PIN),
    ("CREATE RULE r AS ON INSERT TO a DO ALSO DELETE FROM b WHERE b.id > 0", PIN),
    # in a function's body a name may be a parameter, given per call
    ("CREATE FUNCTION f(k int) RETURNS void LANGUAGE sql AS 'DELETE FROM t WHERE k = 5'",
     f"in function f: DELETE FROM t {IN_A_BODY}"),
    ("CREATE FUNCTION t(id int) RETURNS void LANGUAGE sql AS 'DELETE FROM t WHERE t.id = 5'",
     f"in function t: DELETE FROM t {IN_A_BODY}"),
    ("CREATE FUNCTION f(x int) RETURNS void LANGUAGE sql AS 'UPDATE t SET x = 0 WHERE id = $1'",
     f"in function f: UPDATE t {IN_A_BODY}"),
    ("CREATE FUNCTION f(x int) RETURNS int LANGUAGE plpgsql AS $$ DECLARE y int; BEGIN "
     "y = x * 2; UPDATE t SET a = y WHERE id = x; RETURN y; END $$",
     f"in function f: UPDATE t {IN_A_BODY}"),
    ("CREATE FUNCTION f() RETURNS void LANGUAGE plpgsql AS $$ <<t>> DECLARE id int; BEGIN "
     "DELETE FROM t WHERE t.id = 5; END $$", f"in function f: DELETE FROM t {IN_A_BODY}"),
    ("CREATE FUNCTION f(v int) RETURNS void LANGUAGE sql AS "
     "'INSERT INTO t VALUES ($1, 0) ON CONFLICT (id) DO UPDATE SET x = 0'",
     f"in function f: INSERT INTO t ON CONFLICT DO UPDATE {NOT_VALUES}"),
    # INSERT ... ON CONFLICT DO UPDATE: rows already there, as many as the query yields
    ("INSERT INTO t SELECT * FROM u ON CONFLICT (id) DO UPDATE SET x = excluded.x",
     f"INSERT INTO t ON CONFLICT DO UPDATE {NOT_VALUES}"),
    ("INSERT INTO t SELECT g, 0 FROM generate_series(1, 10) g ON CONFLICT (id) DO UPDATE "
     "SET x = 0 WHERE t.id = 5", NOT_VALUES),
    ("INSERT INTO t VALUES ((SELECT max(id) FROM t), 0) ON CONFLICT (id) DO UPDATE SET x = 0",
     NOT_VALUES),
    ("INSERT INTO t VALUES (random()::int, 0) ON CONFLICT (id) DO UPDATE SET x = 0", NOT_VALUES),
    ("INSERT INTO t (VALUES (1, 0) UNION ALL SELECT id, 0 FROM t) ON CONFLICT (id) DO UPDATE "
     "SET x = 0", NOT_VALUES),
    ("WITH s AS (SELECT id FROM t) INSERT INTO t SELECT id, 0 FROM s ON CONFLICT (id) "
     "DO UPDATE SET x = 0", NOT_VALUES),
    ("INSERT INTO t DEFAULT VALUES ON CONFLICT (id) DO UPDATE SET x = 0", NOT_VALUES),
    # MERGE: UPDATE and DELETE of rows already there
    ("MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN UPDATE SET x = s.x "
     "WHEN NOT MATCHED THEN INSERT VALUES (s.id, s.x)",
     "MERGE INTO t ... UPDATE (its source is not a VALUES list"),
    ("MERGE INTO t USING (SELECT 1 AS id) s ON t.id = 1 WHEN MATCHED THEN DELETE",
     "MERGE INTO t ... DELETE (its source is not a VALUES list"),
    ("MERGE INTO t USING (VALUES (1)) v(id) ON t.id > v.id WHEN MATCHED THEN UPDATE SET x = 0",
     "MERGE INTO t ... UPDATE (ON does not pin rows by equality: a human judges)"),
    ("MERGE INTO t USING (VALUES (1)) v(id) ON true WHEN MATCHED THEN DELETE",
     "MERGE INTO t ... DELETE (ON does not pin"),
    ("MERGE INTO t USING (VALUES (1)) v(id) ON t.id = v.id OR true WHEN MATCHED THEN DELETE",
     "ON does not pin"),
    ("MERGE INTO t USING (VALUES ((SELECT 1))) v(id) ON t.id = v.id WHEN MATCHED THEN DELETE",
     "its source is not a VALUES list"),
    ("MERGE INTO t USING (VALUES (1)) v(id) ON t.id = v.id WHEN MATCHED THEN UPDATE SET x = 0 "
     "WHEN NOT MATCHED BY SOURCE THEN DELETE",
     "MERGE INTO t ... UPDATE/DELETE WHEN NOT MATCHED BY SOURCE"),
    ("CREATE FUNCTION f() RETURNS void LANGUAGE sql AS 'MERGE INTO t USING (VALUES (1)) v(id) "
     "ON t.id = v.id WHEN MATCHED THEN DELETE'", f"in function f: MERGE INTO t ... DELETE "
     f"{IN_A_BODY}"),
    # what would change the meaning of "=" or of a cast for later statements
    ("CREATE OPERATOR public.= (LEFTARG = int, RIGHTARG = int, FUNCTION = always_true)",
     "CREATE OPERATOR public.\"=\" (changes what later comparisons mean"),
    ("CREATE CAST (text AS int) WITH FUNCTION f(text)", "CREATE CAST"),
    ("SET search_path = public, pg_catalog", "SET search_path with a schema before pg_catalog"),
    ("SET search_path TO 'app, \"pg_catalog\"'", "a schema before pg_catalog"),
    # statements nested where a reader of the first word would not look
    ("WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d", "DELETE FROM t (no WHERE)"),
    ("WITH a AS (SELECT 1), d AS (UPDATE t SET x = 0 RETURNING 1) SELECT 1",
     "UPDATE t (no WHERE)"),
    ("SELECT * FROM (WITH d AS (DELETE FROM t RETURNING 1) SELECT * FROM d) q",
     "DELETE FROM t (no WHERE)"),
    ("INSERT INTO log WITH d AS (DELETE FROM t RETURNING id) SELECT id FROM d",
     "DELETE FROM t (no WHERE)"),
    ("EXPLAIN ANALYZE DELETE FROM t", "DELETE FROM t (no WHERE)"),
    ("EXPLAIN (ANALYZE) DELETE FROM t", "DELETE FROM t (no WHERE)"),
    ("EXPLAIN (ANALYZE true, VERBOSE) DELETE FROM t", "DELETE FROM t (no WHERE)"),
    ("EXPLAIN (ANALYZE 1) DELETE FROM t", "DELETE FROM t (no WHERE)"),
    ("EXPLAIN (ANALYZE 'on') DELETE FROM t", "DELETE FROM t (no WHERE)"),
    ("PREPARE p AS DELETE FROM t; EXECUTE p", "DELETE FROM t (no WHERE)"),
    ("PREPARE p AS SELECT 1; EXECUTE q", "EXECUTE q of a statement prepared outside"),
    ("PREPARE p AS SELECT 1; DEALLOCATE p; EXECUTE p", "EXECUTE p of a statement prepared"),
    ("PREPARE p AS SELECT 1; DEALLOCATE ALL; EXECUTE p", "EXECUTE p of a statement prepared"),
    ("EXECUTE p; PREPARE p AS SELECT 1", "EXECUTE p of a statement prepared"),
    ("COPY (DELETE FROM t RETURNING *) TO STDOUT", "DELETE FROM t (no WHERE)"),
    ("DECLARE c CURSOR FOR WITH d AS (DELETE FROM t RETURNING 1) SELECT 1",
     "DELETE FROM t (no WHERE)"),
    ("CREATE RULE r AS ON INSERT TO a DO INSTEAD DELETE FROM b", "CREATE RULE"),
    ("CREATE RULE r AS ON INSERT TO a DO INSTEAD DELETE FROM b", "DELETE FROM b (no WHERE)"),
    # ALTER ... DROP and its kin
    ("ALTER TABLE t DROP COLUMN email", "ALTER TABLE t DROP COLUMN email"),
    ("ALTER TABLE t DROP email", "DROP COLUMN email"),
    ("ALTER TABLE t ADD COLUMN a int, DROP CONSTRAINT t_pk", "DROP CONSTRAINT t_pk"),
    ("ALTER TABLE t ALTER COLUMN a DROP NOT NULL", "DROP NOT NULL a"),
    ("ALTER TABLE t ALTER COLUMN a DROP DEFAULT", "DROP DEFAULT"),
    ("ALTER TABLE t ALTER COLUMN a DROP IDENTITY", "DROP IDENTITY a"),
    ("ALTER TABLE t ALTER COLUMN a TYPE text", "ALTER COLUMN TYPE"),
    ("ALTER TABLE t ALTER a SET DATA TYPE int USING 0", "ALTER COLUMN TYPE"),
    ("ALTER TABLE p DETACH PARTITION p1", "DETACH PARTITION"),
    ("ALTER TABLE t SET UNLOGGED", "SET UNLOGGED"),
    ("ALTER TABLE t NO INHERIT parent", "NO INHERIT"),
    ("ALTER TABLE t DISABLE TRIGGER ALL", "DISABLE TRIGGER ALL"),
    ("ALTER TABLE t DISABLE ROW LEVEL SECURITY", "DISABLE ROW LEVEL SECURITY"),
    ("ALTER TABLE IF EXISTS ONLY t DROP COLUMN IF EXISTS a", "DROP COLUMN a"),
    ("ALTER TYPE addr DROP ATTRIBUTE street", "DROP COLUMN street"),
    ("ALTER DOMAIN d DROP CONSTRAINT c", "ALTER DOMAIN d DROP CONSTRAINT"),
    ("ALTER DOMAIN d DROP NOT NULL", "ALTER DOMAIN d DROP NOT NULL"),
    ("ALTER EXTENSION e DROP FUNCTION f()", "ALTER EXTENSION e DROP"),
    ("ALTER PUBLICATION p DROP TABLE t", "ALTER PUBLICATION p DROP"),
    # every RENAME
    ("ALTER TABLE t RENAME TO u", "RENAME TO u"),
    ("ALTER TABLE t RENAME COLUMN a TO b", "RENAME TO b"),
    ('ALTER TABLE "T" RENAME CONSTRAINT c TO d', "RENAME TO d"),
    ("ALTER INDEX i RENAME TO j", "RENAME TO j"),
    ("ALTER SCHEMA s RENAME TO z", "RENAME TO z"),
    ("ALTER TYPE e RENAME VALUE 'a' TO 'b'", "RENAME VALUE"),
    ("ALTER TABLE t SET SCHEMA archive", "SET SCHEMA archive"),
    # access: grants, roles, ownership, policies
    ("GRANT SELECT ON t TO bob", "GRANT/REVOKE"),
    ("REVOKE ALL ON t FROM PUBLIC", "GRANT/REVOKE"),
    ("GRANT admin TO bob", "GRANT/REVOKE of a role"),
    ("ALTER DEFAULT PRIVILEGES GRANT ALL ON TABLES TO bob", "ALTER DEFAULT PRIVILEGES"),
    ("CREATE ROLE x SUPERUSER", "CREATE ROLE"),
    ("CREATE USER x PASSWORD 'p'", "CREATE ROLE"),
    ("ALTER ROLE bob SUPERUSER", "ALTER ROLE"),
    ("ALTER USER bob SET search_path = evil", "ALTER ROLE ... SET"),
    ("ALTER TABLE t OWNER TO bob", "OWNER TO"),
    ("ALTER FUNCTION f() OWNER TO bob", "OWNER TO"),
    ("REASSIGN OWNED BY a TO b", "REASSIGN OWNED"),
    ("CREATE POLICY p ON t USING (true)", "CREATE POLICY"),
    ("SET ROLE admin", "SET role"),
    ("SET SESSION AUTHORIZATION admin", "SET session_authorization"),
    ("SET session_replication_role = replica", "SET session_replication_role"),
    ("SET LOCAL session_replication_role TO replica", "SET session_replication_role"),
    ("CREATE FUNCTION f() RETURNS int SECURITY DEFINER LANGUAGE sql AS 'SELECT 1'",
     "SECURITY DEFINER"),
    ("ALTER FUNCTION f() SECURITY DEFINER", "SECURITY DEFINER"),
    # what the gate cannot judge
    ("DO $$ BEGIN DELETE FROM t; END $$", "DO block"),
    ("do language plpgsql $x$ begin null; end $x$", "DO block"),
    ("CALL cleanup()", "CALL"),
    ("EXECUTE stmt", "EXECUTE"),
    ("COPY t TO PROGRAM 'rm -rf /'", "COPY t TO PROGRAM"),
    ("COPY t FROM PROGRAM 'curl x'", "COPY t FROM PROGRAM"),
    ("COPY t TO '/tmp/out'", "server file"),
    ("COPY t FROM '/etc/passwd'", "server file"),
    ("CREATE OR REPLACE FUNCTION f() RETURNS int LANGUAGE sql AS 'SELECT 1'",
     "CREATE OR REPLACE FUNCTION f"),
    ("CREATE OR REPLACE PROCEDURE p() LANGUAGE sql AS 'SELECT 1'",
     "CREATE OR REPLACE PROCEDURE p"),
    ("CREATE OR REPLACE TRIGGER trg AFTER INSERT ON t EXECUTE FUNCTION f()",
     "CREATE OR REPLACE TRIGGER"),
    ("CREATE OR REPLACE RULE r AS ON SELECT TO v DO INSTEAD SELECT 1", "CREATE RULE"),
    ("CREATE EVENT TRIGGER e ON ddl_command_start EXECUTE FUNCTION f()", "EVENT TRIGGER"),
    ("VACUUM FULL t", "VACUUM FULL"),
    ("VACUUM (FULL, ANALYZE) t", "VACUUM FULL"),
    ("REINDEX TABLE t", "REINDEX"),
    ("CLUSTER t USING i", "CLUSTER"),
    ("LOCK TABLE t IN ACCESS EXCLUSIVE MODE", "LOCK"),
    ("CHECKPOINT", "CHECKPOINT"),
    ("LOAD 'evil.so'", "LOAD"),
    ("ALTER SYSTEM SET fsync = off", "ALTER SYSTEM"),
    ("ALTER DATABASE d SET default_transaction_read_only = on", "ALTER DATABASE"),
    ("CREATE SUBSCRIPTION s CONNECTION 'x' PUBLICATION p", "CREATE SUBSCRIPTION"),
    ("PREPARE TRANSACTION 'x'", "two-phase"),
    ("COMMIT PREPARED 'x'", "two-phase"),
    ("CREATE LANGUAGE plperlu", "CREATE EXTENSION plperlu"),
    ("CREATE EXTENSION dblink", "CREATE EXTENSION dblink"),
    ("SELECT pg_terminate_backend(pid) FROM pg_stat_activity", "pg_terminate_backend"),
    ("SELECT PG_CATALOG.PG_TERMINATE_BACKEND(1)", "pg_terminate_backend"),
    ('SELECT "pg_cancel_backend"(1)', "pg_cancel_backend"),
    ("SELECT set_config('role', 'admin', false)", "set_config"),
    ("SELECT * FROM dblink_exec('dbname=x', 'DROP TABLE t')", "dblink_exec"),
    ("SELECT query_to_xml('DELETE FROM t RETURNING 1', true, true, '')", "query_to_xml"),
    ("SELECT lo_unlink(1)", "lo_unlink"),
    ("SELECT pg_read_file('/etc/passwd')", "pg_read_file"),
    ("EXPLAIN SELECT pg_reload_conf()", "pg_reload_conf"),  # the planner may fold it
    ("SELECT 1 WHERE EXISTS (SELECT pg_terminate_backend(1))", "pg_terminate_backend"),
    # function bodies: SQL parsed again, PL/pgSQL read statement by statement
    ("CREATE FUNCTION f() RETURNS void LANGUAGE sql AS 'DELETE FROM users'",
     "in function f: DELETE FROM users (no WHERE)"),
    ("CREATE FUNCTION f() RETURNS void LANGUAGE sql AS $b$ SELECT 1; TRUNCATE t $b$",
     "in function f: TRUNCATE t"),
    ("CREATE FUNCTION f() RETURNS void LANGUAGE sql BEGIN ATOMIC DELETE FROM users; END",
     "in function f: DELETE FROM users (no WHERE)"),
    ("CREATE PROCEDURE p() LANGUAGE plpgsql AS $$ BEGIN DROP TABLE t; END $$",
     "in procedure p: DROP TABLE t"),
    ("CREATE FUNCTION f() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
     "IF true THEN DELETE FROM audit; END IF; RETURN NEW; END $$",
     "in function f: DELETE FROM audit (no WHERE)"),
    ("CREATE FUNCTION f() RETURNS void LANGUAGE plpgsql AS $$ BEGIN "
     "PERFORM pg_terminate_backend(1); END $$", "pg_terminate_backend"),
    ("CREATE FUNCTION f() RETURNS void LANGUAGE plpgsql AS $$ DECLARE n int; BEGIN "
     "n := (WITH d AS (DELETE FROM t RETURNING 1) SELECT count(*) FROM d); END $$",
     "in function f: DELETE FROM t (no WHERE)"),
    ("CREATE FUNCTION f() RETURNS void LANGUAGE plpgsql AS $$ DECLARE a int[]; BEGIN "
     "a[(WITH d AS (DELETE FROM t RETURNING 1) SELECT 1)] := 1; END $$",
     "in function f: DELETE FROM t (no WHERE)"),
    ("CREATE FUNCTION f() RETURNS void LANGUAGE plpgsql AS $$ BEGIN "
     "EXECUTE 'DROP ' || 'TABLE t'; END $$", "dynamic SQL"),
    ("CREATE FUNCTION f() RETURNS SETOF int LANGUAGE plpgsql AS $$ BEGIN "
     "RETURN QUERY EXECUTE 'SELECT 1'; END $$", "dynamic SQL"),
    ("CREATE FUNCTION f() RETURNS void LANGUAGE plpgsql AS $$ DECLARE r record; BEGIN "
     "FOR r IN EXECUTE 'SELECT 1' LOOP END LOOP; END $$", "dynamic SQL"),
    ("CREATE FUNCTION f() RETURNS void LANGUAGE plpgsql AS $$ BEGIN CALL p(); END $$",
     "CALL"),
    ("CREATE FUNCTION f() RETURNS int LANGUAGE plpython3u AS 'return 1'",
     "LANGUAGE plpython3u (the gate cannot read its body)"),
    ("CREATE FUNCTION f() RETURNS int LANGUAGE c AS 'lib', 'sym'", "LANGUAGE c"),
    # a function created and called in the same plan: its body is what runs
    ("CREATE FUNCTION wipe() RETURNS void LANGUAGE sql AS 'DELETE FROM users';"
     " SELECT wipe()", "in function wipe: DELETE FROM users (no WHERE)"),
    # the second red team's chains
    (RED_INDEX, f"CREATE FUNCTION g ({CODE})"),
    (RED_INDEX, f"CREATE FUNCTION f ({CODE})"),
    (RED_INDEX, f"CREATE INDEX ON t: calls f() {STORED}"),
    (RED_CASCADE, "ALTER TABLE orders: REFERENCES fk_anchor ON DELETE CASCADE (makes later "
                  "deletes reach other tables: a human judges)"),
    (RED_IN, f"the plan touches up to 700 rows already there (DELETE FROM orders 700), {MANY}"),
    ("DELETE FROM orders WHERE flag IN (true,false)", f"DELETE FROM orders (WHERE {BOOLEANS})"),
    ("; ".join(f"DELETE FROM orders WHERE id = {i}" for i in range(1, 31)),
     "touches up to 30 rows already there (DELETE FROM orders 30)"),
    ("INSERT INTO orders (id, item) VALUES "
     + ", ".join(f"({i}, 'x')" for i in range(1, 101))
     + " ON CONFLICT (id) DO UPDATE SET item = excluded.item",
     "touches up to 100 rows already there (INSERT INTO orders 100)"),
    # code that stays behind and runs later, maybe as another role: every kind of it
    ("CREATE FUNCTION f(a int) RETURNS int LANGUAGE sql AS 'SELECT a + 1'",
     f"CREATE FUNCTION f ({CODE})"),
    ("create function F() returns int immutable language sql return 1", "CREATE FUNCTION f"),
    ("CREATE FUNCTION f() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
     "NEW.updated := now(); RETURN NEW; END $$", f"CREATE FUNCTION f ({CODE})"),
    ("CREATE PROCEDURE p() LANGUAGE sql AS 'SELECT 1'", f"CREATE PROCEDURE p ({CODE})"),
    ("CREATE OR REPLACE FUNCTION lower(text) RETURNS text LANGUAGE sql AS 'SELECT $1'",
     f"CREATE OR REPLACE FUNCTION lower ({CODE})"),
    ("CREATE FUNCTION f() RETURNS void LANGUAGE sql AS "
     "'INSERT INTO t VALUES (1, 0) ON CONFLICT (id) DO UPDATE SET x = 0'", "CREATE FUNCTION f"),
    ("CREATE TRIGGER trg BEFORE UPDATE ON t FOR EACH ROW EXECUTE FUNCTION f()",
     f"CREATE TRIGGER trg ON t ({CODE})"),
    ("CREATE CONSTRAINT TRIGGER c AFTER INSERT ON t FOR EACH ROW EXECUTE FUNCTION f()",
     "CREATE TRIGGER c ON t"),
    ("CREATE VIEW v AS SELECT * FROM t", f"CREATE VIEW v ({CODE})"),
    ("CREATE OR REPLACE VIEW v AS SELECT * FROM t", f"CREATE VIEW v ({CODE})"),
    ("CREATE RECURSIVE VIEW v (n) AS SELECT 1", "CREATE VIEW v"),
    ("CREATE MATERIALIZED VIEW mv AS SELECT * FROM t", f"CREATE MATERIALIZED VIEW mv ({CODE})"),
    ("CREATE SCHEMA s CREATE TABLE a (x int) CREATE VIEW v AS SELECT 1",
     f"CREATE SCHEMA s ({CODE})"),
    ("CREATE SCHEMA AUTHORIZATION bob", f"CREATE SCHEMA ({CODE})"),
    ("CREATE TYPE big (INPUT = big_in, OUTPUT = big_out)", "CREATE TYPE big (a base type"),
    ("CREATE TYPE r AS RANGE (subtype = int, subtype_diff = my_diff)",
     f"CREATE TYPE r AS RANGE with subtype_diff ({CODE})"),
    ("CREATE DOMAIN posint AS int CHECK (VALUE > 0)", f"CREATE DOMAIN posint with CHECK ({CODE})"),
    ("ALTER DOMAIN d ADD CONSTRAINT c CHECK (VALUE > 0)", f"ALTER DOMAIN d ADD CHECK ({CODE})"),
    ("CREATE DOMAIN d AS text DEFAULT my_default()", f"CREATE DOMAIN d: calls my_default() "
                                                     f"{STORED}"),
    ("CREATE AGGREGATE s(int) (SFUNC = int4pl, STYPE = int)", f"CREATE AGGREGATE s ({CODE})"),
    ("CREATE OPERATOR === (LEFTARG = int, RIGHTARG = int, FUNCTION = int4eq)",
     "CREATE OPERATOR \"===\""),
    ("CREATE CAST (text AS int) WITHOUT FUNCTION", f"CREATE CAST ({CODE})"),
    ("CREATE POLICY p ON t USING (f(owner))", "CREATE POLICY"),
    ("CREATE EVENT TRIGGER e ON ddl_command_end EXECUTE FUNCTION f()", "EVENT TRIGGER"),
    ("CREATE TRUSTED LANGUAGE plx HANDLER plx_call", "CREATE LANGUAGE"),
    ("CREATE EXTENSION IF NOT EXISTS pgcrypto", f"CREATE EXTENSION pgcrypto ({CODE})"),
    ("CREATE EXTENSION hstore SCHEMA public", "CREATE EXTENSION hstore"),
    ("ALTER EXTENSION hstore UPDATE TO '9.9'", f"ALTER EXTENSION hstore ({CODE})"),
    ("CREATE CONVERSION c FOR 'LATIN1' TO 'UTF8' FROM my_conv", f"CREATE CONVERSION c ({CODE})"),
    ("CREATE TEXT SEARCH PARSER p (START = s, GETTOKEN = g, END = e, LEXTYPES = l)",
     f"CREATE TEXT SEARCH PARSER p ({CODE})"),
    ("CREATE TEXT SEARCH DICTIONARY d (TEMPLATE = simple)", "CREATE TEXT SEARCH DICTIONARY d"),
    ("CREATE TEXT SEARCH TEMPLATE tt (LEXIZE = lx)", "CREATE TEXT SEARCH TEMPLATE tt"),
    ("CREATE TEXT SEARCH CONFIGURATION c (PARSER = p)", "CREATE TEXT SEARCH CONFIGURATION c"),
    ("CREATE FOREIGN DATA WRAPPER w HANDLER h", f"CREATE FOREIGN DATA WRAPPER w ({CODE})"),
    ("ALTER FOREIGN DATA WRAPPER w VALIDATOR v", "ALTER FOREIGN DATA WRAPPER w"),
    ("CREATE SERVER s FOREIGN DATA WRAPPER postgres_fdw", "CREATE SERVER s (reaches beyond"),
    ("CREATE FOREIGN TABLE ft (a int) SERVER s", "CREATE FOREIGN TABLE ft (reaches beyond"),
    ("IMPORT FOREIGN SCHEMA remote FROM SERVER s INTO public", "IMPORT FOREIGN SCHEMA remote"),
    ("CREATE PUBLICATION p FOR ALL TABLES", "CREATE PUBLICATION p (reaches beyond"),
    ("ALTER PUBLICATION p ADD TABLE t", "ALTER PUBLICATION p ADD (reaches beyond"),
    ("CREATE SUBSCRIPTION s CONNECTION 'x' PUBLICATION p", "CREATE SUBSCRIPTION"),
    ("CREATE OPERATOR CLASS c FOR TYPE int USING btree AS OPERATOR 1 <, "
     "FUNCTION 1 my_cmp(int, int)",
     f"CREATE OPERATOR CLASS c ({CODE})"),
    ("CREATE OPERATOR FAMILY fam USING btree", "CREATE OPERATOR FAMILY fam"),
    ("ALTER OPERATOR FAMILY fam USING btree ADD FUNCTION 1 my_cmp(int, int)",
     f"ALTER OPERATOR FAMILY fam ADD ({CODE})"),
    ("CREATE ACCESS METHOD am TYPE INDEX HANDLER h", "CREATE ACCESS METHOD am"),
    ("CREATE TRANSFORM FOR int LANGUAGE plpgsql (FROM SQL WITH FUNCTION f(internal))",
     "CREATE TRANSFORM"),
    ("ALTER OPERATOR === (int, int) SET (RESTRICT = my_sel)", f"ALTER OPERATOR \"===\" ({CODE})"),
    ("ALTER TYPE big SET (RECEIVE = big_recv)", f"ALTER TYPE big ({CODE})"),
    ("ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT EXECUTE ON FUNCTIONS TO PUBLIC",
     "ALTER DEFAULT PRIVILEGES"),
    ("ALTER TABLE t OWNER TO owner", "OWNER TO"),
    ("ALTER FUNCTION f() OWNER TO owner", "ALTER ... OWNER TO"),
    ("ALTER SCHEMA s OWNER TO owner", "ALTER ... OWNER TO"),
    ("ALTER VIEW v OWNER TO owner", "OWNER TO"),
    # function calls and operators in stored expressions: run later, as whoever
    ("CREATE INDEX ON t ((f(col)))", f"CREATE INDEX ON t: calls f() {STORED}"),
    ("CREATE INDEX i ON t (a) WHERE is_live(a)", f"CREATE INDEX ON t: calls is_live() {STORED}"),
    ("CREATE INDEX ON t USING btree ((public.lower(a)))", "calls public.lower()"),
    ("CREATE INDEX ON t ((abs(a)))", "calls abs()"),
    ("CREATE UNIQUE INDEX CONCURRENTLY ON t (a) WHERE a OPERATOR(public.=) 1",
     f"CREATE INDEX ON t: operator public.\"=\" {STORED}"),
    ("CREATE INDEX ON t ((a ~ 'x'))", "operator \"~\""),
    ("CREATE INDEX ON t ((a SIMILAR TO 'x'))", "CREATE INDEX ON t:"),
    ("CREATE TABLE t (a int DEFAULT f())", f"CREATE TABLE t: calls f() {STORED}"),
    ("CREATE TABLE t (a int DEFAULT nextval('s'))", "calls nextval()"),
    ("CREATE TABLE t (a int CHECK (f(a)))", f"CREATE TABLE t: calls f() {STORED}"),
    ("CREATE TABLE t (a int, CONSTRAINT c CHECK (a > g(1)))", "calls g()"),
    ("CREATE TABLE t (a int, b int GENERATED ALWAYS AS (f(a)) STORED)", "calls f()"),
    ("CREATE TABLE t (a text, b text GENERATED ALWAYS AS (a || 'x') STORED)", "operator \"||\""),
    ("CREATE TABLE t (a int) PARTITION BY RANGE (f(a))", "calls f()"),
    ("CREATE TABLE t (a int, EXCLUDE USING gist (a WITH &&))", "EXCLUDE with operator &&"),
    ("CREATE TABLE t (a int DEFAULT \"LOWER\"('x'))", "calls \"LOWER\"()"),
    ("CREATE TABLE t (a text DEFAULT pg_catalog.set_config('x', 'y', false))", "set_config"),
    ("CREATE TEMP TABLE t (a int DEFAULT f())", "calls f()"),
    ("CREATE TABLE t AS SELECT 1 AS a; ALTER TABLE t ALTER COLUMN a SET DEFAULT f()",
     f"ALTER TABLE t: calls f() {STORED}"),
    ("ALTER TABLE t ALTER COLUMN a SET EXPRESSION AS (f(b))", "ALTER TABLE t: calls f()"),
    ("ALTER TABLE t ADD COLUMN a int DEFAULT f()", "ALTER TABLE t: calls f()"),
    ("ALTER TABLE t ADD COLUMN a int GENERATED ALWAYS AS (f(b)) STORED", "calls f()"),
    ("ALTER TABLE t ADD CONSTRAINT c CHECK (f(a))", "ALTER TABLE t: calls f()"),
    ("ALTER TABLE t ADD CONSTRAINT c CHECK (a OPERATOR(evil.<) 5)", "operator evil.\"<\""),
    ("ALTER TABLE t ADD CONSTRAINT c EXCLUDE USING gist (a WITH <->)", "EXCLUDE with operator"),
    ("ALTER VIEW v ALTER COLUMN a SET DEFAULT f()", "calls f()"),
    ("CREATE STATISTICS s ON (f(a)) FROM t", "calls f()"),
    ("CREATE TABLE p1 PARTITION OF p FOR VALUES IN (f())", "calls f()"),
    # foreign keys whose actions reach the referencing table later
    ("CREATE TABLE c (id int, p int REFERENCES p(id) ON DELETE CASCADE)",
     f"CREATE TABLE c: REFERENCES p ON DELETE CASCADE (makes later deletes {CASCADES}"),
    ("CREATE TABLE c (p int, FOREIGN KEY (p) REFERENCES p ON UPDATE CASCADE)",
     f"REFERENCES p ON UPDATE CASCADE (makes later updates {CASCADES}"),
    ("CREATE TABLE c (p int REFERENCES p ON DELETE SET NULL ON UPDATE SET DEFAULT)",
     f"ON DELETE SET NULL ON UPDATE SET DEFAULT (makes later deletes and updates {CASCADES}"),
    ("CREATE TABLE c (p int, q int, FOREIGN KEY (p, q) REFERENCES p ON DELETE SET NULL (q))",
     "ON DELETE SET NULL"),
    ("ALTER TABLE c ADD CONSTRAINT fk FOREIGN KEY (p) REFERENCES p (id) ON DELETE CASCADE "
     "NOT VALID", "ALTER TABLE c: REFERENCES p ON DELETE CASCADE"),
    ("ALTER TABLE c ADD COLUMN p int REFERENCES p ON DELETE SET DEFAULT",
     "ON DELETE SET DEFAULT"),
    ("CREATE TABLE c (p int REFERENCES s.p ON DELETE CASCADE DEFERRABLE)", "REFERENCES s.p"),
    # row bounds: booleans pin nothing, and pinned statements add up
    ("DELETE FROM t WHERE flag = true", f"(WHERE {BOOLEANS})"),
    ("DELETE FROM t WHERE flag = false AND x > 0", BOOLEANS),
    ("DELETE FROM t WHERE flag IN ('t', 'f')", BOOLEANS),
    ("DELETE FROM t WHERE flag IN ('yes', 'no')", BOOLEANS),
    ("DELETE FROM t WHERE flag = ' ON '", BOOLEANS),
    ("DELETE FROM t WHERE flag = 'of'", BOOLEANS),
    ("DELETE FROM t WHERE flag = '1'", BOOLEANS),
    ("DELETE FROM t WHERE flag = 'T'::boolean", BOOLEANS),
    ("DELETE FROM t WHERE flag = CAST(1 AS bool)", BOOLEANS),
    ("DELETE FROM t WHERE flag = 'x'::public.mybool", BOOLEANS),
    ("DELETE FROM t WHERE flag = 'x'::mydomain", BOOLEANS),
    ("DELETE FROM t WHERE id IN (1, 2, true)", BOOLEANS),
    ("UPDATE t SET x = 0 WHERE flag = $1", BOOLEANS),
    ("UPDATE t SET x = 0 WHERE id IN ($1, $2)", BOOLEANS),
    ("MERGE INTO t USING (VALUES (true), (false)) v(f) ON t.flag = v.f WHEN MATCHED THEN DELETE",
     f"MERGE INTO t ... DELETE (ON {BOOLEANS})"),
    ("PREPARE p AS DELETE FROM t WHERE flag = $1; EXECUTE p(true); EXECUTE p(false)",
     "EXECUTE p with a value that may be a boolean (it pins no rows: a human judges)"),
    ("PREPARE p AS DELETE FROM t WHERE id = $1; EXECUTE p('yes')", "may be a boolean"),
    ("PREPARE p AS DELETE FROM t WHERE id = $1; EXECUTE p((SELECT max(id) FROM t))",
     "may be a boolean"),
    (f"DELETE FROM t WHERE id IN ({keys(1, MAX_PINNED_ROWS + 1)})",
     f"touches up to {MAX_PINNED_ROWS + 1} rows already there"),
    (f"UPDATE t SET x = 0 WHERE id IN ({keys(1, 15)}); "
     f"DELETE FROM t WHERE id IN ({keys(16, 25)})",
     f"touches up to 25 rows already there (UPDATE t 15, DELETE FROM t 10), {MANY}"),
    (f"DELETE FROM a WHERE id IN ({keys(1, 11)}); DELETE FROM b WHERE id IN ({keys(1, 11)})",
     "touches up to 22 rows already there (DELETE FROM a 11, DELETE FROM b 11)"),
    ("PREPARE p (int) AS DELETE FROM t WHERE id = $1; "
     + "; ".join(f"EXECUTE p({i})" for i in range(1, 23)), "touches up to 22 rows"),
    (f"WITH d AS (DELETE FROM t WHERE id IN ({keys(1, 30)}) RETURNING 1) SELECT count(*) FROM d",
     "touches up to 30 rows"),
    (f"EXPLAIN ANALYZE DELETE FROM t WHERE id IN ({keys(1, 30)})", "touches up to 30 rows"),
    (f"MERGE INTO t USING (VALUES {', '.join(f'({i})' for i in range(1, 31))}) v(id) "
     "ON t.id = v.id WHEN MATCHED THEN UPDATE SET x = 0", "touches up to 30 rows"),
    (f"INSERT INTO t VALUES {', '.join(f'({i}, 0)' for i in range(1, 31))} "
     "ON CONFLICT (id) DO UPDATE SET x = 0",
     "touches up to 30 rows already there (INSERT INTO t 30)"),
]


@pytest.mark.parametrize("text, signal", FIRES, ids=[q[:60] for q, _ in FIRES])
def test_destructive_signal_fires(text: str, signal: str) -> None:
    reading = sql(text)
    assert any(signal in s for s in reading.signals), reading.signals
    assert reading.writes  # a signal always counts as writing


CONTROLS = [
    "DELETE FROM orders WHERE id = 42",
    # pinned by equality to constants: at most the rows with those values
    "DELETE FROM orders WHERE id = 5",
    "UPDATE orders SET qty = 1 WHERE id IN (1,2) AND qty > 0",
    "DELETE FROM t WHERE 5 = id",
    "DELETE FROM t WHERE t.id = -5",
    "DELETE FROM ONLY public.t WHERE t.id = 5",
    "DELETE FROM t o WHERE o.id = 5",
    "DELETE FROM t WHERE id = '5'::int::bigint",
    "DELETE FROM t WHERE id = CAST('5' AS int)",
    "DELETE FROM t WHERE item = 'gone' AND x > 3",
    "DELETE FROM t WHERE (id = 5 AND x > 0) AND (x < 10 OR true)",
    "DELETE FROM t WHERE x > 0 AND id IN (1, 2, 3)",
    "DELETE FROM t WHERE id OPERATOR(pg_catalog.=) 5",
    "DELETE FROM t WHERE id = NULL",
    "DELETE FROM t USING u WHERE t.id = 5 AND u.id = t.id",
    "UPDATE t SET x = u.x FROM u WHERE t.id IN (1, 2) AND u.id = t.id",
    "WITH d AS (DELETE FROM t WHERE id = 1 RETURNING *) SELECT * FROM d",
    "EXPLAIN ANALYZE UPDATE t SET x = 0 WHERE id = 7",
    # INSERT ... ON CONFLICT DO UPDATE of a VALUES list: at most that many rows
    "INSERT INTO orders VALUES (1, 'a', 2) ON CONFLICT (id) DO UPDATE SET qty = excluded.qty",
    "INSERT INTO t VALUES (1, DEFAULT), (2, NULL) ON CONFLICT (id) DO UPDATE SET x = 0 "
    "WHERE random() < 2",
    "INSERT INTO t VALUES ('1'::int, $1) ON CONFLICT (id) DO UPDATE SET x = excluded.x",
    "INSERT INTO t SELECT * FROM u ON CONFLICT DO NOTHING",
    # MERGE of a VALUES source whose ON pins the target
    "MERGE INTO t USING (VALUES (1, 2), (3, 4)) v(id, x) ON t.id = v.id WHEN MATCHED THEN "
    "UPDATE SET x = v.x WHEN NOT MATCHED THEN INSERT VALUES (v.id, v.x)",
    "MERGE INTO t USING (VALUES (1)) v(id) ON t.id = 1 WHEN MATCHED THEN DELETE",
    "MERGE INTO t o USING (VALUES (1)) v(id) ON v.id = o.id AND o.x > 0 "
    "WHEN MATCHED AND o.x < 9 THEN UPDATE SET x = 0",
    "MERGE INTO t USING s ON t.id = s.id WHEN NOT MATCHED THEN INSERT VALUES (s.id, s.x)",
    "MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN DO NOTHING",
    "SET search_path TO pg_catalog, public",
    "DELETE FROM t WHERE id = 5 AND true",
    "MERGE INTO t USING s ON true WHEN NOT MATCHED THEN INSERT VALUES (1)",
    "CREATE TABLE users (id bigint PRIMARY KEY, email text NOT NULL)",
    "CREATE TABLE IF NOT EXISTS t (a int); CREATE INDEX ON t (a)",
    "ALTER TABLE t ADD COLUMN created timestamptz DEFAULT now()",
    "ALTER TABLE t ALTER COLUMN a SET DEFAULT 0",
    "ALTER TABLE t ALTER COLUMN a SET NOT NULL",
    "ALTER TABLE t ADD CONSTRAINT c CHECK (a > 0)",
    "ALTER TABLE t ENABLE ROW LEVEL SECURITY",
    "INSERT INTO t VALUES (1), (2)",
    "CREATE SEQUENCE s; SELECT nextval('s')",
    "COMMENT ON TABLE t IS 'DROP TABLE t'",
    "SELECT 'DROP TABLE users; DELETE FROM orders'",
    "SELECT $$DROP TABLE users$$",
    "-- DROP TABLE users\nSELECT 1",
    "/* DELETE FROM t */ SELECT 1",
    "EXPLAIN DELETE FROM t",
    "PREPARE p (int) AS DELETE FROM t WHERE id = $1; EXECUTE p(3)",
    "EXPLAIN (ANALYZE false) DELETE FROM t",
    "EXPLAIN (ANALYZE off, COSTS) UPDATE t SET a = 1",
    "VACUUM t",
    "ANALYZE t",
    "SET statement_timeout = '5s'",
    "SET search_path TO app, public",
    "RESET ROLE",
    "BEGIN; INSERT INTO t VALUES (1); COMMIT",
    "REFRESH MATERIALIZED VIEW mv",
    "NOTIFY ch, 'x'",
    "SELECT * FROM users WHERE true",
    "UPDATE orders SET paid = true WHERE id = $1::int",
    "PREPARE p AS DELETE FROM t WHERE id = $1; EXECUTE p(5)",
    # plainly harmless DDL: tables, plain columns and keys, indexes on columns
    "CREATE TABLE t (id serial PRIMARY KEY, name text NOT NULL, made timestamptz DEFAULT now())",
    "CREATE TABLE t (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, e text UNIQUE)",
    "CREATE TABLE t (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), "
    "at timestamptz NOT NULL DEFAULT CURRENT_TIMESTAMP, who text DEFAULT current_user)",
    "CREATE TABLE t (e text, l text GENERATED ALWAYS AS (lower(e)) STORED, "
    "n int GENERATED ALWAYS AS (length(e) * 2 + 1) STORED)",
    "CREATE TABLE t (a int DEFAULT pg_catalog.upper('x')::int CHECK (a BETWEEN 0 AND 9))",
    "CREATE TABLE t (a int CHECK (a > 0 AND a <> 5 OR a IS NULL), b text CHECK (b LIKE 'x%'))",
    "CREATE TABLE t (a int DEFAULT COALESCE(NULL, 1), b int DEFAULT GREATEST(1, 2))",
    "CREATE TABLE t (a int CHECK (CASE WHEN a > 0 THEN true ELSE false END))",
    "CREATE TABLE t (a int CHECK (a = ANY (ARRAY[1, 2])), b int CHECK (b IN (1, 2)))",
    "CREATE INDEX ON t (a)",
    "CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS i ON t USING btree (a, b DESC) "
    "INCLUDE (c) WHERE a > 0",
    "CREATE INDEX ON t ((lower(email)))",
    "CREATE INDEX ON t ((a + b)) WHERE deleted_at IS NULL",
    "ALTER TABLE t ADD COLUMN note text NULL",
    "ALTER TABLE t ADD COLUMN n int NOT NULL DEFAULT 1",
    "ALTER TABLE t ADD COLUMN IF NOT EXISTS at timestamptz DEFAULT now()",
    "ALTER TABLE t ALTER COLUMN a SET EXPRESSION AS (b + 1)",
    "ALTER TABLE t ADD CONSTRAINT u UNIQUE (a)",
    "ALTER TABLE t ADD PRIMARY KEY (id)",
    # foreign keys that do nothing to other tables later (no action, restrict)
    "CREATE TABLE c (id int, p int REFERENCES p(id))",
    "CREATE TABLE c (p int REFERENCES p ON DELETE RESTRICT ON UPDATE NO ACTION)",
    "ALTER TABLE c ADD CONSTRAINT fk FOREIGN KEY (p) REFERENCES p (id) ON DELETE NO ACTION",
    "ALTER TABLE c ADD COLUMN p int REFERENCES p ON DELETE RESTRICT",
    # types without code: enums, composites, shells, ranges over built-ins
    "CREATE TYPE mood AS ENUM ('sad', 'ok')",
    "CREATE TYPE pair AS (a int, b text)",
    "CREATE TYPE shell",
    "CREATE TYPE r AS RANGE (subtype = int4)",
    "CREATE DOMAIN d AS int NOT NULL DEFAULT 1",
    "CREATE COLLATION c (provider = icu, locale = 'und')",
    # rows pinned, at most MAX_PINNED_ROWS of them in the whole plan
    "DELETE FROM orders WHERE id IN (1,2)",
    f"DELETE FROM t WHERE id IN ({keys(1, MAX_PINNED_ROWS)})",
    "; ".join(f"DELETE FROM t WHERE id = {i}" for i in range(1, MAX_PINNED_ROWS + 1)),
    f"UPDATE t SET x = 0 WHERE id IN ({keys(1, 10)}); DELETE FROM u WHERE id IN ({keys(1, 10)})",
    "DELETE FROM t WHERE flag = true AND id = 3",
    "DELETE FROM t WHERE id = '5'",
    "DELETE FROM t WHERE id = 5::int",
    "DELETE FROM t WHERE id IN (1.5, B'1', NULL)",
    f"INSERT INTO t VALUES {', '.join(f'({i}, 0)' for i in range(1, 21))} "
    "ON CONFLICT (id) DO UPDATE SET x = 0",
    "PREPARE p (int) AS DELETE FROM t WHERE id = $1; "
    + "; ".join(f"EXECUTE p({i})" for i in range(1, 21)),
    f"EXPLAIN DELETE FROM t WHERE id IN ({keys(1, 700)})",
    "INSERT INTO t SELECT g FROM generate_series(1, 700) g",
]


@pytest.mark.parametrize("text", CONTROLS, ids=[q[:60] for q in CONTROLS])
def test_control_does_not_fire(text: str) -> None:
    assert sql(text).signals == ()


READ_ONLY = [
    "SELECT * FROM orders WHERE id = 1",
    "select count(*) from orders; select 1",
    "WITH x AS (SELECT 1) SELECT * FROM x",
    "VALUES (1), (2)",
    "SHOW search_path",
    "EXPLAIN SELECT * FROM t",
    "EXPLAIN ANALYZE SELECT * FROM t",
    "EXPLAIN DELETE FROM t",
    "BEGIN READ ONLY; SELECT 1; COMMIT",
    "SET statement_timeout = 1000; SELECT 1",
    "TABLE orders",
    "SELECT 1 UNION ALL SELECT 2",
    "DECLARE c CURSOR FOR SELECT 1; FETCH c; CLOSE c",
    "-- nothing at all",
    "",
]
WRITING = [
    "INSERT INTO t VALUES (1)",
    "UPDATE t SET a = 1 WHERE id = 2",
    "SELECT 1; UPDATE t SET a = 1 WHERE id = 2",
    "WITH d AS (DELETE FROM t WHERE id = 1 RETURNING *) SELECT * FROM d",
    "WITH u AS (INSERT INTO t VALUES (1) RETURNING 1) SELECT 1",
    "SELECT * INTO copy FROM t",
    "SELECT * FROM t FOR UPDATE",
    "SELECT * FROM t FOR SHARE SKIP LOCKED",
    "SELECT nextval('s')",
    "SELECT setval('s', 1)",
    "SELECT pg_advisory_lock(1)",
    "EXPLAIN ANALYZE INSERT INTO t VALUES (1)",
    "CREATE TEMP TABLE x (a int)",
    "CREATE TABLE x AS SELECT 1",
    "COPY t FROM STDIN",
    "VACUUM t",
    "NOTIFY ch",
    "SELECT pg_terminate_backend(1)",
]


@pytest.mark.parametrize("text", READ_ONLY, ids=[q[:60] or "empty" for q in READ_ONLY])
def test_read_only_plan_does_not_write(text: str) -> None:
    reading = sql(text)
    assert not reading.writes, reading
    assert reading.signals == ()


@pytest.mark.parametrize("text", WRITING, ids=[q[:60] for q in WRITING])
def test_plan_that_writes(text: str) -> None:
    assert sql(text).writes


@pytest.mark.parametrize("text, fragment", [
    ("DELETE FROM", "cannot parse"),
    ("SELECT * FROM t WHERE", "cannot parse"),
    ("DROP TABLE t; this is not sql", "cannot parse"),
    ("SELECT '", "cannot parse"),
    ("SELECT 1 /* unterminated", "cannot parse"),
    ("CREATE FUNCTION f() RETURNS void LANGUAGE sql AS 'DELETE FROM'", "cannot parse"),
    ("CREATE FUNCTION f() RETURNS void LANGUAGE plpgsql AS $$ BEGIN x := 1; END $$",
     "PL/pgSQL"),
    ("SELECT " + "(" * 100_000 + "1" + ")" * 100_000, ""),
])
def test_sql_that_cannot_be_read(text: str, fragment: str) -> None:
    reading = sql_plan.read(text)
    assert reading.unreadable is not None and fragment in reading.unreadable
    assert reading.writes


def test_sql_names_are_escaped_for_the_approver() -> None:
    reading = sql('DROP TABLE "evil\x1b[2Jname\u202e"')
    (signal,) = reading.signals
    assert "\x1b" not in signal and "\u202e" not in signal
    assert "\\x1b" in signal and "\\u202e" in signal


def test_long_names_are_cut() -> None:
    name = "a" * 5000
    (signal,) = sql(f"COPY t TO '/tmp/{name}'").signals
    assert len(signal) < 200
    (signal,) = kube_plan.read(ops(("delete", obj("ConfigMap", name)))).signals
    assert len(signal) < 200 and " ... " in signal


def test_unknown_statement_kinds_are_signals(monkeypatch: pytest.MonkeyPatch) -> None:
    """A statement type the reader has no rule for (a newer server's) is not
    waved through: proved by taking a known one out of the tables."""
    monkeypatch.setattr(sql_plan, "WRITES", sql_plan.WRITES - {"CreateStmt"})
    (signal,) = sql("CREATE TABLE t (a int)").signals
    assert "does not know" in signal


def test_without_pglast_every_sql_plan_escalates(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m == "pglast" or m.startswith("pglast.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "pglast", None)  # what an absent package raises
    reading = sql_plan.read("SELECT 1")
    assert reading.unreadable is not None and "pglast" in reading.unreadable
    verdict = gate.judge(action("read"), {"plan": "SELECT 1"})
    assert verdict.escalate and "cannot be read" in verdict.reasons[0]


def test_sql_statement_count_matches_the_parser() -> None:
    reading = sql("SELECT 1; INSERT INTO t VALUES (1);; CREATE TABLE x (a int)")
    assert reading.changes == ("SELECT", "INSERT INTO t", "CREATE TABLE x")


# ------------------------------------------- the SQL truths, on a real server

# (statement, whether the gate stops it, which of t's ten rows it changes on a
# real server: the ids for every plan the gate lets through, a count otherwise)
ROWS: list[tuple[str, bool, set[int] | int]] = [
    # signals that really change every row
    ("DELETE FROM t", True, 10),
    ("DELETE FROM t WHERE true", True, 10),
    ("DELETE FROM t WHERE 'yes'", True, 10),
    ("DELETE FROM t WHERE NOT false", True, 10),
    ("DELETE FROM t WHERE id = id", True, 10),
    ("DELETE FROM t WHERE x IS NULL OR x IS NOT NULL", True, 10),
    ("DELETE FROM t WHERE random() < 2", True, 10),
    ("DELETE FROM t WHERE EXISTS (SELECT 1)", True, 10),
    ("DELETE FROM t USING u WHERE u.flag", True, 10),
    ("DELETE FROM t x USING u WHERE u.id = 3", True, 10),
    ("DELETE FROM t WHERE id = 5 OR 1=1", True, 10),
    ("WITH d AS (DELETE FROM t RETURNING *) SELECT count(*) FROM d", True, 10),
    ("EXPLAIN ANALYZE DELETE FROM t", True, 10),
    ("EXPLAIN (ANALYZE 'on') DELETE FROM t", True, 10),
    ("PREPARE p AS DELETE FROM t; EXECUTE p", True, 10),
    ("UPDATE t SET x = -1", True, 10),
    ("UPDATE t SET x = -1 WHERE 1 = 1.0", True, 10),
    ("CREATE FUNCTION wipe() RETURNS void LANGUAGE sql AS 'DELETE FROM t'; SELECT wipe()",
     True, 10),
    ("CREATE FUNCTION wipe() RETURNS void LANGUAGE plpgsql AS $$ BEGIN DELETE FROM t; END $$;"
     " SELECT wipe()", True, 10),
    # the red team's plans, on t: each passed the old gate
    ("DELETE FROM t WHERE ctid IS NOT NULL", True, 10),
    ("INSERT INTO t SELECT * FROM t ON CONFLICT (id) DO UPDATE SET x = -1", True, 10),
    ("MERGE INTO t USING t s ON t.id = s.id WHEN MATCHED THEN UPDATE SET x = -1", True, 10),
    ("UPDATE t SET x = -1 WHERE id = id + 0", True, 10),
    ("DELETE FROM t WHERE id IN (SELECT id FROM t)", True, 10),
    ("DELETE FROM t WHERE tableoid > 0", True, 10),
    ("DELETE FROM t WHERE (id = id) = true", True, 10),
    ("DELETE FROM t WHERE t.* IS NOT NULL", True, 10),
    ("WITH d AS (DELETE FROM t WHERE id > 0 RETURNING *) SELECT count(*) FROM d", True, 10),
    # the same class
    ("DELETE FROM t WHERE id >= id", True, 10),
    ("DELETE FROM t WHERE COALESCE(id, 0) = COALESCE(id, 0)", True, 10),
    ("DELETE FROM t WHERE id = ANY(ARRAY(SELECT id FROM t))", True, 10),
    ("DELETE FROM t WHERE (id, x) = (id, x)", True, 10),
    ("DELETE FROM t WHERE NOT (id <> id)", True, 10),
    ("DELETE FROM t WHERE id = 5 OR true", True, 10),
    ("DELETE FROM t WHERE id BETWEEN -1e9 AND 1e9", True, 10),
    ("MERGE INTO t USING (VALUES (1)) v(id) ON true WHEN MATCHED THEN UPDATE SET x = -1",
     True, 10),
    # in a function's body a name may be a parameter: "k = 5" and "t.k = 5" below
    # are the parameter's, not a column's, and "id = $1" is per call
    ("CREATE FUNCTION f(k int) RETURNS void LANGUAGE sql AS 'DELETE FROM t WHERE k = 5';"
     " SELECT f(5)", True, 10),
    ("CREATE FUNCTION t(k int) RETURNS void LANGUAGE sql AS 'DELETE FROM t WHERE t.k = 5';"
     " SELECT t(5)", True, 10),
    ("CREATE FUNCTION f() RETURNS void LANGUAGE plpgsql AS $$ <<t>> DECLARE k int := 5; BEGIN"
     " DELETE FROM t WHERE t.k = 5; END $$; SELECT f()", True, 10),
    ("CREATE FUNCTION f(v int) RETURNS void LANGUAGE sql AS "
     "'UPDATE t SET x = -1 WHERE id = $1'; SELECT f(id) FROM t", True, 10),
    # signals that a human may well approve: the gate cannot tell
    ("UPDATE t SET x = -1 WHERE id > 5", True, 5),
    ("DELETE FROM t USING u WHERE t.id = u.id", True, 1),
    ("INSERT INTO t VALUES ((SELECT max(id) FROM t), -1) ON CONFLICT (id) DO UPDATE SET x = -1",
     True, 1),
    ("DELETE FROM t WHERE false", True, 0),
    ("DELETE FROM t WHERE id <> id", True, 0),
    # what the gate lets through: exactly the rows it pins, every other row intact
    ("DELETE FROM t WHERE id = 3", False, {3}),
    ("DELETE FROM t WHERE id = 5 AND true", False, {5}),
    ("DELETE FROM t WHERE 4 = id AND x > 0", False, {4}),
    ("UPDATE t SET x = -1 WHERE id IN (1, 2) AND x > 0", False, {1, 2}),
    ("DELETE FROM t o WHERE o.id = 6", False, {6}),
    ("DELETE FROM ONLY public.t WHERE t.id = 7", False, {7}),
    ("DELETE FROM t WHERE id = '8'::int::bigint", False, {8}),
    ("DELETE FROM t WHERE id = NULL", False, set()),
    ("DELETE FROM t WHERE (id = 9 AND x > 0) AND (x < 100 OR true)", False, {9}),
    ("DELETE FROM t USING u WHERE t.id = 3 AND u.id = t.id", False, {3}),
    ("UPDATE t SET x = -1 FROM u WHERE t.id IN (3, 4) AND u.flag", False, {3, 4}),
    ("WITH d AS (DELETE FROM t WHERE id = 1 RETURNING *) SELECT count(*) FROM d", False, {1}),
    ("PREPARE p AS DELETE FROM t WHERE id = $1; EXECUTE p(2)", False, {2}),
    ("PREPARE p (int) AS UPDATE t SET x = -1 WHERE id = $1; EXECUTE p(2); EXECUTE p(10)",
     False, {2, 10}),
    ("INSERT INTO t VALUES (3, -1), (11, 0) ON CONFLICT (id) DO UPDATE SET x = -1", False, {3}),
    ("INSERT INTO t VALUES (4, 0) ON CONFLICT (id) DO UPDATE SET x = -1 WHERE random() < 2",
     False, {4}),
    ("MERGE INTO t USING (VALUES (5, -1), (6, -1)) v(id, x) ON t.id = v.id "
     "WHEN MATCHED THEN UPDATE SET x = v.x", False, {5, 6}),
    ("MERGE INTO t USING (VALUES (1)) v(id) ON t.id = 8 WHEN MATCHED THEN DELETE", False, {8}),
    ("MERGE INTO t o USING (VALUES (2)) v(id) ON v.id = o.id AND o.x > 0 "
     "WHEN MATCHED THEN DELETE WHEN NOT MATCHED THEN INSERT VALUES (v.id, v.id)", False, {2}),
    ("EXPLAIN DELETE FROM t", False, set()),
    ("EXPLAIN (ANALYZE false) DELETE FROM t", False, set()),
    ("EXPLAIN (ANALYZE off) UPDATE t SET x = -1", False, set()),
    # a function is code that stays: a human judges it, whatever its body pins
    ("CREATE FUNCTION f() RETURNS void LANGUAGE sql AS "
     "'INSERT INTO t VALUES (9, -1) ON CONFLICT (id) DO UPDATE SET x = -1'; SELECT f() FROM t",
     True, 1),
    # the second red team: a foreign key that cascades, then a "pinned" delete
    ("CREATE TABLE fk_anchor (id int PRIMARY KEY); INSERT INTO fk_anchor VALUES (1); "
     "ALTER TABLE t ADD COLUMN anchor int NOT NULL DEFAULT 1 REFERENCES fk_anchor(id) "
     "ON DELETE CASCADE; DELETE FROM fk_anchor WHERE id = 1", True, 10),
    ("CREATE TABLE fk_anchor (id int PRIMARY KEY); INSERT INTO fk_anchor VALUES (1); "
     "ALTER TABLE t ADD COLUMN anchor int DEFAULT 1 REFERENCES fk_anchor(id) "
     "ON DELETE SET NULL; UPDATE t SET x = -1 WHERE anchor IS NULL; "
     "DELETE FROM fk_anchor WHERE id = 1; UPDATE t SET x = -1 WHERE anchor IS NULL", True, 10),
    ("CREATE TABLE fk_anchor (id int PRIMARY KEY); INSERT INTO fk_anchor VALUES (1); "
     "ALTER TABLE t ADD COLUMN anchor int NOT NULL DEFAULT 1, ADD CONSTRAINT a FOREIGN KEY "
     "(anchor) REFERENCES fk_anchor ON UPDATE CASCADE; "
     "UPDATE fk_anchor SET id = 2 WHERE id = 1; UPDATE t SET x = -1 WHERE anchor = 2", True, 10),
    # the second red team: pinned statements that name every key, or a boolean
    (f"DELETE FROM t WHERE id IN ({keys(1, 700)})", True, 10),
    ("ALTER TABLE t ADD COLUMN flag bool NOT NULL DEFAULT false; "
     "UPDATE t SET flag = true WHERE id IN (1, 2, 3); DELETE FROM t WHERE flag IN (true, false)",
     True, 10),
    ("ALTER TABLE t ADD COLUMN flag bool NOT NULL DEFAULT false; DELETE FROM t WHERE flag = 'no'",
     True, 10),
    ("ALTER TABLE t ADD COLUMN flag bool NOT NULL DEFAULT true; "
     "PREPARE p AS DELETE FROM t WHERE flag = $1; EXECUTE p(true)", True, 10),
    ("; ".join(f"DELETE FROM t WHERE id = {i}" for i in range(1, MAX_PINNED_ROWS + 2)), True, 10),
    (f"INSERT INTO t VALUES {', '.join(f'({i}, -1)' for i in range(1, MAX_PINNED_ROWS + 2))} "
     "ON CONFLICT (id) DO UPDATE SET x = -1", True, 10),
    ("PREPARE p (int) AS UPDATE t SET x = -1 WHERE id = $1; "
     + "; ".join(f"EXECUTE p({i % 10 + 1})" for i in range(MAX_PINNED_ROWS + 1)), True, 10),
    (f"MERGE INTO t USING (VALUES {', '.join(f'({i})' for i in range(1, 31))}) v(id) "
     "ON t.id = v.id WHEN MATCHED THEN DELETE", True, 10),
    (f"UPDATE t SET x = -1 WHERE id IN ({keys(1, 10)}); "
     f"UPDATE t SET x = -2 WHERE id IN ({keys(1, 11)})", True, 10),
    # let through: pinned, at most MAX_PINNED_ROWS in the whole plan, exactly those rows
    ("DELETE FROM t WHERE id IN (1, 2)", False, {1, 2}),
    (f"DELETE FROM t WHERE id IN ({keys(1, MAX_PINNED_ROWS)})", False, set(range(1, 11))),
    ("; ".join(f"DELETE FROM t WHERE id = {i}" for i in range(1, MAX_PINNED_ROWS + 1)),
     False, set(range(1, 11))),
    ("UPDATE t SET x = -1 WHERE id IN (1, 2, 3) AND x > 0; DELETE FROM t WHERE id = 9",
     False, {1, 2, 3, 9}),
    ("INSERT INTO t VALUES (1, -1), (2, -1) ON CONFLICT (id) DO UPDATE SET x = excluded.x",
     False, {1, 2}),
    ("PREPARE p AS DELETE FROM t WHERE id = $1; EXECUTE p(4); EXECUTE p(5)", False, {4, 5}),
    ("ALTER TABLE t ADD COLUMN flag bool NOT NULL DEFAULT true; "
     "DELETE FROM t WHERE flag = true AND id = 3", False, {3}),
    ("DELETE FROM t WHERE id = '6'", False, {6}),
    ("MERGE INTO t USING (VALUES (7), (8)) v(id) ON t.id = v.id WHEN MATCHED THEN DELETE",
     False, {7, 8}),
    # let through: DDL that stores no code and reaches no other table later
    ("CREATE TABLE n (id serial PRIMARY KEY, name text NOT NULL DEFAULT '', qty int DEFAULT 0 "
     "CHECK (qty >= 0 AND qty BETWEEN 0 AND 100), made timestamptz DEFAULT now(), "
     "tag uuid DEFAULT gen_random_uuid(), at timestamptz DEFAULT CURRENT_TIMESTAMP, "
     "t_id int REFERENCES t(id)); CREATE INDEX ON n (name, qty); INSERT INTO n (name) VALUES ('a')",
     False, set()),
    ("CREATE TABLE n (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, e text UNIQUE, "
     "l text GENERATED ALWAYS AS (lower(e)) STORED, k int GENERATED ALWAYS AS "
     "(length(e) * 2 + 1) STORED, CHECK (e LIKE '%@%')); INSERT INTO n (e) VALUES ('A@B')",
     False, set()),
    ("CREATE INDEX ON t (x); CREATE UNIQUE INDEX ON t ((x + id)) WHERE x > 3", False, set()),
    ("CREATE INDEX ON t ((lower(x::text))) WHERE x IS NOT NULL", False, set()),
    ("ALTER TABLE t ADD COLUMN note text NULL", False, set()),
    ("ALTER TABLE t ADD COLUMN made timestamptz NOT NULL DEFAULT CURRENT_TIMESTAMP, "
     "ADD COLUMN n int NOT NULL DEFAULT 1", False, set()),
    ("ALTER TABLE t ADD CONSTRAINT x_small CHECK (x > 0 AND x < 100)", False, set()),
    ("ALTER TABLE t ALTER COLUMN x SET DEFAULT 0", False, set()),
    ("CREATE TABLE a (id int PRIMARY KEY); INSERT INTO a VALUES (1); ALTER TABLE t ADD COLUMN "
     "a_id int REFERENCES a(id) ON DELETE RESTRICT ON UPDATE NO ACTION; "
     "UPDATE t SET a_id = 1 WHERE id = 1", False, set()),
    ("CREATE TABLE a (id int PRIMARY KEY); CREATE TABLE b (id int PRIMARY KEY, a_id int, "
     "FOREIGN KEY (a_id) REFERENCES a (id) ON DELETE NO ACTION)", False, set()),
    ("CREATE TYPE mood AS ENUM ('sad', 'ok'); CREATE TYPE pair AS (a int, b text); "
     "CREATE TYPE span AS RANGE (subtype = int4); CREATE DOMAIN posint AS int NOT NULL DEFAULT 1;"
     " CREATE TABLE m (m mood, p pair, s span, d posint)", False, set()),
    ("CREATE TABLE p (id int, made date) PARTITION BY RANGE (made); CREATE TABLE p1 PARTITION "
     "OF p FOR VALUES FROM ('2024-01-01') TO ('2025-01-01')", False, set()),
]

# code a plan leaves behind on the server, for other roles to run later: functions,
# triggers, views, rules, operators, casts, types with I/O functions, domains with
# CHECK, schemas, extensions and their kin, foreign keys whose actions reach other
# tables, and anything that depends on a function that is not the server's own
STORED_CODE = """WITH made AS (  -- what CREATE TYPE ... AS RANGE makes: the server's own code
  SELECT oid FROM pg_proc WHERE oid >= 16384 AND prosrc LIKE '%range_constructor%')
SELECT 'code=' || (
  (SELECT count(*) FROM pg_proc WHERE oid >= 16384 AND oid NOT IN (SELECT oid FROM made))
+ (SELECT count(*) FROM pg_trigger WHERE NOT tgisinternal)
+ (SELECT count(*) FROM pg_class WHERE relkind IN ('v', 'm') AND oid >= 16384)
+ (SELECT count(*) FROM pg_rewrite WHERE oid >= 16384 AND rulename <> '_RETURN')
+ (SELECT count(*) FROM pg_constraint WHERE contype = 'f'
     AND (confdeltype IN ('c', 'n', 'd') OR confupdtype IN ('c', 'n', 'd')))
+ (SELECT count(*) FROM pg_constraint WHERE contype = 'c' AND contypid <> 0 AND oid >= 16384)
+ (SELECT count(*) FROM pg_type WHERE oid >= 16384 AND typtype = 'b' AND typcategory <> 'A')
+ (SELECT count(*) FROM pg_namespace WHERE oid >= 16384 AND nspname NOT LIKE 'pg\\_%')
+ (SELECT count(*) FROM pg_depend WHERE refclassid = 'pg_proc'::regclass AND refobjid >= 16384
     AND refobjid NOT IN (SELECT oid FROM made))
+ (SELECT count(*) FROM pg_operator WHERE oid >= 16384)
+ (SELECT count(*) FROM pg_cast WHERE oid >= 16384 AND castfunc NOT IN (SELECT oid FROM made))
+ (SELECT count(*) FROM pg_opclass WHERE oid >= 16384)
+ (SELECT count(*) FROM pg_conversion WHERE oid >= 16384)
+ (SELECT count(*) FROM pg_ts_config WHERE oid >= 16384)
+ (SELECT count(*) FROM pg_ts_dict WHERE oid >= 16384)
+ (SELECT count(*) FROM pg_policy)
+ (SELECT count(*) FROM pg_extension WHERE oid >= 16384)
+ (SELECT count(*) FROM pg_foreign_data_wrapper)
+ (SELECT count(*) FROM pg_foreign_server)
+ (SELECT count(*) FROM pg_publication)
+ (SELECT count(*) FROM pg_default_acl))::text"""


@pytest.fixture(scope="module")
def postgres() -> Iterator[str]:
    """A throwaway PostgreSQL, as an unprivileged account (initdb refuses root),
    on a Unix socket only; yields the socket folder."""
    if not (PG_BIN / "initdb").exists() or shutil.which("psql") is None:
        pytest.skip("PostgreSQL 15 binaries are not installed")
    root = Path(tempfile.mkdtemp(prefix="gate-pg-"))
    os.chmod(root, 0o755)
    drop = [] if os.geteuid() != 0 else ["setpriv", "--reuid=nobody", "--regid=nogroup",
                                         "--clear-groups"]
    if drop:
        shutil.chown(root, "nobody", "nogroup")
    data = root / "data"
    subprocess.run([*drop, str(PG_BIN / "initdb"), "-D", str(data), "-A", "trust",
                    "-U", "postgres"], check=True, capture_output=True, timeout=60)
    try:
        # the server keeps what it inherits open: its output goes to a log, not a pipe
        subprocess.run([*drop, str(PG_BIN / "pg_ctl"), "-D", str(data), "-w", "-l",
                        str(root / "log"), "-o", f"-c listen_addresses='' -k {root}", "start"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=60)
        yield str(root)
    finally:
        subprocess.run([*drop, str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "immediate",
                        "stop"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=60)
        shutil.rmtree(root, ignore_errors=True)


def psql(socket: str, script: str) -> str:
    done = subprocess.run(["psql", "-h", socket, "-U", "postgres", "-X", "-q", "-A", "-t",
                           "-v", "ON_ERROR_STOP=1", "-f", "-"], input=script, text=True,
                          capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def run_on_t(socket: str, statement: str) -> tuple[set[int], int]:
    """Which of t's ten rows (id 1..10, x = id) ``statement`` deletes or
    changes, and how much code it leaves behind (``STORED_CODE``), in a
    transaction that is rolled back."""
    out = psql(socket, (
        "BEGIN;\n"
        "CREATE TABLE t (id int PRIMARY KEY, x int NOT NULL);\n"
        "INSERT INTO t SELECT g, g FROM generate_series(1, 10) g;\n"
        "CREATE TABLE u (id int, flag bool); INSERT INTO u VALUES (3, true);\n"
        f"{statement};\n"
        "SELECT 'changed=' || coalesce(string_agg(g::text, ',' ORDER BY g), '') FROM "
        "generate_series(1, 10) g WHERE NOT EXISTS (SELECT 1 FROM t WHERE id = g AND x = g);\n"
        f"{STORED_CODE};\n"
        "ROLLBACK;\n"))
    changed = [line for line in out.splitlines() if line.startswith("changed=")][-1]
    code = [line for line in out.splitlines() if line.startswith("code=")][-1]
    return ({int(i) for i in changed.removeprefix("changed=").split(",") if i},
            int(code.removeprefix("code=")))


def changed_rows(socket: str, statement: str) -> set[int]:
    return run_on_t(socket, statement)[0]


@pytest.mark.parametrize("statement, stops, changed", ROWS, ids=[q[:60] for q, _, _ in ROWS])
def test_what_the_gate_lets_through_leaves_other_rows_intact(
        postgres: str, statement: str, stops: bool, changed: set[int] | int) -> None:
    """The gate's verdict beside what PostgreSQL really does: every plan it lets
    through changes exactly the rows it pins and no other, and leaves no code
    behind."""
    reading = sql(statement)
    assert bool(reading.signals) is stops, reading.signals
    rows, code = run_on_t(postgres, statement)
    if stops:
        assert len(rows) == changed, rows
    else:
        assert rows == changed, rows
        assert code == 0, f"{code} pieces of code left behind"


# plans the gate stops as code that stays: on the server each really leaves some behind
CODE_ON_SERVER = [
    "CREATE FUNCTION f() RETURNS int LANGUAGE sql AS 'SELECT 1'",
    "CREATE VIEW v AS SELECT * FROM t",
    "CREATE MATERIALIZED VIEW mv AS SELECT * FROM t",
    "CREATE SCHEMA evil",
    "CREATE DOMAIN posint AS int CHECK (VALUE > 0)",
    "CREATE AGGREGATE s(int) (SFUNC = int4pl, STYPE = int)",
    "CREATE OPERATOR public.=== (LEFTARG = int, RIGHTARG = int, FUNCTION = int4eq)",
    "CREATE FUNCTION tf() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$; "
    "CREATE TRIGGER trg BEFORE UPDATE ON t FOR EACH ROW EXECUTE FUNCTION tf()",
    "CREATE RULE r AS ON INSERT TO u DO ALSO DELETE FROM t WHERE id = 1",
    "CREATE TABLE a (id int PRIMARY KEY); ALTER TABLE t ADD COLUMN a_id int "
    "REFERENCES a(id) ON DELETE CASCADE",
    "CREATE TABLE a (id int PRIMARY KEY); CREATE TABLE b (a_id int REFERENCES a "
    "ON UPDATE SET NULL)",
    "CREATE POLICY p ON t USING (x > 0)",
    "CREATE TEXT SEARCH DICTIONARY d (TEMPLATE = simple)",
    "ALTER DEFAULT PRIVILEGES GRANT SELECT ON TABLES TO PUBLIC",
    "CREATE FUNCTION k(int) RETURNS int LANGUAGE sql IMMUTABLE AS 'SELECT $1'; "
    "CREATE INDEX ON t ((k(x)))",
]


@pytest.mark.parametrize("statement", CODE_ON_SERVER, ids=[q[:60] for q in CODE_ON_SERVER])
def test_code_the_gate_stops_really_stays_on_the_server(postgres: str, statement: str) -> None:
    """The controls of the check above: what the gate calls code that stays is
    code the server keeps, so the check can fail."""
    assert sql(statement).signals
    assert run_on_t(postgres, statement)[1] > 0


def test_the_red_teams_index_runs_the_agents_code_as_the_tables_owner(postgres: str) -> None:
    """Chain 1 on a real server: a write credential's role creates a function
    and an index on it; when its objects go to the owner role (as at
    revocation), ANALYZE runs the function as that owner. The gate stops the
    plan at a human, and says why in the summary."""
    script = (
        "BEGIN;\n"
        "CREATE ROLE agent; CREATE ROLE owner; GRANT CREATE ON SCHEMA public TO agent;\n"
        "CREATE TABLE log (who text); GRANT INSERT ON log TO PUBLIC;\n"
        f"SET ROLE agent;\n{RED_INDEX};\nRESET ROLE;\n"
        "DELETE FROM log; REASSIGN OWNED BY agent TO owner; ANALYZE t;\n"
        "SELECT 'ran-as=' || string_agg(DISTINCT who, ',') FROM log;\n"
        "ROLLBACK;\n")
    assert "ran-as=owner" in psql(postgres, script).splitlines()
    verdict = gate.judge(action("write"), {"plan": RED_INDEX})
    assert verdict.escalate
    assert verdict.summary.startswith(
        "CREATE FUNCTION g, CREATE FUNCTION f, CREATE INDEX ON t: calls f() in a stored "
        f"expression ({CODE})")


# ---------------------------------------------------------------- Terraform

def tf_plan(name: str) -> str:
    return (DATA / name).read_text()


def test_terraform_plan_with_every_kind_of_change() -> None:
    reading = terraform_plan.read(tf_plan("tf-mixed.json"))
    assert reading.unreadable is None and reading.writes
    signals = "\n".join(reading.signals)
    assert "delete terraform_data.gone (no longer configured)" in signals
    assert "replace terraform_data.swap (delete first; cannot update; forced by " \
           "triggers_replace)" in signals
    assert "replace terraform_data.cbd (create first;" in signals
    assert "forget terraform_data.forget" in signals
    assert len(reading.signals) == 4  # the move, the no-ops and the output are not signals
    assert "move terraform_data.new_name (moved from terraform_data.old_name)" in reading.changes
    assert "output greeting: update" in reading.changes


def test_terraform_update_in_place_is_not_destructive() -> None:
    reading = terraform_plan.read(tf_plan("tf-update.json"))
    assert reading.signals == () and reading.writes
    assert reading.changes == ("create terraform_data.fresh", "update terraform_data.update",
                               "output extra: create")


def test_terraform_plan_without_changes_does_not_write() -> None:
    reading = terraform_plan.read(tf_plan("tf-noop.json"))
    assert reading == Reading(changes=("no changes",), signals=(), writes=False)
    empty = terraform_plan.read(minimal_plan())  # resource_changes: []
    assert empty == Reading(changes=("no changes",), signals=(), writes=False)


@pytest.mark.parametrize("doc", [
    {"format_version": "1.2", "planned_values": {"root_module": {}}},
    {"format_version": "1.2", "planned_values": {}, "output_changes": {}},
    {"format_version": "1.2", "planned_values": {}, "resource_drift": []},
    {"format_version": "1.2"},
    {"format_version": "1.2", "prior_state": {}, "configuration": {}},
])
def test_terraform_document_without_resource_changes_is_never_no_changes(
        doc: dict[str, Any]) -> None:
    """What a plan deletes is only ever said in resource_changes: a document
    without that list cannot be judged, and a write action's plan escalates."""
    reading = terraform_plan.read(json.dumps(doc))
    assert reading.unreadable is not None and "no resource_changes list" in reading.unreadable
    verdict = gate.judge(action("write", kind="terraform"), {"plan": json.dumps(doc)})
    assert verdict.escalate and "cannot be read" in verdict.reasons[0]


def test_terraform_destroy_plan() -> None:
    reading = terraform_plan.read(tf_plan("tf-destroy.json"))
    assert len(reading.signals) == 7 and all(s.startswith("delete ") for s in reading.signals)


def minimal_plan(*changes: dict[str, Any], **top: Any) -> str:
    return json.dumps({"format_version": "1.2", "planned_values": {},
                       "resource_changes": list(changes), **top})


def rc(address: str, actions: list[str], **extra: Any) -> dict[str, Any]:
    change = {"actions": actions, **extra.pop("change", {})}
    return {"address": address, "mode": "managed", "change": change, **extra}


@pytest.mark.parametrize("plan, signal", [
    (minimal_plan(rc("aws_db_instance.main", ["delete"])), "delete aws_db_instance.main"),
    (minimal_plan(rc("a.b", ["delete", "create"], action_reason="replace_because_tainted")),
     "replace a.b (delete first; tainted)"),
    (minimal_plan(rc("a.b", ["create", "delete"], change={"replace_paths": [["ami"], ["tags",
     "x"], ["disk", 0, "size"]]})), "forced by ami, tags.x, disk[0].size"),
    (minimal_plan(rc("a.b", ["update"], change={"replace_paths": [["ami"]]})), "forced by ami"),
    (minimal_plan(rc("a.b", ["create", "forget"])), "replace a.b (the old one left running"),
    (minimal_plan(rc("a.b", ["forget"])), "forget a.b"),
    (minimal_plan(rc("a.b", ["delete"], deposed="00000001")),
     "delete a.b (deposed object 00000001)"),
    (minimal_plan(rc("a.b", ["teleport"])), "actions the gate does not know"),
    (minimal_plan(rc("a.b", ["delete", "delete"])), "actions the gate does not know"),
    (minimal_plan(rc("a.b", ["Delete"])), "actions the gate does not know"),
    (minimal_plan(rc("a.b", ["create"], action_reason="some_new_reason"), rc("c.d", ["delete"],
     action_reason="delete_because_each_key")), "delete c.d (not in for_each)"),
    (minimal_plan(action_invocations=[{"address": "action.aws_lambda_invoke.x"}]),
     "provider action"),
    (minimal_plan(rc("a\x1b[31m.b", ["delete"])), "delete a\\x1b[31m.b"),
])
def test_terraform_signals(plan: str, signal: str) -> None:
    reading = terraform_plan.read(plan)
    assert reading.unreadable is None, reading.unreadable
    assert any(signal in s for s in reading.signals), reading.signals


@pytest.mark.parametrize("plan", [
    minimal_plan(rc("a.b", ["create"]), rc("c.d", ["update"]), rc("e.f", ["read"]),
                 rc("g.h", ["no-op"])),
    minimal_plan(rc("a.b", ["no-op"], previous_address="a.old")),
    minimal_plan(rc("a.b", ["no-op"], change={"importing": {"id": "i-1"}})),
    minimal_plan(rc("data.x.y", ["read"], action_reason="read_because_config_unknown")),
    minimal_plan(output_changes={"ip": {"actions": ["delete"]}}),
    minimal_plan(resource_drift=[rc("a.b", ["delete"])]),  # what happened, not what will
])
def test_terraform_controls(plan: str) -> None:
    reading = terraform_plan.read(plan)
    assert reading.unreadable is None and reading.signals == (), reading


@pytest.mark.parametrize("plan, fragment", [
    ("", "not JSON"),
    ("not json", "not JSON"),
    ("[1, 2]", "a plan is a JSON object"),
    ('{"format_version": "1.2"}', "not a plan"),
    ('{"format_version": "1.0", "values": {}}', "not a plan"),
    ('{"format_version": "2.0", "planned_values": {}}', "format_version 2.0"),
    ('{"planned_values": {}}', "format_version"),
    ('{"format_version": 1, "planned_values": {}}', "format_version"),
    (minimal_plan(errored=True), "errored"),
    (minimal_plan(rc("a.b", [])), "not a list of action names"),
    (minimal_plan(rc("a.b", "delete")), "not a list of action names"),  # type: ignore[arg-type]
    (minimal_plan({"change": {"actions": ["delete"]}}), "no address"),
    (minimal_plan(rc("a.b", ["create"], change={"replace_paths": "ami"})), "replace_paths"),
    ('{"format_version": "1.2", "planned_values": {}, "resource_changes": {}}', "not a list"),
    ('{"format_version": "1.2", "planned_values": {}, "resource_changes": [], '
     '"resource_changes": [{"address": "a.b", "change": {"actions": ["delete"]}}]}',
     "appears twice"),
    ('{"format_version": "1.2", "planned_values": {}, "x": NaN}', "NaN"),
    ("[" * 100_000, ""),
])
def test_terraform_unreadable(plan: str, fragment: str) -> None:
    reading = terraform_plan.read(plan)
    assert reading.unreadable is not None and fragment in reading.unreadable, reading


@pytest.mark.skipif(shutil.which("terraform") is None, reason="terraform is not installed")
def test_a_plan_from_the_real_terraform(tmp_path: Path) -> None:
    """The reader against what the installed terraform writes today (its built-in
    provider only: no registry, no network)."""
    env = {**os.environ, "CHECKPOINT_DISABLE": "1", "TF_IN_AUTOMATION": "1",
           "TF_CLI_CONFIG_FILE": "/dev/null"}

    def tf(*args: str) -> str:
        return subprocess.run(["terraform", *args, "-no-color"], cwd=tmp_path, env=env,
                              check=True, capture_output=True, text=True, timeout=120).stdout

    (tmp_path / "main.tf").write_text(
        'resource "terraform_data" "db" { input = "a" }\n'
        'resource "terraform_data" "app" { triggers_replace = ["1"] }\n')
    tf("init", "-input=false")
    tf("apply", "-input=false", "-auto-approve")
    (tmp_path / "main.tf").write_text(
        'resource "terraform_data" "app" { triggers_replace = ["2"] }\n')
    tf("plan", "-input=false", "-out=plan.out")
    reading = terraform_plan.read(tf("show", "-json", "plan.out"))
    assert reading.unreadable is None
    assert set(reading.signals) == {
        "delete terraform_data.db (no longer configured)",
        "replace terraform_data.app (delete first; cannot update; forced by triggers_replace)"}


# ---------------------------------------------------------------- Kubernetes

DEPLOY = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 3
  template: {metadata: {labels: {app: web}}, spec: {containers: [{name: web, image: nginx}]}}
"""


def ops(*entries: tuple[str, dict[str, Any]]) -> str:
    return json.dumps({"operations": [{"op": op, "object": obj} for op, obj in entries]})


def obj(kind: str, name: str = "x", namespace: str | None = "shop", api: str = "v1",
        **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": api, "kind": kind, "metadata": meta, **extra}


@pytest.mark.parametrize("plan, signal", [
    (ops(("delete", obj("ConfigMap", "settings"))), "delete ConfigMap shop/settings"),
    (ops(("delete", obj("Namespace", "shop", namespace=None))),
     "delete Namespace shop (and everything in it)"),
    (ops(("apply", obj("ConfigMap", "a")), ("delete", obj("Secret", "b"))),
     "delete Secret shop/b"),
    (ops(("replace", obj("Deployment", "web", api="apps/v1"))),
     "replace Deployment shop/web (fields not given are dropped)"),
    (ops(("delete", {"apiVersion": "v1", "kind": "List",
                     "items": [obj("Pod", "p1"), obj("Pod", "p2")]})), "delete Pod shop/p2"),
    ("apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\n"
     "metadata: {name: everyone-admin}\nroleRef: {kind: ClusterRole, name: cluster-admin}\n",
     "ClusterRoleBinding everyone-admin: changes access (RBAC)"),
    (DEPLOY + "---\n" + "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\n"
     "metadata: {name: r, namespace: shop}\n", "Role shop/r: changes access"),
    ("apiVersion: admissionregistration.k8s.io/v1\nkind: MutatingWebhookConfiguration\n"
     "metadata: {name: hook}\n", "admission"),
    ("apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n"
     "metadata: {name: widgets.example.com}\n", "changes an API"),
    ("apiVersion: v1\nkind: Secret\ntype: kubernetes.io/service-account-token\n"
     "metadata: {name: t, namespace: shop}\n", "mints a service account token"),
    ("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: open\n  labels:\n"
     "    pod-security.kubernetes.io/enforce: privileged\n", "lifts Pod Security"),
    (DEPLOY.replace("replicas: 3", "replicas: 0"), "Deployment shop/web: scales to zero"),
    ('{"apiVersion": "v1", "kind": "List", "items": [' + json.dumps(
        obj("ClusterRole", "x", namespace=None, api="rbac.authorization.k8s.io/v1")) + "]}",
     "ClusterRole x: changes access"),
    (ops(("create", obj("RoleBinding", api="rbac.authorization.k8s.io/v1"))), "RBAC"),
])
def test_kubernetes_signals(plan: str, signal: str) -> None:
    reading = kube_plan.read(plan)
    assert reading.unreadable is None, reading.unreadable
    assert any(signal in s for s in reading.signals), reading.signals
    assert reading.writes


def pod(spec: dict[str, Any], kind: str = "Pod", name: str = "p") -> str:
    """A ``kind`` whose pod spec is ``spec`` (a container ``c`` added), as JSON."""
    spec = {"containers": [{"name": "c", "image": "busybox"}], **spec}
    if kind == "Pod":
        return json.dumps(obj("Pod", name, spec=spec))
    template = {"metadata": {"labels": {"app": name}}, "spec": spec}
    if kind == "CronJob":
        body = {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": template}}}
        return json.dumps(obj("CronJob", name, api="batch/v1", spec=body))
    return json.dumps(obj(kind, name, api="apps/v1", spec={"template": template}))


def container(**security: Any) -> dict[str, Any]:
    return {"containers": [{"name": "c", "image": "busybox", "securityContext": security}]}


@pytest.mark.parametrize("plan, signal", [
    (pod(container(privileged=True)), "apply Pod shop/p: reaches the node (privileged container)"),
    (pod({"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}, "Deployment"),
     "apply Deployment shop/p: reaches the node (hostPath volume /)"),
    (pod({"hostNetwork": True}, "DaemonSet"), "reaches the node (hostNetwork)"),
    (pod({"hostPID": True}, "CronJob"), "CronJob shop/p: reaches the node (hostPID)"),
    (pod({"hostIPC": True}, "StatefulSet"), "reaches the node (hostIPC)"),
    (pod(container(capabilities={"add": ["SYS_ADMIN", "NET_BIND_SERVICE"]})),
     "reaches the node (adds capabilities SYS_ADMIN)"),
    (pod(container(capabilities={"add": ["CAP_SYS_PTRACE"]})), "adds capabilities SYS_PTRACE"),
    (pod(container(allowPrivilegeEscalation=True)), "allowPrivilegeEscalation"),
    (pod({"securityContext": {"runAsUser": 0}}), "runs as root (runAsUser 0)"),
    (pod({"initContainers": [{"name": "i", "image": "b", "securityContext": {
        "privileged": True}}]}), "privileged container"),
    (pod({"containers": [{"name": "c", "image": "b", "ports": [{"containerPort": 80,
                                                                 "hostPort": 80}]}]}),
     "hostPort 80"),
    (pod(container(seccompProfile={"type": "Unconfined"})), "seccomp Unconfined"),
    (pod(container(procMount="Unmasked")), "procMount Unmasked"),
    (pod({"securityContext": {"windowsOptions": {"hostProcess": True}}}), "Windows hostProcess"),
    (pod({"HostNetwork": True}), "hostNetwork"),  # a key in another case is still read
    (pod({"hostNetwork": "true"}), "hostNetwork"),  # not a boolean: not taken as false
    (json.dumps(obj("PersistentVolume", "pv", namespace=None, spec={
        "capacity": {"storage": "1Gi"}, "hostPath": {"path": "/var/lib"}})),
     "PersistentVolume pv: reaches the node (hostPath volume /var/lib)"),
    (ops(("create", json.loads(pod({"hostPID": True, "hostNetwork": True}, "Pod")))),
     "create Pod shop/p: reaches the node (hostPID, hostNetwork)"),
    ('{"apiVersion": "v1", "kind": "List", "items": [' + pod({"hostIPC": True}) + "]}",
     "apply Pod shop/p: reaches the node (hostIPC)"),
    (json.dumps(obj("Widget", "w", api="example.com/v1", spec={"podTemplate": {
        "spec": container(privileged=True)}})), "Widget shop/w: reaches the node"),
    (pod({"hostNetwork": True, "hostPID": True, "hostIPC": True,
          "volumes": [{"name": "v", "hostPath": {"path": "/"}}],
          "securityContext": {"runAsUser": 0}}), "+1 more)"),
])
def test_kubernetes_objects_that_reach_the_node(plan: str, signal: str) -> None:
    reading = kube_plan.read(plan)
    assert reading.unreadable is None, reading.unreadable
    assert any(signal in s for s in reading.signals), reading.signals
    verdict = gate.judge(action("write", kind="kubernetes"), {"plan": plan})
    assert verdict.escalate


@pytest.mark.parametrize("plan", [
    pod(container(privileged=False, allowPrivilegeEscalation=False, runAsNonRoot=True,
                  runAsUser=1000, capabilities={"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]},
                  seccompProfile={"type": "RuntimeDefault"}, procMount="Default")),
    pod({"hostNetwork": False, "hostPID": False, "hostIPC": False,
         "volumes": [{"name": "tmp", "emptyDir": {}}], "securityContext": {"runAsUser": 1000}},
        "Deployment"),
    pod({"containers": [{"name": "c", "image": "b", "ports": [{"containerPort": 80}]}]}),
    json.dumps(obj("ConfigMap", "flags", data={"privileged": "true", "hostNetwork": "true",
                                                "runAsUser": "0"})),
    json.dumps(obj("Secret", "s", stringData={"hostPath": "/"})),
    json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "p", "labels": {"privileged": "true"}, "annotations": {"hostPID": "true"}},
        "spec": container(privileged=False)}),
])
def test_kubernetes_pods_that_stay_in_their_box(plan: str) -> None:
    reading = kube_plan.read(plan)
    assert reading.unreadable is None and reading.signals == (), reading


def test_deleting_a_privileged_pod_is_a_delete_not_a_reach() -> None:
    reading = kube_plan.read(ops(("delete", json.loads(pod(container(privileged=True))))))
    assert reading.signals == ("delete Pod shop/p",)


@pytest.mark.parametrize("plan", [
    DEPLOY,
    DEPLOY + "\n---\n" + DEPLOY.replace("name: web", "name: api"),
    "apiVersion: v1\nkind: Namespace\nmetadata: {name: shop, labels: "
    "{pod-security.kubernetes.io/enforce: restricted}}\n",
    ops(("apply", obj("ConfigMap")), ("create", obj("Service", "svc"))),
    ops(("create", {"apiVersion": "batch/v1", "kind": "Job",
                    "metadata": {"generateName": "migrate-", "namespace": "shop"}})),
    "apiVersion: v1\nkind: List\nitems:\n- " + json.dumps(obj("ConfigMap")) + "\n",
    "# only a comment\n---\n",
    json.dumps(obj("ConfigMap")),
])
def test_kubernetes_controls(plan: str) -> None:
    reading = kube_plan.read(plan)
    assert reading.unreadable is None and reading.signals == (), reading


def test_kubernetes_names_are_escaped() -> None:
    reading = kube_plan.read(ops(("delete", obj("ConfigMap", "a\x1b[2Jb\u202e"))))
    (signal,) = reading.signals
    assert "\x1b" not in signal and "\\x1b" in signal and "\\u202e" in signal


@pytest.mark.parametrize("plan, fragment", [
    ("a: [", "not YAML"),
    ("- just\n- a list\n", "is not an object"),
    ("just text", "is not an object"),
    ("apiVersion: v1\nmetadata: {name: x}\n", "without apiVersion or kind"),
    ("apiVersion: v1\nkind: ConfigMap\n", "without metadata"),
    ("apiVersion: v1\nkind: ConfigMap\nmetadata: {namespace: a}\n", "without metadata.name"),
    ("apiVersion: v1\nkind: ConfigMap\nmetadata: {generateName: a-}\n", "metadata.name"),
    ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x, namespace: [a]}\n", "namespace"),
    ("base: &b {apiVersion: v1}\nother: *b\n", "anchor"),
    ("kind: ConfigMap\nkind: Namespace\napiVersion: v1\nmetadata: {name: x}\n", "twice"),
    ('{"apiVersion": "v1", "kind": "ConfigMap", "kind": "Namespace", "metadata": {}}', "twice"),
    ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: !!python/object:os.system x}\n",
     "not YAML"),
    (ops(("patch", obj("ConfigMap"))), "not one of"),
    ('{"operations": [{"op": "delete"}]}', "not {op, object}"),
    ('{"operations": [{"op": "delete", "object": {}, "force": true}]}', "not {op, object}"),
    ('{"operations": {}}', "nothing else"),
    ('{"operations": [], "extra": 1}', "nothing else"),
    (ops(("apply", obj("ConfigMap"))) + "\n---\n" + DEPLOY, "not JSON"),
    (DEPLOY + "---\n" + "operations: []\n", "stands alone"),
    ("apiVersion: v1\nkind: List\nitems: {a: 1}\n", "items is not a list"),
])
def test_kubernetes_unreadable(plan: str, fragment: str) -> None:
    reading = kube_plan.read(plan)
    assert reading.unreadable is not None and fragment in reading.unreadable, reading


# ---------------------------------------------------------------- the gate

@pytest.mark.parametrize("tier, plan, escalate", [
    ("read", "SELECT * FROM orders", False),
    ("read", "EXPLAIN ANALYZE SELECT 1", False),
    ("read", "INSERT INTO orders VALUES (1)", True),
    ("read", "WITH d AS (DELETE FROM t WHERE id = 1 RETURNING 1) SELECT 1", True),
    ("read", "SELECT pg_terminate_backend(1)", True),
    ("read", "SELEC 1", True),  # not SQL: unreadable
    ("write", "CREATE TABLE t (a int); INSERT INTO t VALUES (1)", False),
    ("write", "DELETE FROM orders WHERE id = 3", False),
    ("write", "UPDATE orders SET qty = 1 WHERE id IN (1, 2) AND qty > 0", False),
    ("write", "INSERT INTO orders VALUES (1, 'a', 2) ON CONFLICT (id) DO UPDATE SET qty = 2",
     False),
    ("write", "DELETE FROM orders WHERE ctid IS NOT NULL", True),
    ("write", "INSERT INTO orders SELECT * FROM orders ON CONFLICT (id) DO UPDATE SET qty = 0",
     True),
    ("write", "DELETE FROM orders", True),
    ("write", "ALTER TABLE t DROP COLUMN a", True),
    ("write", "CREATE TABLE t (id serial PRIMARY KEY, a text); CREATE INDEX ON t (a)", False),
    ("write", "ALTER TABLE t ADD COLUMN b text NULL", False),
    ("write", "ALTER TABLE c ADD COLUMN p int REFERENCES p ON DELETE RESTRICT", False),
    ("write", "DELETE FROM orders WHERE id IN (1, 2)", False),
    ("write", RED_INDEX, True),
    ("write", RED_CASCADE, True),
    ("write", RED_IN, True),
    ("write", "CREATE FUNCTION f() RETURNS int LANGUAGE sql AS 'SELECT 1'", True),
    ("write", "CREATE INDEX ON t ((f(a)))", True),
    ("read", "CREATE VIEW v AS SELECT 1", True),
    ("write", "DROP", True),
    ("destructive", "SELECT 1", True),
    ("destructive", "DROP TABLE t", True),
])
def test_tier_and_plan_make_the_verdict(tier: str, plan: str, escalate: bool) -> None:
    verdict = gate.judge(action(tier), {"plan": plan})
    assert verdict.escalate is escalate, verdict
    assert verdict.plan_digest == hashlib.sha256(plan.encode()).hexdigest()
    assert verdict.summary and (verdict.reasons or not escalate)


def test_reasons_say_why() -> None:
    read = gate.judge(action("read"), {"plan": "UPDATE t SET a = 1 WHERE id = 1"})
    assert read.reasons == ["a read action's plan changes data"]
    write = gate.judge(action("write"), {"plan": "DROP TABLE users; DELETE FROM orders"})
    assert write.reasons == ["destructive: DROP TABLE users",
                             "destructive: DELETE FROM orders (no WHERE)"]
    assert write.summary == "DROP TABLE users · DELETE FROM orders (no WHERE)"
    destructive = gate.judge(action("destructive"), {"plan": "DROP TABLE users"})
    assert destructive.reasons[0].startswith("the action is destructive")
    assert destructive.summary == "DROP TABLE users"
    unreadable = gate.judge(action("write"), {"plan": "DROP TABLE"})
    assert unreadable.reasons[0].startswith("the plan cannot be read: PostgreSQL cannot parse")


@pytest.mark.parametrize("plan, summary", [
    ("UPDATE orders SET item = 'gone' WHERE id = id + 0",
     "UPDATE orders (WHERE does not pin rows by equality: a human judges)"),
    ("DELETE FROM orders WHERE ctid IS NOT NULL",
     "DELETE FROM orders (WHERE does not pin rows by equality: a human judges)"),
    ("INSERT INTO orders SELECT * FROM orders ON CONFLICT (id) DO UPDATE SET qty = 0",
     "INSERT INTO orders ON CONFLICT DO UPDATE (its rows are not a VALUES list of "
     "constants: a human judges)"),
    ("MERGE INTO orders USING orders s ON orders.id = s.id WHEN MATCHED THEN UPDATE SET qty = 0",
     "MERGE INTO orders ... UPDATE (its source is not a VALUES list of constants: "
     "a human judges)"),
])
def test_rows_the_gate_cannot_count_wait_for_a_human(plan: str, summary: str) -> None:
    verdict = gate.judge(action("write"), {"plan": plan})
    assert verdict.escalate and verdict.summary == summary
    assert verdict.reasons == [f"destructive: {summary}"]


@pytest.mark.parametrize("plan, summary", [
    (RED_CASCADE + "; DELETE FROM fk_anchor WHERE id = 1",
     "ALTER TABLE orders: REFERENCES fk_anchor ON DELETE CASCADE (makes later deletes reach "
     "other tables: a human judges) · DELETE FROM fk_anchor (at most 1 row by id)"),
    (RED_IN, f"the plan touches up to 700 rows already there (DELETE FROM orders 700), {MANY} · "
             "DELETE FROM orders (at most 700 rows by id)"),
    ("DELETE FROM orders WHERE flag IN (true,false)", f"DELETE FROM orders (WHERE {BOOLEANS})"),
    ("UPDATE orders SET qty = 0 WHERE id = 1; UPDATE orders SET qty = 0 WHERE id IN "
     f"({keys(2, 21)})", f"the plan touches up to 21 rows already there (UPDATE orders 21), "
     f"{MANY} · UPDATE orders (at most 1 row by id) · UPDATE orders (at most 20 rows by id)"),
])
def test_the_second_red_teams_plans_wait_for_a_human(plan: str, summary: str) -> None:
    verdict = gate.judge(action("write"), {"plan": plan})
    assert verdict.escalate and verdict.summary == summary, verdict


@pytest.mark.parametrize("plan, summary", [
    ("DELETE FROM orders WHERE id IN (1, 2)", "DELETE FROM orders (at most 2 rows by id)"),
    ("UPDATE orders SET qty = 1 WHERE id = 3 AND sku IN ('a', 'b', 'c')",
     "UPDATE orders (at most 1 row by id)"),
    ("DELETE FROM orders o WHERE o.sku IN ('a', 'b') AND o.id IN (1, 2, 3)",
     "DELETE FROM orders (at most 2 rows by sku)"),
    ("INSERT INTO orders VALUES (1, 'a'), (2, 'b') ON CONFLICT (id) DO UPDATE SET sku = 'x'",
     "INSERT INTO orders (at most 2 rows by id)"),
    ("INSERT INTO orders VALUES (1, 'a') ON CONFLICT DO NOTHING", "INSERT INTO orders"),
    ("MERGE INTO orders USING (VALUES (1), (2)) v(id) ON orders.id = v.id WHEN MATCHED THEN "
     "DELETE", "MERGE INTO orders (at most 2 rows by id)"),
    ("WITH d AS (DELETE FROM orders WHERE id = 4 RETURNING *) SELECT * FROM d",
     "SELECT · DELETE FROM orders (at most 1 row by id)"),
    ("PREPARE p (int) AS DELETE FROM orders WHERE id = $1; EXECUTE p(1)",
     "PREPARE · DELETE FROM orders (at most 1 row by id, at each EXECUTE) · "
     "EXECUTE p (at most 1 row)"),
])
def test_pinned_statements_show_how_many_rows_they_touch(plan: str, summary: str) -> None:
    verdict = gate.judge(action("write"), {"plan": plan})
    assert not verdict.escalate and verdict.summary == summary, verdict


def test_signals_with_one_reason_are_said_together() -> None:
    verdict = gate.judge(action("write"), {"plan": "CREATE VIEW a AS SELECT 1; "
                                                   "CREATE VIEW b AS SELECT 2; DROP TABLE c"})
    assert verdict.summary == f"CREATE VIEW a, CREATE VIEW b ({CODE}) · DROP TABLE c"
    assert verdict.reasons == [f"destructive: CREATE VIEW a ({CODE})",
                               f"destructive: CREATE VIEW b ({CODE})",
                               "destructive: DROP TABLE c"]


def test_write_plan_is_shown_even_when_it_runs_at_once() -> None:
    verdict = gate.judge(action("write"), {"plan": "CREATE TABLE t (a int); SELECT 1"})
    assert not verdict.escalate and verdict.reasons == []
    assert verdict.summary == "CREATE TABLE t · SELECT"


@pytest.mark.parametrize("tier, escalate", [("read", False), ("write", False),
                                            ("destructive", True)])
def test_action_without_a_plan(tier: str, escalate: bool) -> None:
    verdict = gate.judge(action(tier, kind=None), {"plan": "DROP TABLE t"})
    assert verdict.escalate is escalate and verdict.plan_digest is None


def test_a_plan_given_as_json_is_judged_as_its_compact_json() -> None:
    plan = json.loads(tf_plan("tf-mixed.json"))
    verdict = gate.judge(action("write", kind="terraform", param_type="object"),
                         {"plan": plan})
    assert verdict.escalate and any("delete terraform_data.gone" in r for r in verdict.reasons)
    compact = json.dumps(plan, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    assert verdict.plan_digest == hashlib.sha256(compact.encode()).hexdigest()


def test_kinds_route_to_their_readers() -> None:
    tf = gate.judge(action("write", kind="terraform"), {"plan": tf_plan("tf-update.json")})
    assert not tf.escalate and tf.summary.startswith("create terraform_data.fresh")
    kube = gate.judge(action("write", kind="kubernetes"), {"plan": DEPLOY})
    assert not kube.escalate and kube.summary == "apply Deployment shop/web"
    gone = gate.judge(action("write", kind="kubernetes"),
                      {"plan": ops(("delete", obj("Deployment", "web", api="apps/v1")))})
    assert gone.escalate and gone.summary == "delete Deployment shop/web"


def test_one_plan_never_stands_for_another() -> None:
    a = gate.judge(action("destructive"), {"plan": "DROP TABLE a"})
    b = gate.judge(action("destructive"), {"plan": "DROP TABLE a "})
    assert a.plan_digest != b.plan_digest


def test_summary_is_bounded_and_counts_what_it_leaves_off() -> None:
    plan = "; ".join(f"DROP TABLE table_number_{i}" for i in range(200))
    verdict = gate.judge(action("write"), {"plan": plan})
    assert len(verdict.summary) <= gate.SUMMARY_KEEP
    assert verdict.summary.endswith(" more)") and "DROP TABLE table_number_0" in verdict.summary
    assert len(verdict.reasons) == gate.REASONS_KEEP + 1
    assert verdict.reasons[-1] == "and 192 more destructive changes"


def test_plans_too_long_or_with_nul_are_not_read() -> None:
    long = gate.judge(action("write"), {"plan": "SELECT 1;" * 200_000})
    assert long.escalate and "longer than" in long.reasons[0]
    nul = gate.judge(action("write"), {"plan": "SELECT 1;\x00 DROP TABLE t"})
    assert nul.escalate and "NUL" in nul.reasons[0]


def test_the_gate_fails_closed_on_its_own_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(text: str) -> Reading:
        raise KeyError("boom")

    monkeypatch.setattr(sql_plan, "read", broken)
    verdict = gate.judge(action("read"), {"plan": "SELECT 1"})
    assert verdict.escalate and "could not judge" in verdict.reasons[0]
    assert verdict.plan_digest == hashlib.sha256(b"SELECT 1").hexdigest()


def test_verdict_is_frozen() -> None:
    verdict = gate.judge(action("read"), {"plan": "SELECT 1"})
    with pytest.raises(AttributeError):
        verdict.escalate = True  # type: ignore[misc]


# ---------------------------------------------------------------- properties

PROPERTY = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def _shown_safely(verdict: gate.Verdict) -> None:
    for text in [verdict.summary, *verdict.reasons]:
        assert text.isprintable(), text
        assert len(text) <= 2000


@PROPERTY
@given(text=st.text(max_size=300), tier=st.sampled_from(["read", "write", "destructive"]),
       kind=st.sampled_from(["sql", "terraform", "kubernetes"]))
def test_the_gate_never_raises_on_any_text(text: str, tier: str, kind: str) -> None:
    verdict = gate.judge(action(tier, kind=kind), {"plan": text})
    assert isinstance(verdict.escalate, bool)
    assert verdict.plan_digest == hashlib.sha256(
        text.encode("utf-8", "surrogatepass")).hexdigest()
    _shown_safely(verdict)
    if tier == "destructive":
        assert verdict.escalate


SQL_WORDS = ["SELECT", "DELETE", "FROM", "WHERE", "DROP", "TABLE", "t", "1", "=", ";", "(",
             ")", "WITH", "AS", "RETURNING", "*", "true", "'x'", "$$", "--", "\n", "EXPLAIN",
             "ANALYZE", "UPDATE", "SET", "a", "INSERT", "INTO", "VALUES", "NOT", "OR", ","]


@PROPERTY
@given(words=st.lists(st.sampled_from(SQL_WORDS), max_size=25))
def test_sql_reader_never_raises_on_sql_like_text(words: list[str]) -> None:
    reading = sql_plan.read(" ".join(words))
    assert reading.unreadable is not None or isinstance(reading.writes, bool)
    if reading.signals or reading.unreadable:
        assert reading.writes


# a name PostgreSQL takes unquoted: never one of its keywords that cannot stand as a
# column or table name (``do``, ``select``, ``between``, ...)
_NOT_NAMES = (pg_keywords.RESERVED_KEYWORDS | pg_keywords.COL_NAME_KEYWORDS
              | pg_keywords.TYPE_FUNC_NAME_KEYWORDS)
IDENT = st.from_regex(r"[a-z_][a-z0-9_]{0,20}", fullmatch=True).filter(
    lambda name: name not in _NOT_NAMES)


@PROPERTY
@given(table=IDENT, column=IDENT.filter(lambda c: c not in SYSTEM_COLUMNS),
       value=st.integers(-10**6, 10**6),
       case=st.sampled_from([str.upper, str.lower, str.title]),
       comment=st.sampled_from(["", "/* c */ ", "-- c\n"]))
def test_disguise_does_not_change_the_verdict(table: str, column: str, value: int,
                                              case: Any, comment: str) -> None:
    """Case, comments and quoting leave the verdict as it was; a WHERE that pins
    its rows is a filter, a missing one is not."""
    quoted = '"' + table + '"'
    filtered = f"{comment}{case('delete from')} {quoted} {case('where')} {column} = {value}"
    bare = f"{comment}{case('delete from')} {quoted}"
    assert sql(filtered).signals == ()
    assert sql(bare).signals == (f"DELETE FROM {table} (no WHERE)",)


@PROPERTY
@given(plan=st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["format_version", "planned_values", "resource_changes", "address",
                         "change", "actions", "replace_paths", "deposed", "output_changes",
                         "operations", "op", "object", "kind", "apiVersion", "metadata",
                         "name", "items"]), inner, max_size=5),
    max_leaves=25))
def test_readers_never_raise_on_json_shapes(plan: Any) -> None:
    text = json.dumps(plan)
    for reader in (terraform_plan.read, kube_plan.read):
        reading = reader(text)
        assert isinstance(reading, Reading)
        if reading.unreadable is not None:
            assert reading.writes  # what cannot be read may change anything
        for entry in [*reading.changes, *reading.signals, reading.unreadable or ""]:
            assert entry.isprintable()


SEQUENCE_MOVES = {
    "SELECT setval('orders_id_seq', 1)": True,
    "SELECT setval('orders_id_seq', 1, false)": True,
    "SELECT id FROM orders WHERE id = setval('s', 5)": True,
    "ALTER SEQUENCE orders_id_seq RESTART WITH 1": True,
    "ALTER SEQUENCE orders_id_seq INCREMENT BY -1": True,
    "ALTER SEQUENCE s MINVALUE 1 MAXVALUE 10 CYCLE": True,
    "ALTER SEQUENCE orders_id_seq OWNED BY orders.id": False,
    "ALTER SEQUENCE orders_id_seq CACHE 10": False,
    "SELECT nextval('orders_id_seq')": False,
}


@pytest.mark.parametrize("text", SEQUENCE_MOVES, ids=[q[:60] for q in SEQUENCE_MOVES])
def test_moving_a_sequence_is_judged_by_what_it_changes(text: str) -> None:
    """``setval`` or ``ALTER SEQUENCE ... RESTART`` rewinds a sequence: the next
    INSERT that takes a value may collide with a row already there. A write that
    runs without a human must not do that; ``nextval`` only takes the next one."""
    reading = sql(text)
    assert reading.writes, reading
    moved = any("sequence hands out" in s for s in reading.signals)
    assert moved is SEQUENCE_MOVES[text], reading.signals
    if not SEQUENCE_MOVES[text]:
        assert reading.signals == (), reading.signals
