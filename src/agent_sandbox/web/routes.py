"""The REST endpoints of ``sandbox serve`` (everything under ``/api`` but the events).

Every endpoint needs the approvers' bearer token (``require``): an ``Authorization:
Bearer`` header, never a cookie, so no other site can make a browser approve (and a
request that names another origin is refused besides). Approve and deny go through
``approver.Approver``, as ``sandbox approve``/``deny`` do: single use, bound to the hash
the approver saw (a request that changed since is a 409), expiring, audited with the
approver's identity and ``via: web``. Bad input is a precise 4xx and changes nothing:
the state is checked before the approver is asked, and the approver refuses whatever
changed in between.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from . import schemas as s
from .auth import Bearer, Identity, from_header
from .sites import Sites, last_host_verify, trail, verify_log

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


def require(request: Request,
            _: Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)] = None
            ) -> Identity:
    """The identity of a request's bearer token; 401 without a valid one, 403 when a
    browser sent it from another origin. (``BEARER`` only documents the scheme.)"""
    token = from_header(request.headers.get("authorization"))
    bearer: Bearer = request.app.state.bearer
    ident = bearer.identify(token) if token else None
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
        raise HTTPException(422, [{"loc": ["query", k], "msg": "unknown query parameter",
                                   "type": "extra_forbidden"} for k in unknown])


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
    from agent_sandbox.approver import ApprovalError, NotAnApproverError

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
    """The served repositories, their queue depth, and this host's last verify."""
    counts = _sites(request).counts()
    return {"user": ident.user,
            "repositories": [{"repo": r, "queue": c} for r, c in counts.items()],
            "last_verify": last_host_verify()}
