"""The PostgreSQL side of a database credential, as data: the statements
OpenBao's database secrets engine runs to create the per-action user (grants
that match the action's tier) and to drop it again, and where the action's
container finds the database (from the connection OpenBao is configured with).

Pure functions only: nothing here talks to OpenBao or PostgreSQL. Every
identifier comes from the operator's spec (patterns checked there, quoted
again here) or from OpenBao's own templates (``{{name}}``, ``{{password}}``,
``{{expiration}}``); nothing comes from the agent. Never grants more than the
tier says:

- read: CONNECT on the database, USAGE on the schema, SELECT on its tables,
  and transactions read-only by default;
- write: also INSERT, UPDATE, DELETE on its tables, the sequences they use, and
  CREATE on the schema (a migration may add tables; what it creates is handed
  to the owner role when the credential is revoked);
- destructive: also membership in the schema's owner role (ALTER, DROP).

Write and destructive credentials need the owner role, and the owner must hold
no power beyond its objects: the creation refuses an owner that is (or is a
member of) a superuser, a role that creates roles or databases, replicates,
bypasses row security, or one of the server's file, program or all-data roles,
and one that owns the database or may create schemas in it.
What a credential created outlives it with its heir's rights (a view runs with
its owner's), so the heir is that owner and never the engine's own account,
which is a superuser: a view over ``pg_authid`` handed to it once let the next
write credential make itself a standing superuser.

Revocation ends the user's sessions, hands what it created to the owner (a
read credential can create nothing, and drops whatever it holds), drops its
privileges and drops the user, so that no login and no role is left behind.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qs, unquote, urlsplit

from ..errors import SandboxError
from ..spec.actions import Tier

NAME = '"{{name}}"'
_IDENT = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,62}$")
DEFAULT_PORT = 5432
TERMINATE_WAIT_MS = 5000


class PgScopeError(SandboxError, ValueError):
    """The scope cannot be turned into statements (the message says why)."""


def ident(name: str) -> str:
    """A quoted identifier; only the plain names the spec allows."""
    if not _IDENT.match(name):
        raise PgScopeError(f"{name!r} is not a plain PostgreSQL name")
    return '"' + name + '"'


def literal(text: str) -> str:
    if not _IDENT.match(text):
        raise PgScopeError(f"{text!r} is not a plain PostgreSQL name")
    return "'" + text + "'"


@dataclass(frozen=True)
class Target:
    """Where PostgreSQL listens, as OpenBao's connection names it."""

    host: str
    port: int
    dbname: str | None
    sslmode: str | None


# roles whose members reach beyond a schema's objects: files, programs, every table
POWERFUL_ROLES = ("pg_read_server_files", "pg_write_server_files", "pg_execute_server_program",
                  "pg_read_all_data", "pg_write_all_data", "pg_signal_backend",
                  "pg_checkpoint", "pg_create_subscription")


def owner_check(owner: str) -> str:
    """A statement that fails unless ``owner`` exists and holds no power beyond its
    objects (itself or through any role it is a member of)."""
    powerful = ", ".join(f"'{r}'" for r in POWERFUL_ROLES)
    return (
        "DO $$BEGIN "  # noqa: S608 (identifiers checked by literal())
        f"IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = {literal(owner)}) "
        f"THEN RAISE EXCEPTION 'the owner role {owner} does not exist'; END IF; "
        "IF EXISTS (SELECT FROM pg_catalog.pg_roles r "
        f"WHERE pg_catalog.pg_has_role({literal(owner)}, r.oid, 'MEMBER') "
        "AND (r.rolsuper OR r.rolcreaterole OR r.rolcreatedb OR r.rolreplication "
        f"OR r.rolbypassrls OR r.rolname IN ({powerful}))) "
        f"THEN RAISE EXCEPTION 'the owner role {owner} holds powers beyond its objects "
        "(superuser, createrole, createdb, replication, bypassrls or a server role): "
        "an action credential never inherits or bequeaths them'; END IF; "
        # owning the database, or CREATE on it, makes schemas: one named after a
        # superuser comes first on that superuser's search_path
        "IF EXISTS (SELECT FROM pg_catalog.pg_database d WHERE d.datname = "
        f"pg_catalog.current_database() AND pg_catalog.pg_has_role({literal(owner)}, "
        "d.datdba, 'MEMBER')) OR pg_catalog.has_database_privilege("
        f"{literal(owner)}, pg_catalog.current_database(), 'CREATE') "
        f"THEN RAISE EXCEPTION 'the owner role {owner} owns the database or may create "
        "schemas in it: an owner holds its schema objects only'; END IF; END$$")


def creation_statements(tier: Tier, *, database: str, schema: str,
                        owner: str | None) -> list[str]:
    """What creates the user of one credential, with the tier's grants only."""
    if tier is not Tier.READ and not owner:
        raise PgScopeError(f"a {tier.value} database action needs credential.owner (the role "
                           "that owns the schema's tables and inherits what the action "
                           "creates)")
    db, sch = ident(database), ident(schema)
    statements = [
        # the connection must be to the database the grants are meant for
        f"DO $$BEGIN IF current_database() <> {literal(database)} THEN RAISE EXCEPTION "
        f"'the OpenBao connection is to database %, the action names {database}', "
        "current_database(); END IF; END$$",
        *([owner_check(owner)] if owner and tier is not Tier.READ else []),
        f"CREATE ROLE {NAME} WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION "
        "NOBYPASSRLS PASSWORD '{{password}}' VALID UNTIL '{{expiration}}'",
        f"GRANT CONNECT ON DATABASE {db} TO {NAME}",
    ]
    if tier is Tier.READ:
        statements += [
            f"GRANT USAGE ON SCHEMA {sch} TO {NAME}",
            f"GRANT SELECT ON ALL TABLES IN SCHEMA {sch} TO {NAME}",
            f"ALTER ROLE {NAME} SET default_transaction_read_only = on",
        ]
        return statements
    statements += [
        f"GRANT USAGE, CREATE ON SCHEMA {sch} TO {NAME}",
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {sch} TO {NAME}",
        f"GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA {sch} TO {NAME}",
    ]
    if tier is Tier.DESTRUCTIVE:
        assert owner is not None
        statements.append(f"GRANT {ident(owner)} TO {NAME}")
    return statements


def revocation_statements(owner: str | None) -> list[str]:
    """What drops the user again; a user already gone is not an error. What it
    created goes to ``owner``, never to the engine's own account; without an
    owner (a read credential) whatever it holds is dropped with it."""
    bequest = f"REASSIGN OWNED BY {NAME} TO {ident(owner)}; " if owner else ""
    # identifiers only: checked by ident(), the rest is OpenBao's own template
    return [
        "DO $$BEGIN "  # noqa: S608
        "IF EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = '{{name}}') THEN "
        f"ALTER ROLE {NAME} NOLOGIN; "
        f"PERFORM pg_catalog.pg_terminate_backend(pid, {TERMINATE_WAIT_MS}) "
        "FROM pg_catalog.pg_stat_activity WHERE usename = '{{name}}'; "
        f"{bequest}"
        f"DROP OWNED BY {NAME}; "
        f"DROP ROLE {NAME}; "
        "END IF; END$$",
    ]


def _dsn_pairs(text: str) -> dict[str, str]:
    """``key=value`` pairs of a libpq keyword/value string (values may be quoted)."""
    pairs: dict[str, str] = {}
    for m in re.finditer(r"\s*([A-Za-z_]+)\s*=\s*('((?:\\.|[^'\\])*)'|\S*)", text):
        value = m.group(3) if m.group(3) is not None else m.group(2)
        pairs[m.group(1)] = re.sub(r"\\(.)", r"\1", value)
    return pairs


def target(connection_url: str) -> Target:
    """Host, port, database and sslmode from OpenBao's ``connection_url``
    (a URL or libpq keyword/value form). Raises ``PgScopeError``."""
    url = connection_url.strip()
    if url.startswith(("postgres://", "postgresql://")):
        parts = urlsplit(url)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        host = query.get("host") or parts.hostname or ""
        try:
            port = int(query.get("port") or parts.port or DEFAULT_PORT)
        except ValueError:
            raise PgScopeError("the connection URL has a port that is not a number") from None
        dbname = query.get("dbname") or unquote(parts.path.lstrip("/")) or None
        sslmode = query.get("sslmode")
    else:
        pairs = _dsn_pairs(url)
        host = pairs.get("host") or pairs.get("hostaddr") or ""
        try:
            port = int(pairs.get("port") or DEFAULT_PORT)
        except ValueError:
            raise PgScopeError("the connection string has a port that is not a number") \
                from None
        dbname = pairs.get("dbname") or None
        sslmode = pairs.get("sslmode")
    if not host or host.startswith("/") or "," in host:
        raise PgScopeError("the connection must reach PostgreSQL at one TCP host "
                           f"({host or 'none'} given): an action's container cannot use a "
                           "unix socket")
    if not 1 <= port <= 65535:
        raise PgScopeError(f"the connection's port {port} is out of range")
    return Target(host, port, dbname, sslmode)
