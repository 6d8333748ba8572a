"""The credential broker: mints the credential of one action run from OpenBao
(hvac), journals its lease before handing it out, and revokes it when the run
ends; a lease whose runner died is revoked by the next broker (``recover``).

The scope is the action's, as the operator declared it (``Action.credential``):
nothing the agent sends reaches this module. Engines:

- ``database``: the per-action role ``<mount>/roles/<role>`` is written on each
  issue with the grants of the action's tier (``pg_role``) and a TTL equal to
  the credential's (at most 10 minutes); the connection
  ``<mount>/config/<connection>`` is the operator's. The credential is a libpq
  service file and password file.
- ``token``: a child token carrying only the scope's policies (no default
  policy), not renewable, its TTL also its explicit maximum; the journal keeps
  its accessor, never the token.
- ``kubernetes``: a service account token from ``<mount>/creds/<role>`` (a
  role the cluster renderer writes) for one namespace.

Fails closed: every failure is a ``BrokerError`` that says what failed, and an
issue that fails leaves nothing issued (a lease minted before the failure is
revoked on the spot). Never logs, returns in an error, or journals a secret.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any

from ..errors import SandboxError
from ..spec.actions import MAX_CREDENTIAL_TTL, Action, ActionCredential
from . import pg_role
from .credential import Credential, database_files, kubeconfig_files, token_files
from .lease_journal import Held, JournalError, LeaseJournal

log = logging.getLogger(__name__)

DEFAULT_MOUNTS = {"database": "database", "kubernetes": "kubernetes"}


def data_of(resp: dict[str, Any]) -> dict[str, Any]:
    """The ``data`` of an OpenBao answer (empty when there is none)."""
    data = resp.get("data")
    return data if isinstance(data, dict) else {}


class BrokerError(SandboxError):
    """The broker could not do what was asked (the message says what and why)."""


class BrokerUnavailable(BrokerError):
    """OpenBao cannot be reached, or is sealed."""


class CredentialIssueError(BrokerError):
    """No credential was issued (and nothing was left issued)."""


class CredentialRevokeError(BrokerError):
    """A lease was not revoked; it stays in the journal for the next recovery."""


def _reason(exc: BaseException) -> str:
    errors = getattr(exc, "errors", None)
    if isinstance(errors, list) and errors:
        text = "; ".join(str(e) for e in errors)
    else:
        text = str(exc)
        text = text.split(", on ")[0]
    text = re.sub(r"\d+ errors? occurred:", "", text)
    text = re.sub(r"\s*\*\s*", " ", text)
    return re.sub(r"\s+", " ", text).strip() or type(exc).__name__


class Broker:
    """Issue, revoke and recover action credentials with one OpenBao client."""

    def __init__(self, client: Any, journal_dir: str) -> None:
        self.client = client
        self.journal = LeaseJournal(journal_dir)
        self._held: dict[str, Held] = {}

    # -- OpenBao ---------------------------------------------------------------

    def _call(self, what: str, method: str, path: str,
              error: type[BrokerError] = CredentialIssueError, missing: str | None = None,
              **kwargs: Any) -> dict[str, Any]:
        import hvac.exceptions
        import requests

        try:
            resp = getattr(self.client.adapter, method)(f"/v1/{path}", **kwargs)
        except hvac.exceptions.Forbidden:
            raise error(f"{what}: permission denied (the broker's token is invalid, expired, "
                        f"or its policy does not allow {path})") from None
        except hvac.exceptions.Unauthorized:
            raise error(f"{what}: the broker's token is not accepted") from None
        except (hvac.exceptions.VaultDown, hvac.exceptions.VaultNotInitialized):
            raise BrokerUnavailable(f"{what}: OpenBao at {self._address()} is sealed or not "
                                    "initialised") from None
        except hvac.exceptions.InvalidPath as exc:
            raise error(missing or f"{what}: {path} does not exist ({_reason(exc)})") from None
        except hvac.exceptions.VaultError as exc:
            raise error(f"{what}: {_reason(exc)}") from None
        except requests.RequestException as exc:
            raise BrokerUnavailable(f"{what}: cannot reach OpenBao at {self._address()} "
                                    f"({type(exc).__name__})") from None
        if isinstance(resp, dict):
            return resp
        return {}  # 204 No Content

    def _address(self) -> str:
        return str(getattr(self.client, "url", "") or "(unknown address)")

    # -- issue -----------------------------------------------------------------

    def issue(self, name: str, action: Action, request_id: str) -> Credential:
        """Mint the credential of one run of action ``name``; its lease is in the
        journal before this returns. Raises ``BrokerError``."""
        scope = action.credential
        if scope is None:
            raise CredentialIssueError(f"action {name!r} declares no credential: it gets none")
        ttl = int(scope.ttl)
        if not 1 <= ttl <= MAX_CREDENTIAL_TTL:
            raise CredentialIssueError(f"action {name!r}: a credential lives between 1s and "
                                       f"{MAX_CREDENTIAL_TTL:g}s, not {scope.ttl:g}s")
        self.recover()
        if scope.engine == "database":
            return self._issue_database(name, action, scope, ttl, request_id)
        if scope.engine == "token":
            return self._issue_token(name, scope, ttl, request_id)
        if scope.engine == "kubernetes":
            return self._issue_kubernetes(name, scope, ttl, request_id)
        raise CredentialIssueError(f"action {name!r}: unknown credential engine {scope.engine!r}")

    def _journal(self, key: str, entry: dict[str, Any]) -> None:
        """Record the lease before the credential is handed out; a lease that
        cannot be recorded is revoked at once."""
        try:
            held = self.journal.record(key, entry)
        except JournalError as exc:
            raise self._undo(entry, str(exc)) from None
        self._held[key] = held

    def _leased(self, resp: dict[str, Any], engine: str, name: str, request_id: str,
                ttl: int, what: str, role: str, complete: bool, missing: str
                ) -> tuple[str, dict[str, Any], dict[str, Any], int]:
        """The lease id, the secret data, the journal entry and the granted seconds of a
        secrets engine's answer, after checking it: a lease there, granted for at most
        ``ttl``, and ``complete`` (else revoked at once, naming what was ``missing``)."""
        lease_id = str(resp.get("lease_id") or "")
        if not lease_id:
            raise CredentialIssueError(f"{what}: OpenBao returned no lease for {role!r}: a "
                                       "credential without a lease cannot be revoked")
        entry = {"engine": engine, "lease_id": lease_id, "action": name,
                 "request_id": request_id, "issued_at": time.time(), "ttl": ttl}
        granted = int(resp.get("lease_duration") or 0)
        if not 0 < granted <= ttl or not complete:
            raise self._undo(entry, f"{what}: OpenBao granted a lease of {granted}s (asked "
                                    f"{ttl}s) or {missing}")
        return lease_id, data_of(resp), entry, granted

    def _undo(self, entry: dict[str, Any], why: str) -> CredentialIssueError:
        try:
            self._revoke_entry(entry)
        except BrokerError as exc:
            return CredentialIssueError(f"{why}; the lease just minted could not be revoked "
                                        f"({exc}): it expires on its own within its TTL")
        return CredentialIssueError(f"{why}; the lease just minted was revoked")

    def _issue_database(self, name: str, action: Action, scope: ActionCredential, ttl: int,
                        request_id: str) -> Credential:
        mount = (scope.mount or DEFAULT_MOUNTS["database"]).strip("/")
        role = scope.role or f"action-{name}"
        connection = str(scope.connection)
        what = f"action {name!r}"
        config = self._call(
            f"{what}: read the database connection {connection!r}", "get",
            f"{mount}/config/{connection}",
            missing=f"{what}: the database connection {connection!r} is not configured in "
                    f"OpenBao ({mount}/config/{connection}): the operator configures it first")
        details = (config.get("data") or {}).get("connection_details") or {}
        try:
            where = pg_role.target(str(details.get("connection_url") or ""))
            database = scope.database or where.dbname
            if not database:
                raise pg_role.PgScopeError("name the database in credential.database or in "
                                           "the connection's URL")
            creation = pg_role.creation_statements(action.tier, database=database,
                                                   schema=scope.database_schema,
                                                   owner=scope.owner)
            revocation = pg_role.revocation_statements(scope.owner)
        except pg_role.PgScopeError as exc:
            raise CredentialIssueError(f"{what}: database connection {connection!r}: "
                                       f"{exc}") from None
        self._call(f"{what}: write the database role {role!r}", "post",
                   f"{mount}/roles/{role}",
                   json={"db_name": connection, "creation_statements": creation,
                         "revocation_statements": revocation, "rollback_statements": [],
                         "renew_statements": [], "default_ttl": ttl, "max_ttl": ttl})
        resp = self._call(f"{what}: mint a database credential ({mount}/creds/{role})", "get",
                          f"{mount}/creds/{role}")
        lease_id, data, entry, granted = self._leased(
            resp, "database", name, request_id, ttl, what, role,
            bool(data_of(resp).get("username") and data_of(resp).get("password")),
            "no username and password")
        try:
            files, env = database_files(host=where.host, port=where.port, dbname=database,
                                        user=str(data["username"]),
                                        password=str(data["password"]), sslmode=where.sslmode)
        except ValueError as exc:
            raise self._undo(entry, f"{what}: {exc}") from None
        self._journal(lease_id, entry)
        if f"{where.host}:{where.port}" not in action.connect:
            log.warning("action %s does not list %s:%d in connect: its container cannot reach "
                        "the database", name, where.host, where.port)
        scope_out = {"engine": "database", "mount": mount, "connection": connection,
                     "role": role, "database": database, "schema": scope.database_schema,
                     "tier": action.tier.value, "ttl": granted}
        if scope.owner:
            scope_out["owner"] = scope.owner
        credential = Credential(lease_id=lease_id, engine="database", scope=scope_out,
                                ttl=granted, files=files, env=env)
        log.info("issued a database credential for action %s: lease %s, role %s, ttl %ds",
                 name, lease_id, role, granted)
        return credential

    def _issue_token(self, name: str, scope: ActionCredential, ttl: int,
                     request_id: str) -> Credential:
        what = f"action {name!r}"
        policies = sorted(set(scope.policies))
        resp = self._call(f"{what}: create a child token", "post", "auth/token/create",
                          json={"policies": policies, "no_default_policy": True,
                                "ttl": f"{ttl}s", "explicit_max_ttl": f"{ttl}s",
                                "renewable": False, "display_name": f"action-{name}",
                                "meta": {"action": name, "request_id": request_id}})
        auth = resp.get("auth") or {}
        accessor = str(auth.get("accessor") or "")
        token = str(auth.get("client_token") or "")
        entry = {"engine": "token", "accessor": accessor, "action": name,
                 "request_id": request_id, "issued_at": time.time(), "ttl": ttl}
        if not accessor or not token:
            if accessor:
                raise self._undo(entry, f"{what}: OpenBao returned a token without its value")
            raise CredentialIssueError(f"{what}: OpenBao returned a token without an accessor: "
                                       "it could not be revoked, so it is not used")
        granted = int(auth.get("lease_duration") or 0)
        got = sorted(auth.get("token_policies") or auth.get("policies") or [])
        if got != policies or not 0 < granted <= ttl or auth.get("renewable"):
            raise self._undo(entry, f"{what}: OpenBao made a token with policies {got}, ttl "
                                    f"{granted}s (asked {policies}, {ttl}s, not renewable)")
        self._journal(accessor, entry)
        files, env = token_files(token, getattr(self.client, "url", None))
        credential = Credential(lease_id=accessor, engine="token",
                                scope={"engine": "token", "policies": policies, "ttl": granted},
                                ttl=granted, files=files, env=env)
        log.info("issued a token for action %s: accessor %s, policies %s, ttl %ds",
                 name, accessor, ",".join(policies), granted)
        return credential

    def _issue_kubernetes(self, name: str, scope: ActionCredential, ttl: int,
                          request_id: str) -> Credential:
        mount = (scope.mount or DEFAULT_MOUNTS["kubernetes"]).strip("/")
        role, namespace = str(scope.role), str(scope.namespace)
        what = f"action {name!r}"
        config: dict[str, Any] = {}
        try:  # the cluster's address for a kubeconfig, when the broker may read it
            config = self._call(f"{what}: read {mount}/config", "get",
                                f"{mount}/config").get("data") or {}
        except BrokerUnavailable:
            raise
        except CredentialIssueError as exc:
            log.info("no kubeconfig for action %s: %s", name, exc)
        resp = self._call(f"{what}: mint a Kubernetes service account token "
                          f"({mount}/creds/{role}, namespace {namespace})", "post",
                          f"{mount}/creds/{role}",
                          json={"kubernetes_namespace": namespace, "ttl": f"{ttl}s"})
        token = str(data_of(resp).get("service_account_token") or "")
        lease_id, data, entry, granted = self._leased(resp, "kubernetes", name, request_id, ttl,
                                                      what, role, bool(token),
                                                      "no service account token")
        self._journal(lease_id, entry)
        files: dict[str, bytes] = {"token": token.encode(), "namespace": namespace.encode()}
        env: dict[str, str] = {}
        if config.get("kubernetes_host"):
            kube_files, env = kubeconfig_files(
                server=str(config["kubernetes_host"]), ca_cert=config.get("kubernetes_ca_cert"),
                namespace=namespace, token=token,
                account=str(data.get("service_account_name") or "action"))
            files.update(kube_files)
        credential = Credential(lease_id=lease_id, engine="kubernetes",
                                scope={"engine": "kubernetes", "mount": mount, "role": role,
                                       "namespace": namespace, "ttl": granted},
                                ttl=granted, files=files, env=env)
        log.info("issued a Kubernetes credential for action %s: lease %s, role %s, "
                 "namespace %s, ttl %ds", name, lease_id, role, namespace, granted)
        return credential

    # -- revoke ----------------------------------------------------------------

    def _revoke_entry(self, entry: dict[str, Any]) -> str:
        """Revoke what a journal entry names; return its id. Revoking what is
        already gone (expired, revoked) succeeds."""
        if entry.get("engine") == "token":
            accessor = str(entry.get("accessor") or "")
            if not accessor:
                raise CredentialRevokeError("a journal entry names a token without an accessor")
            self._call(f"revoke the token with accessor {accessor}", "post",
                       "auth/token/revoke-accessor", error=CredentialRevokeError,
                       json={"accessor": accessor})
            return accessor
        lease_id = str(entry.get("lease_id") or "")
        if not lease_id:
            raise CredentialRevokeError("a journal entry names no lease")
        self._call(f"revoke lease {lease_id}", "put", "sys/leases/revoke",
                   error=CredentialRevokeError, json={"lease_id": lease_id})
        return lease_id

    def revoke(self, credential: Credential) -> None:
        """Revoke the credential's lease now and drop it from the journal.
        Raises ``CredentialRevokeError`` (or ``BrokerUnavailable``) when it was
        not revoked: then the journal keeps it for the next ``recover``."""
        key = credential.lease_id
        entry = ({"engine": "token", "accessor": key} if credential.engine == "token"
                 else {"engine": credential.engine, "lease_id": key})
        held = self._held.pop(key, None)
        try:
            self._revoke_entry(entry)
        except BrokerError as exc:
            if held is not None:
                self.journal.release(held, forget=False)
            raise type(exc)(f"{exc}; the lease stays in the journal {self.journal.folder} and "
                            f"the next broker start revokes it (it expires within "
                            f"{credential.ttl}s regardless)") from None
        if held is not None:
            self.journal.release(held, forget=True)
        else:
            self.journal.forget(key)
        log.info("revoked %s lease %s", credential.engine, key)

    def recover(self) -> list[str]:
        """Revoke every lease in the journal that no live runner holds (its runner
        was killed); return their ids. A lease that fails to revoke stays for
        the next time; an unreachable OpenBao raises ``BrokerUnavailable``."""
        done: list[str] = []
        for held in self.journal.orphans():
            if not (held.entry.get("lease_id") or held.entry.get("accessor")):
                log.warning("dropped a journal entry that names no lease: %s", held.path)
                self.journal.release(held, forget=True)
                continue
            try:
                lease = self._revoke_entry(held.entry)
            except BrokerUnavailable:
                self.journal.release(held, forget=False)
                raise
            except BrokerError as exc:
                self.journal.release(held, forget=False)
                log.warning("a lease left by a dead runner is still live: %s", exc)
                continue
            self.journal.release(held, forget=True)
            log.warning("revoked %s lease %s left by a dead runner (action %s, request %s)",
                        held.entry.get("engine"), lease, held.entry.get("action"),
                        held.entry.get("request_id"))
            done.append(lease)
        return done
