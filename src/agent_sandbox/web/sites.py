"""The repositories ``sandbox serve`` serves, read through their own queue and audit.

Each repository is one connected site (``approval.approver.find_repo``: the registry of
``sandbox init``, or this user's host-level site); its requests are read from its
``FolderQueue`` and its history from its audit log, every time (no copy, no cache).
A request is laid out as every other view lays it out: the bound fields whole
(``queue.shown.fields``) with each value also as a terminal or a page shows it
(``display.printable``), what approving does, and whether an approval would be
refused. Decisions go through ``approval.approver.Approver`` (``approver_for``); nothing
here writes a decision or a record.

A request that cannot be shown whole (parameters nested deeper than ``MAX_DEPTH``,
text that is not Unicode, a number JSON cannot carry) never hides the others: it is
listed as a stub that says why (``shown``), with ``cannot_show`` set, and the routes
refuse to approve it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from agent_sandbox.display import printable
from agent_sandbox.queue import FolderQueue, valid_id
from agent_sandbox.queue.shown import effect, fields, mismatch

MAX_DEPTH = 64  # nesting a shown request may have (far above any agent's tool call)
LISTED = ("pending", "decided", "done")  # the states the API lists
DONE_LIMIT = 200
RESULT_KEYS = ("status", "exit_code", "stdout", "stderr", "reason", "duration", "finished",
               "timed_out")
DECISION_KEYS = ("decision", "by", "at", "reason", "expires_at", "owner")


@dataclass(frozen=True)
class Located:
    repo: str
    queue: FolderQueue
    state: str  # pending, decided (approved, not yet run), running, done


def _site_queue(repo: str) -> FolderQueue:
    from agent_sandbox.queue import queue_for

    return queue_for(repo)


class Sites:
    """The served repositories, in the order given."""

    def __init__(self, repos: list[str]) -> None:
        from agent_sandbox.approval.approver import find_repo

        resolved: list[str] = []
        for r in repos:
            real = os.path.realpath(find_repo(r))
            if real not in resolved:
                resolved.append(real)
        self.repos = resolved
        self.queues = {r: _site_queue(r) for r in resolved}

    def locate(self, rid: str) -> Located | None:
        """The repository and state of ``rid``. A request moves between folders while
        it is looked for (a terminal record is written before the pending one goes), so
        a request found nowhere is looked for once more before it is called unknown."""
        if not valid_id(rid):
            return None
        for _ in range(2):
            for repo, q in self.queues.items():
                state = q.state(rid)
                if state is None:
                    continue
                if state == "pending" and os.path.exists(q.path("decided", rid)):
                    state = "decided"
                elif state == "claimed":
                    state = "running"
                return Located(repo, q, state)
        return None

    def view(self, rid: str) -> dict[str, Any] | None:
        where = self.locate(rid)
        if where is None:
            return None
        q = where.queue
        if where.state == "done":
            done = q.result(rid) or {}
            req = done.get("request") if isinstance(done.get("request"), dict) else {}
            return shown(request_view(where.repo, "done", req or {"id": rid},
                                      done.get("decision"), done))
        req = q.request(rid)
        if req is None:  # finished between the two reads
            return self.view(rid) if q.state(rid) == "done" else None
        return shown(request_view(where.repo, where.state, req, q.decision(rid), None))

    def listing(self, state: str, limit: int = DONE_LIMIT) -> list[dict[str, Any]]:
        """``pending``: waiting for a human, oldest first; ``decided``: approved (or
        running), not finished; ``done``: finished, newest first, at most ``limit``."""
        out: list[dict[str, Any]] = []
        for repo, q in self.queues.items():
            if state == "pending":
                out += [shown(request_view(repo, "pending", r, None, None))
                        for r in q.pending()]
            elif state == "decided":
                decided = set(q.ids("decided"))
                for rid in [*q.ids("pending"), *q.ids("claimed")]:
                    if rid in decided or q.state(rid) == "claimed":
                        v = self.view(rid)
                        if v is not None and v["state"] in ("decided", "running"):
                            out.append(v)
            else:
                for rid in q.ids("done")[-limit:]:
                    done = q.result(rid)
                    if done is None:
                        continue
                    req = done.get("request") if isinstance(done.get("request"), dict) else {}
                    out.append(shown(request_view(repo, "done", req or {"id": rid},
                                                  done.get("decision"), done)))
        if state == "done":
            out.sort(key=lambda v: str(v["id"]), reverse=True)
            return out[:limit]
        out.sort(key=lambda v: str(v["id"]))
        return out

    def approver_for(self, repo: str, user: str) -> Any:
        """The one implementation of deciding, as ``user``, through the web."""
        from agent_sandbox.approval.approver import Approver

        return Approver(repo, user=user, via="web")

    def counts(self) -> dict[str, dict[str, int]]:
        return {repo: q.counts() for repo, q in self.queues.items()}


def request_view(repo: str, state: str, req: dict[str, Any], decision: Any,
                 done: dict[str, Any] | None) -> dict[str, Any]:
    """One request as the API shows it (pure)."""
    reasons = [str(x) for x in (req.get("reasons") or [])] if isinstance(
        req.get("reasons"), list) else []
    dec = None
    if isinstance(decision, dict):
        dec = {k: decision.get(k) for k in DECISION_KEYS}
        dec = {k: (str(v) if k in ("decision", "by", "reason", "owner") and v is not None
                   else v) for k, v in dec.items()}
    result = None
    if done is not None:
        result = {k: done.get(k) for k in RESULT_KEYS}
        for k in ("stdout", "stderr", "reason", "status"):
            if result[k] is not None:
                result[k] = str(result[k])
        result["stdout_shown"] = _lines(result["stdout"])
        result["stderr_shown"] = _lines(result["stderr"])
    created = req.get("created")
    return {
        "id": str(req.get("id", "")),
        "repo": repo,
        "state": state,
        "created": float(created) if isinstance(created, int | float) else None,
        "agent": _text(req.get("agent")),
        "kind": _text(req.get("kind")),
        "mode": _text(req.get("mode")) or "run",
        "tool": _text(req.get("tool")),
        "params": req.get("params"),
        "cwd": _text(req.get("cwd")),
        "hash": _text(req.get("hash")),
        "risk": _text(req.get("risk")),
        "reasons": reasons,
        "why": printable("; ".join(reasons)),
        "fields": [{"name": n, "value": v, "shown": printable(v)} for n, v in
                   _safe_fields(req)],
        "effect": effect(req),
        "refused": mismatch(req),
        "decision": dec,
        "result": result,
        "cannot_show": None,
    }


STUB_TEXT = ("id", "repo", "state", "agent", "kind", "mode", "tool", "hash", "risk")


def shown(view: dict[str, Any]) -> dict[str, Any]:
    """``view`` as it is sent, or, when it cannot be sent whole, a stub that says why
    (its identity kept, every text escaped, nothing of its call) (pure)."""
    why = unshowable(view)
    if why is None:
        return view
    stub: dict[str, Any] = {k: None if view.get(k) is None else printable(str(view[k]))
                            for k in STUB_TEXT}
    stub.update(created=view.get("created") if isinstance(view.get("created"), float)
                and view["created"] == view["created"] else None,
                params=None, cwd=None, reasons=[], why="", fields=[], effect="",
                refused=f"this request cannot be shown whole ({why}): it cannot be approved "
                        "here; deny it, or look at it with `sandbox pending`",
                decision=None, result=None, cannot_show=why)
    return stub


def unshowable(value: Any) -> str | None:
    """Why ``value`` cannot be sent as JSON whole, or None (pure)."""
    import json

    if too_deep(value, MAX_DEPTH):
        return f"its parameters nest deeper than {MAX_DEPTH} levels"
    try:
        json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except UnicodeEncodeError:
        return "it holds text that is not Unicode (a lone surrogate)"
    except ValueError:
        return "it holds a number JSON cannot carry (NaN or infinity)"
    except (TypeError, RecursionError) as exc:
        return f"it cannot be encoded ({type(exc).__name__})"
    return None


def too_deep(value: Any, limit: int) -> bool:
    """Whether lists and objects in ``value`` nest deeper than ``limit`` (pure; no
    recursion, so any depth is measured)."""
    todo: list[tuple[Any, int]] = [(value, 0)]
    while todo:
        item, depth = todo.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth >= limit:
            return True
        todo.extend((c, depth + 1) for c in children)
    return False


def _lines(output: str | None) -> str:
    """Output as a page shows it: each line escaped, the lines kept apart."""
    return "\n".join(printable(line) for line in (output or "").rstrip("\n").split("\n"))


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _safe_fields(req: dict[str, Any]) -> list[tuple[str, str]]:
    try:
        return fields(req)
    except (TypeError, ValueError, RecursionError):
        return [("(params)", "cannot be shown")]


# -- the audit ----------------------------------------------------------------------

TIMELINE_SKIP = frozenset({"seq", "ts", "event", "request_id", "verdict", "prev", "hash", "by"})


def trail(repo: str, rid: str) -> list[dict[str, Any]]:
    """The audit records of request ``rid`` in ``repo``'s log, in order, each with a
    one-line ``detail`` as a page shows it (``display.printable``)."""
    import json

    from agent_sandbox.audit.query import iter_records, log_path
    from agent_sandbox.audit.storage import AuditError
    from agent_sandbox.repo_layout import Site

    try:
        path = log_path(Site(repo).audit)
    except AuditError:
        return []
    out = []
    for rec in iter_records(path):
        if rec.get("request_id") != rid:
            continue
        parts = []
        for k in sorted(rec):
            if k in TIMELINE_SKIP:
                continue
            v = rec[k]
            try:
                text = v if isinstance(v, str) else json.dumps(v, sort_keys=True)
            except (TypeError, ValueError, RecursionError):
                text = "(cannot be shown)"
            parts.append(f"{k}={text}")
        seq = rec.get("seq")
        entry = {"seq": seq if isinstance(seq, int) else None, "ts": _text(rec.get("ts")),
                 "event": str(rec.get("event", "")), "verdict": _text(rec.get("verdict")),
                 "by": _text(rec.get("by")), "detail": printable(" ".join(parts)),
                 "record": rec}
        why = unshowable(entry)
        if why is not None:  # one record that cannot be sent never hides the others
            entry = {k: None if entry[k] is None else printable(str(entry[k]))
                     for k in ("ts", "event", "verdict", "by")} | {
                "seq": entry["seq"], "record": {},
                "detail": f"this record cannot be shown whole ({why})"}
        out.append(entry)
    return out


def verify_log(repo: str) -> dict[str, Any]:
    """``sandbox audit verify`` of ``repo``'s log, against the pinned key."""
    from agent_sandbox.audit import verify
    from agent_sandbox.audit.repo import pinned_verifier
    from agent_sandbox.errors import SandboxError
    from agent_sandbox.repo_layout import Site

    directory = Site(repo).audit
    pinned = pinned_verifier(directory)
    try:
        if not os.path.isfile(os.path.join(directory, "audit.jsonl")):
            return {"repo": repo, "ok": True, "records": 0, "anchored": False,
                    "problem": None, "warnings": ["no records yet"]}
        result = verify(directory, verifier=pinned[1] if pinned else None)
    except SandboxError as exc:
        return {"repo": repo, "ok": False, "records": 0, "anchored": False,
                "problem": printable(str(exc)), "warnings": []}
    d = result.as_dict()
    problem = d["problem"]
    return {"repo": repo, "ok": bool(d["ok"]), "records": int(d["records"]),
            "anchored": bool(d["anchored"]),
            "problem": None if problem is None else printable(
                f"{problem['kind']} at line {problem['line']}: {problem['reason']}"),
            "warnings": [printable(w) for w in d["warnings"]]}


def last_host_verify() -> dict[str, Any] | None:
    """What the last ``sandbox verify`` of this account found (``last_verify``)."""
    from agent_sandbox.last_verify import read_last

    return read_last()


def last_drift_check() -> dict[str, Any] | None:
    """What the host's last drift check found (root's record, ``last_verify``)."""
    from agent_sandbox.last_verify import read_drift

    return read_drift()
