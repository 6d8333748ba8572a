"""The documents of the web API, as pydantic models: what ``/openapi.json`` publishes
and what every response is checked against.

Bodies are closed (an unknown key is a 422) and bounded; a request hash is exactly 64
lowercase hex characters. Declarations only: nothing here reads or decides anything.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .login import CHALLENGE_TTL, CLIENT, NONCE_PATTERN, PROOF_PATTERN, SERVER

HASH_PATTERN = r"^[0-9a-f]{64}$"
ID_PATTERN = r"^[0-9A-Za-z][0-9A-Za-z\-]{19,39}$"  # queue.records.valid_id
StateName = Literal["pending", "decided", "done"]


class Closed(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ApproveBody(Closed):
    hash: str = Field(pattern=HASH_PATTERN,
                      description="The request hash the approver saw; a request whose hash "
                                  "changed since is refused (409).")


class DenyBody(Closed):
    hash: str = Field(pattern=HASH_PATTERN, description="The request hash the approver saw.")
    reason: str = Field(default="", max_length=2000, description="Told to the agent.")

    @field_validator("reason")
    @classmethod
    def _unicode(cls, value: str) -> str:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("the reason holds text that is not Unicode (a lone "
                             "surrogate)") from None
        return value


class ChallengeBody(Closed):
    origin: str = Field(max_length=300, description="The origin the dashboard was loaded "
                                                    "from; it must be this server's.")
    client_nonce: str = Field(pattern=NONCE_PATTERN, description="A fresh random nonce "
                                                                 "(base64url).")


class ChallengeView(BaseModel):
    server_nonce: str = Field(description="Answer with a proof over it, once, within "
                                          f"{int(CHALLENGE_TTL)} s.")
    server_proof: str = Field(description="HMAC-SHA256(token, "
                                          f"'{SERVER}|origin|server_nonce|client_nonce'), hex: "
                                          "the server holds the token.")


class LoginBody(Closed):
    server_nonce: str = Field(pattern=NONCE_PATTERN, description="From the challenge.")
    proof: str = Field(pattern=PROOF_PATTERN, description=(
        f"HMAC-SHA256(token, '{CLIENT}|origin|server_nonce|client_nonce'), hex."))


class SessionView(BaseModel):
    session: str = Field(description="Send as Authorization: Session ID, and as the "
                                     "WebSocket's first message {\"session\": ID}.")
    expires_in: float = Field(description="Seconds this session lives (in this process "
                                          "only: a restart ends it).")
    user: str


class Field_(BaseModel):
    name: str
    value: str = Field(description="The raw text, as hashed and run.")
    shown: str = Field(description="The same text with every hiding character escaped.")


class DecisionView(BaseModel):
    decision: str | None = None
    by: str | None = None
    at: float | None = None
    reason: str | None = None
    expires_at: float | None = None
    owner: str | None = None


class ResultView(BaseModel):
    status: str | None = None
    exit_code: int | None = None
    stdout: str | None = None
    stderr: str | None = None
    stdout_shown: str = ""
    stderr_shown: str = ""
    reason: str | None = None
    duration: float | None = None
    finished: float | None = None
    timed_out: bool | None = None


class RequestView(BaseModel):
    id: str
    repo: str
    state: Literal["pending", "decided", "running", "done"]
    created: float | None = None
    agent: str | None = None
    kind: str | None = None
    mode: str | None = None
    tool: str | None = None
    params: Any = Field(default=None, description="The parameters as stored (bound).")
    cwd: str | None = None
    hash: str | None = None
    risk: str | None = None
    reasons: list[str] = Field(default_factory=list)
    why: str = Field(default="", description="The policy's reasons, escaped for display.")
    fields: list[Field_] = Field(default_factory=list,
                                 description="Every bound field whole, in display order.")
    effect: str = ""
    refused: str | None = Field(default=None,
                                description="Why an approval would be refused, or null.")
    decision: DecisionView | None = None
    result: ResultView | None = None
    cannot_show: str | None = Field(
        default=None, description="Why this request cannot be shown whole (it is a stub "
                                   "then, and cannot be approved here), or null.")


class DecisionResult(BaseModel):
    id: str
    decision: Literal["approve", "deny"]
    by: str
    hash: str | None = None
    expires_at: float | None = None


class AuditEntry(BaseModel):
    seq: int | None = None
    ts: str | None = None
    event: str
    verdict: str | None = None
    by: str | None = None
    detail: str = Field(description="The record's other fields on one line, escaped.")
    record: dict[str, Any]


class AuditTrail(BaseModel):
    request: str
    repo: str | None = None
    entries: list[AuditEntry]


class ChainStatus(BaseModel):
    repo: str
    ok: bool
    records: int
    anchored: bool
    problem: str | None = None
    warnings: list[str] = Field(default_factory=list)


class VerifyReport(BaseModel):
    ok: bool
    logs: list[ChainStatus]


class QueueDepth(BaseModel):
    pending: int
    approved: int
    running: int
    done: int


class RepoStatus(BaseModel):
    repo: str
    queue: QueueDepth


class HostVerify(BaseModel):
    at: float
    passed: int
    total: int
    failed: list[str]


class DriftedFile(BaseModel):
    target: str
    problem: str = Field(description="missing, modified or mode.")
    detail: str


class FailedCheck(BaseModel):
    name: str
    detail: str


class DriftCheck(BaseModel):
    """The host's last drift check (``last_verify.DRIFT_KEYS``); only ``error`` is set
    when a record is there that cannot be trusted or read."""

    at: float | None = Field(default=None, description="When it ran (seconds since the epoch).")
    clean: bool = Field(default=False, description="Nothing drifted, every check passed.")
    drifted: list[DriftedFile] = Field(default_factory=list)
    failed_checks: list[FailedCheck] = Field(default_factory=list)
    checks: int = Field(default=0, description="Host checks run (0 with --files-only).")
    error: str | None = Field(default=None, description="Why it could not be made or read.")


class Status(BaseModel):
    user: str = Field(description="The approver identity the token names.")
    repositories: list[RepoStatus]
    last_verify: HostVerify | None = Field(
        default=None, description="This host's last `sandbox verify` (null: never run).")
    last_drift_check: DriftCheck | None = Field(
        default=None, description="This host's last `sandbox verify --drift`, the scheduled "
                                  "one (null: never run).")


class Problem(BaseModel):
    detail: str


class ValidationProblem(BaseModel):
    detail: Any


ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": Problem, "description": "The body is not JSON."},
    401: {"model": Problem, "description": "No valid bearer token."},
    403: {"model": Problem, "description": "Refused: the origin, or not an approver."},
    413: {"model": Problem, "description": "The body is too large."},
    422: {"model": ValidationProblem, "description": "Malformed input."},
}
NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": Problem, "description": "No such request."}}
CONFLICT: dict[int | str, dict[str, Any]] = {
    409: {"model": Problem, "description": "The request changed, was decided, finished, or "
                                           "its agent stopped waiting: nothing was changed."}}
