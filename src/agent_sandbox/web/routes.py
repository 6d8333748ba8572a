"""The REST endpoints of ``sandbox serve`` (everything under ``/api`` but the events).

Every endpoint but the login's two steps needs credentials (``require``, after
``guard`` already refused a request without them): the approvers' bearer token in an
``Authorization: Bearer`` header, or a dashboard session (``Authorization: Session``,
from ``login``), never a cookie, so no other site can make a browser approve (and a
request that names another origin is refused besides). Approve and deny go through
``approval.approver.Approver``, as ``sandbox approve``/``deny`` do: single use, bound to the hash
the approver saw (a request that changed since is a 409), expiring, audited with the
approver's identity and ``via: web``. Bad input is a precise 4xx and changes nothing:
the state is checked before the approver is asked, and the approver refuses whatever
changed in between; every 422 names the field and the problem and never echoes the
input (``problems``). A request that cannot be shown whole is never approved here.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from agent_sandbox.display import printable

from . import schemas as s
from .auth import Bearer, Identity, from_header
from .login import Login, from_session_header
from .sites import Sites, last_drift_check, last_host_verify, trail, verify_log

RequestId = Annotated[str, Path(pattern=s.ID_PATTERN, description="A request id.")]


def same_origin(request: Request) -> bool:
    """Whether the request's ``Origin`` (when a browser sent one) is this server (pure)."""
    origin = request.headers.get("origin")
    if origin is None:
        return True
    host = request.headers.get("host", "")
    return origin in (f"http://{host}", f"https://{host}")


BEARER = HTTPBearer(auto_error=False, description="The token in the file `sandbox serve` "
                                                  "printed (never a cookie).")


def identify(value: str | None, bearer: Bearer, login: Login | None) -> Identity | None:
    """Who an ``Authorization`` header names: a bearer token, or a dashboard session."""
    token = from_header(value)
    if token:
        return bearer.identify(token)
    sid = from_session_header(value)
    return login.identify(sid) if sid and login is not None else None


def require(request: Request,
            _: Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)] = None
            ) -> Identity:
    """The identity of a request's credentials; 401 without valid ones, 403 when a
    browser sent them from another origin. (``BEARER`` only documents the scheme.)"""
    ident = identify(request.headers.get("authorization"), request.app.state.bearer,
                     request.app.state.login)
    if ident is None:
        raise HTTPException(401, "a valid bearer token is required (Authorization: Bearer "
                                 "TOKEN, from the token file `sandbox serve` printed)",
                            headers={"WWW-Authenticate": "Bearer"})
    if not same_origin(request):
        raise HTTPException(403, "requests from another origin are refused")
    return ident


Auth = Annotated[Identity, Depends(require)]


def closed_query(request: Request) -> None:
    """422 for a query parameter the endpoint does not take (a misspelt filter must not
    quietly list everything)."""
    allowed: set[str] = set()
    todo = [getattr(request.scope.get("route"), "dependant", None)]
    while todo:  # the endpoint's query parameters and those of its dependencies
        dependant = todo.pop()
        if dependant is not None:
            allowed.update(p.alias for p in dependant.query_params)
            todo.extend(dependant.dependencies)
    unknown = sorted(set(request.query_params) - allowed)
    if unknown:
        raise HTTPException(422, [{"loc": ["query", printable(k)],
                                   "msg": "unknown query parameter",
                                   "type": "extra_forbidden"} for k in unknown])


def problems(errors: Any) -> list[dict[str, Any]]:
    """A validation failure as a 422 shows it (pure): where and what, each text escaped
    (``display.printable``), never the input itself (it may not even be Unicode)."""
    out: list[dict[str, Any]] = []
    for e in errors if isinstance(errors, list | tuple) else []:
        e = e if isinstance(e, dict) else {}
        loc = [x if isinstance(x, int) else printable(str(x)) for x in e.get("loc", ())]
        out.append({"loc": loc, "msg": printable(str(e.get("msg", "invalid"))),
                    "type": printable(str(e.get("type", "invalid")))})
    return out or [{"loc": [], "msg": "invalid input", "type": "invalid"}]


def _sites(request: Request) -> Sites:
    sites: Sites = request.app.state.sites
    return sites


router = APIRouter(prefix="/api", responses=s.ERRORS, dependencies=[Depends(closed_query)])


@router.get("/requests", response_model=list[s.RequestView])
def list_requests(request: Request, ident: Auth,
                  state: Annotated[s.StateName, Query()] = "pending",
                  limit: Annotated[int, Query(ge=1, le=1000)] = 200) -> list[dict[str, Any]]:
    """Requests waiting for a decision (``pending``), approved and not yet finished
    (``decided``), or finished (``done``, newest first)."""
    return _sites(request).listing(state, limit)


@router.get("/requests/{rid}", response_model=s.RequestView, responses=s.NOT_FOUND)
def get_request(request: Request, ident: Auth, rid: RequestId) -> dict[str, Any]:
    """One request: the exact call (every bound field), the policy's reasons, the risk,
    the repository and the agent, its decision and its result."""
    view = _sites(request).view(rid)
    if view is None:
        raise HTTPException(404, f"no request {rid} in the served repositories")
    return view


def _decide(request: Request, ident: Identity, rid: str, seen: str, verb: str,
            reason: str = "") -> dict[str, Any]:
    from agent_sandbox.approval.approver import ApprovalError, NotAnApproverError

    sites = _sites(request)
    where = sites.locate(rid)
    if where is None:
        raise HTTPException(404, f"no request {rid} in the served repositories")
    if where.state == "done":
        status = (where.queue.result(rid) or {}).get("status", "finished")
        raise HTTPException(409, f"request {rid} is already finished ({status})")
    if where.state != "pending":
        raise HTTPException(409, f"request {rid} was already decided")
    req = where.queue.request(rid) or {}
    if verb == "approve":
        view = sites.view(rid)
        if view is not None and view.get("cannot_show"):
            raise HTTPException(409, f"request {rid} cannot be shown whole "
                                     f"({view['cannot_show']}): it cannot be approved here; "
                                     "deny it, or look at it with `sandbox pending`")
    if req.get("hash") != seen:
        raise HTTPException(409, f"request {rid} changed since it was displayed (its hash is "
                                 f"{str(req.get('hash'))[:12]}, you saw {seen[:12]}): look "
                                 "at it again")
    try:
        approver = sites.approver_for(where.repo, ident.user)
    except NotAnApproverError as exc:
        raise HTTPException(403, str(exc)) from None
    except ApprovalError as exc:
        raise HTTPException(409, str(exc)) from None
    try:
        if verb == "approve":
            dec = approver.approve(rid, seen_hash=seen)
        else:
            dec = approver.deny(rid, reason, seen_hash=seen)
    except NotAnApproverError as exc:
        raise HTTPException(403, str(exc)) from None
    except ApprovalError as exc:
        raise HTTPException(409, str(exc)) from None
    return {"id": rid, "decision": verb, "by": ident.user, "hash": dec.get("hash"),
            "expires_at": dec.get("expires_at")}


@router.post("/requests/{rid}/approve", response_model=s.DecisionResult,
             responses={**s.NOT_FOUND, **s.CONFLICT})
def approve(request: Request, ident: Auth, rid: RequestId, body: s.ApproveBody
            ) -> dict[str, Any]:
    """Approve one pending request as it was shown (``hash``): single use, bound to its
    exact tool, parameters and folder, expiring. The same as ``sandbox approve``."""
    return _decide(request, ident, rid, body.hash, "approve")


@router.post("/requests/{rid}/deny", response_model=s.DecisionResult,
             responses={**s.NOT_FOUND, **s.CONFLICT})
def deny(request: Request, ident: Auth, rid: RequestId, body: s.DenyBody) -> dict[str, Any]:
    """Deny one pending request as it was shown, with a reason the agent is told."""
    return _decide(request, ident, rid, body.hash, "deny", body.reason)


def _login(request: Request) -> Login:
    login: Login | None = request.app.state.login
    if login is None:
        raise HTTPException(404, "this server has no dashboard login (its credentials are "
                                 "not a shared token): send Authorization: Bearer")
    return login


@router.post("/login/challenge", response_model=s.ChallengeView, responses=s.NOT_FOUND)
def login_challenge(request: Request, body: s.ChallengeBody) -> dict[str, Any]:
    """The dashboard's login, step one: the server's nonce and its proof that it holds
    the token. The page checks the proof before it answers (the token itself is never
    sent)."""
    if not same_origin(request):
        raise HTTPException(403, "requests from another origin are refused")
    got = _login(request).challenge(body.origin, body.client_nonce)
    if got is None:
        raise HTTPException(403, "that origin is not this server's: open the dashboard at "
                                 "the address `sandbox serve` printed")
    return {"server_nonce": got[0], "server_proof": got[1]}


@router.post("/login", response_model=s.SessionView)
def login_answer(request: Request, body: s.LoginBody) -> dict[str, Any]:
    """The dashboard's login, step two: the page's proof over the challenge; a session
    that lives in this process's memory only."""
    from .login import SESSION_TTL

    if not same_origin(request):
        raise HTTPException(403, "requests from another origin are refused")
    login = _login(request)
    sid = login.answer(body.server_nonce, body.proof)
    ident = login.identify(sid) if sid else None
    if sid is None or ident is None:
        raise HTTPException(401, "the proof was refused: a wrong token, or a challenge that "
                                 "expired or was used already (ask for a new one)",
                            headers={"WWW-Authenticate": "Bearer"})
    return {"session": sid, "expires_in": SESSION_TTL, "user": ident.user}


@router.get("/audit", response_model=s.AuditTrail, responses=s.NOT_FOUND)
def audit(request: Request, ident: Auth,
          rid: Annotated[str, Query(alias="request", pattern=r"^[0-9A-Za-z_\-]{1,80}$")]
          ) -> dict[str, Any]:
    """The audit records of one request, in order (``sandbox audit show --request``)."""
    sites = _sites(request)
    where = sites.locate(rid)
    repos = [where.repo] if where is not None else sites.repos
    for repo in repos:
        entries = trail(repo, rid)
        if entries:
            return {"request": rid, "repo": repo, "entries": entries}
    if where is None:
        raise HTTPException(404, f"no request {rid} in the served repositories or their audit")
    return {"request": rid, "repo": where.repo, "entries": []}


@router.get("/audit/verify", response_model=s.VerifyReport)
def audit_verify(request: Request, ident: Auth) -> dict[str, Any]:
    """Each served repository's audit chain, verified against its pinned key."""
    logs = [verify_log(r) for r in _sites(request).repos]
    return {"ok": all(x["ok"] for x in logs), "logs": logs}


@router.get("/status", response_model=s.Status)
def status(request: Request, ident: Auth) -> dict[str, Any]:
    """The served repositories, their queue depth, this host's last verify and its last
    drift check."""
    counts = _sites(request).counts()
    return {"user": ident.user,
            "repositories": [{"repo": r, "queue": c} for r, c in counts.items()],
            "last_verify": last_host_verify(), "last_drift_check": last_drift_check()}
