"""The human side of the approval loop: decide on queued requests.

``Approver(repo)`` lists pending requests and approves, denies or always-allows
them (the functions behind ``sandbox approve``/``deny``/``pending``, the web
dashboard and the keys of ``sandbox watch``). The interactive terminal is its own
view over this (``approval.watch``); nothing here draws.

Approving is out of band: nothing here is reachable from an agent's tools
(the policy engine denies ``sandbox approve`` and writes under ``.sandbox/``),
and an approval only ever names one request id, bound to that request's hash.
It never approves anything by itself.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from typing import Any

from ..atomic_file import replace_file
from ..audit.repo import audit
from ..errors import SandboxError
from ..policy.decision import PolicyError
from ..policy.engine import Policy
from ..queue import FolderQueue, QueueError, alive, queue_for
from ..repo_layout import REMEMBERED, STATE, under
from .executor import recover_and_run, spawn_runner


class ApprovalError(SandboxError):
    """An approval action was refused; the message says why."""


class NotAnApproverError(ApprovalError):
    """The account may not decide this request (not among the policy's approvers)."""


def find_repo(start: str) -> str:
    """The connected repository at or above ``start`` (the registry of
    ``sandbox init``, as the hook asks it); else, on a host whose managed policy
    sends escalations to this user's host-level queue, that queue's site
    (``repo_layout.Site``). Never a ``.sandbox/`` merely found on the way up:
    one planted in a subfolder would bring its own queue, policy and settings."""
    from ..policy.registry import repository_of
    from ..repo_layout import Site, host_site
    from ..state_paths import account_home

    repo = repository_of(os.path.abspath(start), account_home())
    if repo is not None:
        return repo
    if os.path.isdir(Site(host_site()).queue):
        return host_site()
    raise ApprovalError(f"no repository connected with `sandbox init` at or above {start} "
                        "and no host-level queue: run `sandbox init DIR` first")


class Approver:
    def __init__(self, repo: str, *, user: str | None = None, via: str | None = None) -> None:
        """``user``: the approver recorded with each decision (default: this process's
        account); ``via``: the channel it came through, recorded with it too (``web``)."""
        self.repo = find_repo(repo)
        self.queue: FolderQueue = queue_for(self.repo)
        self.user = user or account_name()
        self.via = {"via": via} if via else {}
        self.policy_doc = self._policy_doc()
        try:
            self.policy = Policy(self.policy_doc, repo=self.repo,
                                 home=os.path.expanduser("~"))
        except PolicyError as exc:
            raise ApprovalError(f"the policy for {self.repo} is invalid: {exc}") from None
        approvers = (self.policy_doc.get("approvals") or {}).get("approvers") or []
        if approvers and self.user not in approvers and os.geteuid() != 0:
            raise NotAnApproverError(f"{self.user} is not among approvals.approvers "
                                f"({', '.join(approvers)})")

    def _policy_doc(self) -> dict[str, Any]:
        from ..repo_layout import Site

        path = Site(self.repo).policy
        try:
            with open(path, "rb") as fh:
                doc = json.loads(fh.read())
        except (OSError, ValueError) as exc:
            raise ApprovalError(f"cannot read {path}: {exc}") from None
        if not isinstance(doc, dict):
            raise ApprovalError(f"{path} is not a JSON object")
        return doc

    def recover(self) -> list[str]:
        return recover_and_run(self.repo)

    def pending(self) -> list[dict[str, Any]]:
        return self.queue.pending()

    def _resolve(self, rid: str) -> str:
        if _valid(rid) and self.queue.state(rid) is not None:
            return rid
        matches = [r for r in self.queue.ids("pending") if r.endswith(rid) or r.startswith(rid)]
        if len(matches) == 1:
            return matches[0]
        if not matches:
            raise ApprovalError(f"no pending request {rid!r} (see `sandbox pending`)")
        raise ApprovalError(f"{rid!r} matches {len(matches)} requests; give more of the id")

    def approve(self, rid: str, *, always: bool = False, ttl: float | None = None,
                seen_hash: str | None = None, scope: str = "exact") -> dict[str, Any]:
        """Approve ``rid`` as it was shown: ``seen_hash`` is the hash of the
        request the approver looked at (refused if it changed since). With
        ``always``, also remember exactly this call (``scope`` "exact"), or this
        call in any directory of the repository (``scope`` "anywhere")."""
        from ..policy.remember import REMEMBER_SCOPES

        if scope not in REMEMBER_SCOPES:
            raise ApprovalError(f"unknown scope {scope!r} (one of {', '.join(REMEMBER_SCOPES)})")
        from ..repo_layout import Site

        if always and Site(self.repo).host:
            raise ApprovalError("--always needs a connected repository; the host-level queue "
                                "approves one call at a time")
        rid = self._resolve(rid)
        req = self.queue.request(rid)
        if req is None:
            raise ApprovalError(f"no pending request {rid}")
        if req.get("kind") == "action":
            self._may_approve_action(req, always)
        try:
            dec = self.queue.decide(rid, "approve", by=self.user, remember=always,
                                    ttl=self.policy.ttl if ttl is None else ttl,
                                    expect_hash=seen_hash or str(req.get("hash")))
        except QueueError as exc:
            raise ApprovalError(str(exc)) from None
        audit(self.repo, "approval", request_id=rid, by=self.user, uid=os.geteuid(),
              always=always, scope=scope if always else None,
              request_hash=dec.get("hash"), **self.via)
        if always:
            self.remember(req, scope)
        if req is not None and req.get("mode", "run") == "run":
            requester = req.get("requester") or {}
            if not alive(requester.get("pid"), requester.get("start")):
                spawn_runner(self.repo, rid)  # nobody waiting: run it now, detached
        return dec

    def _may_approve_action(self, req: dict[str, Any], always: bool) -> None:
        """An action is approved one call at a time, by one of its approvers (as
        the repository's policy names them now, not as the request says)."""
        from ..actions.catalog import get

        if always:
            raise ApprovalError("an action is approved one call at a time (no --always)")
        name = str((req.get("params") or {}).get("action", ""))
        try:
            approvers = get(self.repo, name).approvers
        except SandboxError as exc:
            raise ApprovalError(f"cannot approve action {name!r}: {exc}") from None
        if approvers and self.user not in approvers:
            raise NotAnApproverError(f"{self.user} may not approve action {name!r} "
                                f"(its approvers: {', '.join(approvers)})")

    def deny(self, rid: str, reason: str = "", *, seen_hash: str | None = None
             ) -> dict[str, Any]:
        """Deny ``rid``; with ``seen_hash``, only the request as it was shown."""
        rid = self._resolve(rid)
        try:
            dec = self.queue.decide(rid, "deny", by=self.user, reason=reason or "denied",
                                    expect_hash=seen_hash)
        except QueueError as exc:
            raise ApprovalError(str(exc)) from None
        audit(self.repo, "denial", request_id=rid, by=self.user, uid=os.geteuid(), reason=reason,
              **self.via)
        return dec

    def remember(self, req: dict[str, Any], scope: str = "exact") -> None:
        """Always allow this exact call in this repository (until remember_ttl):
        bound to the tool, its arguments and content, and (scope "exact") its
        working directory (``policy.remember.remembered_key``)."""
        from ..policy.remember import remembered_key

        key = remembered_key(str(req.get("tool")), req.get("params"), str(req.get("cwd")),
                             scope)
        state = under(self.repo, STATE)
        os.makedirs(state, exist_ok=True)
        path = under(self.repo, REMEMBERED)
        with open(os.path.join(state, ".remembered.lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                with open(path, "rb") as fh:
                    data = json.loads(fh.read())
            except (OSError, ValueError):
                data = {}
            now = time.time()
            entries = [e for e in (data.get("entries") or [])
                       if isinstance(e, dict) and float(e.get("expires", 0)) > now]
            entries.append({"key": key, "scope": scope, "kind": req.get("kind"),
                            "subject": req.get("summary"), "cwd": req.get("cwd"),
                            "repo": self.repo, "tool": req.get("tool"), "by": self.user,
                            "request_id": req.get("id"), "created": now,
                            # a command: the tree it was approved with (``queue.content``)
                            "content": req.get("content"),
                            "expires": now + self.policy.remember_ttl})
            replace_file(path, json.dumps({"entries": entries}, indent=2).encode())


def account_name(uid: int | None = None) -> str:
    """The approver's identity: the account of the process's effective uid
    (never $USER or $LOGNAME, which anyone can set)."""
    import pwd

    uid = os.geteuid() if uid is None else uid
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid:{uid}"


def _valid(rid: str) -> bool:
    from ..queue import valid_id

    return valid_id(rid)


def age(ts: Any) -> str:
    try:
        s = max(0, int(time.time() - float(ts)))
    except (TypeError, ValueError):
        return "?"
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    return f"{s // 3600}h"

