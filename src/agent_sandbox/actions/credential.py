"""What the broker hands out for one action run: the lease to revoke, the scope
it was minted for, and the files the runner mounts read-only into that run's
container (at ``CREDENTIAL_DIR``), never into an environment variable.

The secret lives only in ``files``. ``repr``, ``str``, formatting, logging and
``audit_fields`` show the scope, the lease id and the TTL, never a file's
contents; the object refuses to be pickled or copied, so the secret cannot
leave the process by way of a queue, a cache or a log of ``vars()``. ``env``
holds pointers only (file paths, an address), never a secret value.

Also the pure builders of those files: a libpq service file and password file
for a database credential, a kubeconfig for a Kubernetes service account
token, a token file for a child token.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, NoReturn

# where the runner mounts a credential's files inside the action's container
CREDENTIAL_DIR = "/run/agent-sandbox/credential"
# where the container reaches a TCP endpoint its action may connect to: the
# runner relays each to the same port on the container's loopback
RELAY_ADDRESS = "127.0.0.1"
REDACTED = "[redacted]"


class Credential:
    """One minted credential (one lease). Immutable."""

    __slots__ = ("_files", "engine", "env", "lease_id", "scope", "ttl")
    lease_id: str
    engine: str
    scope: dict[str, Any]
    ttl: int
    env: dict[str, str]
    _files: dict[str, bytes]

    def __init__(self, *, lease_id: str, engine: str, scope: Mapping[str, Any], ttl: int,
                 files: Mapping[str, bytes], env: Mapping[str, str]) -> None:
        for path in files:
            if path.startswith("/") or ".." in path.split("/") or not path:
                raise ValueError(f"credential file {path!r} must be a relative path")
        values = {"lease_id": lease_id, "engine": engine, "scope": dict(scope), "ttl": int(ttl),
                  "env": dict(env), "_files": dict(files)}
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("a Credential is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("a Credential is immutable")

    @property
    def files(self) -> dict[str, bytes]:
        """The files to mount, by path relative to ``CREDENTIAL_DIR`` (a copy)."""
        return dict(self._files)

    def audit_fields(self) -> dict[str, Any]:
        """What the audit records: scope, lease id and TTL (no secret)."""
        return {"lease_id": self.lease_id, "engine": self.engine,
                "scope": json.loads(json.dumps(self.scope)), "ttl": self.ttl}

    def __repr__(self) -> str:
        files = ", ".join(sorted(self._files))
        return (f"Credential(engine={self.engine!r}, lease_id={self.lease_id!r}, "
                f"ttl={self.ttl}, scope={self.scope!r}, files=[{files}] {REDACTED})")

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return format(repr(self), spec)

    def __reduce_ex__(self, protocol: object) -> NoReturn:
        raise TypeError("a Credential is not picklable or copyable: it carries a secret")

    def __copy__(self) -> NoReturn:
        raise TypeError("a Credential is not copyable: it carries a secret")

    def __deepcopy__(self, memo: object) -> NoReturn:
        raise TypeError("a Credential is not copyable: it carries a secret")


def _pgpass_field(value: str) -> str:
    return value.replace("\\", "\\\\").replace(":", "\\:")


def _service_value(value: str) -> str:
    if any(c in value for c in "\n\r"):
        raise ValueError("a connection value may not span lines")
    return value


def database_files(*, host: str, port: int, dbname: str, user: str, password: str,
                   sslmode: str | None = None, hostaddr: str = RELAY_ADDRESS,
                   service: str = "action") -> tuple[dict[str, bytes], dict[str, str]]:
    """A libpq service file (no secret) and a password file (the secret), and
    the environment that points libpq at them: ``psql`` with no arguments
    connects. It connects to ``hostaddr`` (the relay on the container's
    loopback) while ``host`` stays the server's name, for TLS verification and
    the password file's match. libpq ignores a password file that its group or
    others may read: the runner mounts it 0400 or 0600 for the container's user."""
    conf = [f"[{service}]", f"host={_service_value(host)}",
            f"hostaddr={_service_value(hostaddr)}", f"port={int(port)}",
            f"dbname={_service_value(dbname)}", f"user={_service_value(user)}"]
    if sslmode:
        conf.append(f"sslmode={_service_value(sslmode)}")
    pgpass = ":".join(_pgpass_field(v) for v in (host, str(int(port)), dbname, user, password))
    files = {"pg_service.conf": ("\n".join(conf) + "\n").encode(),
             "pgpass": (pgpass + "\n").encode()}
    env = {"PGSERVICEFILE": f"{CREDENTIAL_DIR}/pg_service.conf",
           "PGPASSFILE": f"{CREDENTIAL_DIR}/pgpass", "PGSERVICE": service}
    return files, env


def token_files(token: str, address: str | None) -> tuple[dict[str, bytes], dict[str, str]]:
    """A child token as a file; the address of OpenBao as a pointer."""
    env = {"AGENT_SANDBOX_TOKEN_FILE": f"{CREDENTIAL_DIR}/token"}
    if address:
        env["VAULT_ADDR"] = address
        env["BAO_ADDR"] = address
    return {"token": (token + "\n").encode()}, env


def kubeconfig_files(*, server: str, ca_cert: str | None, namespace: str, token: str,
                     account: str) -> tuple[dict[str, bytes], dict[str, str]]:
    """A kubeconfig for a service account token, scoped to one namespace."""
    cluster: dict[str, Any] = {"server": server}
    if ca_cert:
        import base64

        cluster["certificate-authority-data"] = base64.b64encode(ca_cert.encode()).decode()
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "action",
        "clusters": [{"name": "cluster", "cluster": cluster}],
        "users": [{"name": account or "action", "user": {"token": token}}],
        "contexts": [{"name": "action", "context": {"cluster": "cluster",
                                                    "user": account or "action",
                                                    "namespace": namespace}}],
    }
    # JSON is YAML: kubectl and every client library read it
    return ({"kubeconfig": (json.dumps(config, indent=2) + "\n").encode()},
            {"KUBECONFIG": f"{CREDENTIAL_DIR}/kubeconfig"})
