"""Privileged infrastructure actions in the spec: what an agent may ask to run
against a database, a cluster or a cloud plan, in a one-shot gVisor container
with a credential minted for that action alone.

Every field is the operator's, never the agent's: the agent only names an
action and passes parameters, which are validated against ``params`` (a JSON
Schema) and put into ``argv`` as whole elements, never through a shell. The
credential's scope comes from ``credential``; an action without one gets no
credential at all.

Tiers: ``read`` runs at once; ``write`` shows its plan first and escalates to
the approval loop when the plan carries a destructive signal (or cannot be
read); ``destructive`` always waits for a human.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Discriminator, Field, Tag, field_validator, model_validator

from . import domains
from .base import Strict, duration_field, parse_duration

ActionName = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]{0,62}$")]

# a placeholder in argv: {name}; {{ and }} stand for literal braces
PLACEHOLDER = re.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_]{0,63})\}|[{}]")

# the longest a credential may live: 10 minutes
MAX_CREDENTIAL_TTL = 600.0


class Tier(StrEnum):
    READ = "read"
    WRITE = "write"
    DESTRUCTIVE = "destructive"


def _egress_domain(v: str) -> str:
    try:
        return domains.validate_pattern(v, allow_list=True)
    except domains.DomainError as exc:
        raise ValueError(str(exc)) from None


EgressDomain = Annotated[str, AfterValidator(_egress_domain)]

_HOST_PORT = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[0-9.]+|[a-z0-9]([-a-z0-9]*[a-z0-9])?"
                        r"(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*):(\d{1,5})")


def _host_port(v: str) -> str:
    m = _HOST_PORT.fullmatch(v)
    if not m or not 1 <= int(m.group(5)) <= 65535:
        raise ValueError(f"{v!r} must be host:port (an IP address, [IPv6] or a DNS name)")
    return v


HostPort = Annotated[str, AfterValidator(_host_port)]
_ENGINE_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"


class ActionCredential(Strict):
    """Which secrets engine mints the action's credential, and for what."""

    engine: Literal["database", "token", "kubernetes"]
    mount: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_/-]{0,62}$")] | None = Field(
        default=None, description="The engine's mount path (database, kubernetes; the token "
        "engine needs none).")
    connection: Annotated[str, Field(pattern=_ENGINE_NAME)] | None = Field(
        default=None, description="database: the connection configured in OpenBao "
        "(database/config/NAME).")
    role: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]{0,62}$")] | None = Field(
        default=None, description="database: the engine role (default: action-NAME); "
        "kubernetes: one of cluster.vault.roles.")
    namespace: Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")] | None = None
    database: Annotated[str, Field(pattern=_ENGINE_NAME)] | None = Field(
        default=None, description="database: the PostgreSQL database the grants are on "
        "(default: the connection's own).")
    database_schema: Annotated[str, Field(pattern=r"^[a-z_][a-z0-9_]{0,62}$")] = "public"
    owner: Annotated[str, Field(pattern=r"^[a-z_][a-z0-9_]{0,62}$")] | None = Field(
        default=None, description="database: the role that owns the schema's tables; a "
        "destructive action's credential is a member of it (needed to ALTER or DROP).")
    policies: list[Annotated[str, Field(pattern=_ENGINE_NAME)]] = Field(
        default_factory=list, description="token: the policies of the child token.")
    ttl: float = duration_field(300, "How long the credential lives (at most 10m)")

    @field_validator("ttl", mode="before")
    @classmethod
    def _ttl(cls, v: Any) -> float:
        ttl = parse_duration(v)
        if not 1 <= ttl <= MAX_CREDENTIAL_TTL:
            raise ValueError(f"a credential lives between 1s and 10m, not {ttl:g}s")
        return ttl

    @model_validator(mode="after")
    def _complete(self) -> ActionCredential:
        need = {"database": ("connection",), "kubernetes": ("role", "namespace"),
                "token": ("policies",)}[self.engine]
        missing = [k for k in need if not getattr(self, k)]
        if missing:
            raise ValueError(f"a {self.engine} credential needs {' and '.join(missing)}")
        return self


class ActionLimits(Strict):
    cpus: float = Field(default=1.0, gt=0, le=64)
    memory_mb: int = Field(default=256, ge=16, le=65536)
    pids: int = Field(default=128, ge=8, le=32768)
    timeout: float = duration_field(120, "Wall time before the container is killed")
    output_bytes: int = Field(default=262144, ge=1024, le=16 * 1024 * 1024,
                              description="Output kept per stream; the rest is cut.")

    @field_validator("timeout", mode="before")
    @classmethod
    def _timeout(cls, v: Any) -> float:
        t = parse_duration(v)
        if not 0 < t <= 3600:
            raise ValueError(f"an action's timeout is between 1ms and 1h, not {t:g}s")
        return t


class ActionPlan(Strict):
    """How the gate reads what the action will change: which parameter carries
    the plan and in what form."""

    kind: Literal["sql", "terraform", "kubernetes"]
    param: str


def placeholders(element: str) -> list[str]:
    """The parameter names an argv element names; a lone brace is an error."""
    names = []
    for m in PLACEHOLDER.finditer(element):
        if m.group(0) in ("{{", "}}"):
            continue
        if m.group(1) is None:
            raise ValueError(f"argv element {element!r} has a lone {m.group(0)!r} "
                             "(write {{ or }} for a literal brace)")
        names.append(m.group(1))
    return names


class Action(Strict):
    """One declared action."""

    description: str = Field(min_length=1, max_length=500)
    tier: Tier
    image: str = Field(min_length=1, max_length=255, pattern=r"^[A-Za-z0-9][A-Za-z0-9._/:@-]*$")
    argv: list[str] = Field(min_length=1)
    params: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object", "properties": {},
                                 "additionalProperties": False},
        description="JSON Schema (draft 2020-12) of the parameters, an object.")
    plan: ActionPlan | None = None
    credential: ActionCredential | None = None
    egress: list[EgressDomain] = Field(
        default_factory=list, description="Domains the action may reach, through the proxy.")
    connect: list[HostPort] = Field(
        default_factory=list, description="TCP endpoints (host:port) the action may reach "
        "directly, such as its database: each is relayed to the same port on the "
        "container's loopback.")
    limits: ActionLimits = Field(default_factory=ActionLimits)
    approvers: list[str] = Field(default_factory=list)
    enabled: bool = True

    @field_validator("params")
    @classmethod
    def _schema(cls, v: dict[str, Any]) -> dict[str, Any]:
        import jsonschema

        try:
            jsonschema.Draft202012Validator.check_schema(v)
        except jsonschema.SchemaError as exc:
            raise ValueError(f"params is not a valid JSON Schema: {exc.message}") from None
        if v.get("type") != "object":
            raise ValueError("params must be a schema of type object")
        return v

    @model_validator(mode="after")
    def _owner(self) -> Action:
        cred = self.credential
        if cred is not None and cred.engine == "database" and self.tier is not Tier.READ \
                and not cred.owner:
            raise ValueError(f"a {self.tier.value} action's database credential needs owner: "
                             "the role that owns the schema's tables and inherits what the "
                             "action creates (never the engine's own account)")
        return self

    @model_validator(mode="after")
    def _names(self) -> Action:
        props = self.params.get("properties") or {}
        for element in self.argv:
            for name in placeholders(element):
                if name not in props:
                    raise ValueError(f"argv names {{{name}}}, which params does not declare")
        if self.plan is not None:
            if self.plan.param not in props:
                raise ValueError(f"plan.param {self.plan.param!r} is not a declared parameter")
            if self.plan.param not in (self.params.get("required") or []):
                raise ValueError(f"plan.param {self.plan.param!r} must be a required parameter")
        return self


class ActionOverride(Strict):
    """What a lower layer says about an action declared above: it may switch it
    off or narrow it (``spec.layers`` judges each field); every field is
    optional and checked as in ``Action``."""

    description: str | None = Field(default=None, min_length=1, max_length=500)
    tier: Tier | None = None
    image: str | None = Field(default=None, min_length=1, max_length=255,
                              pattern=r"^[A-Za-z0-9][A-Za-z0-9._/:@-]*$")
    argv: list[str] | None = None
    params: dict[str, Any] | None = None
    plan: ActionPlan | None = None
    credential: ActionCredential | None = None
    egress: list[EgressDomain] | None = None
    connect: list[HostPort] | None = None
    limits: ActionLimits | None = None
    approvers: list[str] | None = None
    enabled: bool | None = None


# a declaration names what the action runs; anything else only adjusts one
DECLARING = ("description", "tier", "image", "argv")


def _entry_kind(value: Any) -> str:
    if isinstance(value, ActionOverride):
        return "override"
    if isinstance(value, Action):
        return "declaration"
    if isinstance(value, dict) and not all(k in value for k in DECLARING):
        return "override"
    return "declaration"


ActionEntry = Annotated[
    Annotated[Action, Tag("declaration")] | Annotated[ActionOverride, Tag("override")],
    Discriminator(_entry_kind)]
