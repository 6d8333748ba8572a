"""``FolderQueue``: the queue in one ``.sandbox/escalations`` directory, every
step an atomic file operation through the ``Seam`` (see the package docstring
for the layout and the guarantees).

Nothing here decides policy and nothing here runs a command: the executor
function is passed in (``approval.executor.execute_request``). ``queue_for`` finds
the queue of a repository or of the host-level site.
"""

from __future__ import annotations

import errno
import json
import os
import time

from .records import (
    BOUND,
    DECISIONS,
    STATES,
    TERMINAL,
    QueueError,
    hash_of,
    new_id,
    read_json,
    valid_id,
)
from .seam import REAL, Seam

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

_DECISION_STATUS = {"deny": "denied", "timeout": "timed_out", "cancel": "cancelled"}


class FolderQueue:
    """The queue in one ``.sandbox/escalations`` directory."""

    def __init__(self, root: str, seam: Seam = REAL) -> None:
        self.root = os.path.abspath(root)
        self.seam = seam

    def _rename(self, src: str, dst: str) -> None:
        self.seam.pause("rename", src)
        os.rename(src, dst)

    def _unlink(self, path: str) -> None:
        self.seam.pause("unlink", path)
        os.unlink(path)

    def _link(self, src: str, dst: str) -> None:
        self.seam.pause("link", dst)
        os.link(src, dst)

    # -- paths and primitives --------------------------------------------
    def dir(self, state: str) -> str:
        return os.path.join(self.root, state)

    def path(self, state: str, rid: str) -> str:
        if not valid_id(rid):
            raise QueueError(f"{rid!r} is not a request id")
        return os.path.join(self.root, state, rid + ".json")

    def ensure(self) -> None:
        for s in STATES:
            os.makedirs(self.dir(s), mode=0o700, exist_ok=True)

    def exists(self) -> bool:
        return all(os.path.isdir(self.dir(s)) for s in STATES)

    def _tmp(self, state: str, rid: str, data: dict[str, Any], sync: bool) -> str:
        tmp = os.path.join(self.dir(state), f".tmp-{rid}-{os.getpid()}-{os.urandom(4).hex()}")
        body = json.dumps(data, sort_keys=True, ensure_ascii=False).encode("utf-8",
                                                                            "surrogatepass")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, body)
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        return tmp

    def _create_once(self, state: str, rid: str, data: dict[str, Any], sync: bool = True
                     ) -> bool:
        """Create ``state/rid.json`` complete, or not at all if it exists."""
        tmp = self._tmp(state, rid, data, sync)
        try:
            self._link(tmp, self.path(state, rid))
            return True
        except FileExistsError:
            return False
        finally:
            try:
                os.unlink(tmp)
            except OSError:
                pass

    # -- reading ---------------------------------------------------------
    def ids(self, state: str) -> list[str]:
        try:
            names = os.listdir(self.dir(state))
        except OSError:
            return []
        return sorted(n[:-5] for n in names if n.endswith(".json") and not n.startswith("."))

    def request(self, rid: str) -> dict[str, Any] | None:
        for state in ("pending", "claimed", "done"):
            rec = read_json(self.path(state, rid))
            if rec is not None:
                return rec.get("request", rec) if state == "done" else rec
        return None

    def decision(self, rid: str) -> dict[str, Any] | None:
        """The decision on ``rid``, with ``uid``: the owner of the decision
        file, which says who decided whatever the record's ``by`` claims, and
        ``written_by_decide``: whether the file is what ``decide`` writes (a
        regular file, not a link, that only its owner may read or write)."""
        import stat

        try:
            fd = os.open(self.path("decided", rid),
                         os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            uid = st.st_uid
            ours = stat.S_ISREG(st.st_mode) and not st.st_mode & 0o077
            with os.fdopen(fd, "rb", closefd=False) as fh:
                data = json.loads(fh.read())
        except (OSError, ValueError):
            return None
        finally:
            os.close(fd)
        if not isinstance(data, dict):
            return None
        data["uid"] = uid
        data["written_by_decide"] = ours
        try:
            import pwd

            data["owner"] = pwd.getpwuid(uid).pw_name
        except (ImportError, KeyError):
            data["owner"] = f"uid:{uid}"
        return data

    def result(self, rid: str) -> dict[str, Any] | None:
        return read_json(self.path("done", rid))

    def state(self, rid: str) -> str | None:
        """done, claimed, pending (with or without a decision), or None."""
        for state in ("done", "claimed", "pending"):
            if os.path.exists(self.path(state, rid)):
                return state
        return None

    def pending(self) -> list[dict[str, Any]]:
        """Requests still waiting for a human (no decision yet), oldest first."""
        out = []
        decided = set(self.ids("decided"))
        for rid in self.ids("pending"):
            if rid in decided:
                continue
            rec = read_json(self.path("pending", rid))
            if rec is not None:
                out.append(rec)
        return out

    # -- the agent's own ids of its tool calls -----------------------------
    def bind_use(self, use_key: str, rid: str) -> str | None:
        """Bind the client's id of one tool call (``use_key``, from
        ``use_key_of``) to request ``rid``, once ever. Returns the request it
        was already bound to (a retried call), or None when ``rid`` won."""
        os.makedirs(self.dir("uses"), mode=0o700, exist_ok=True)
        if self._create_once("uses", use_key, {"id": rid, "at": time.time()}):
            return None
        prior = read_json(self.path("uses", use_key)) or {}
        return str(prior.get("id") or "") if valid_id(prior.get("id")) else ""

    # -- the life of a request -------------------------------------------
    def submit(self, request: dict[str, Any]) -> dict[str, Any]:
        """Store a new request; fills in id, hash, created and requester."""
        rec = dict(request)
        rec.setdefault("id", new_id())
        rid = rec["id"]
        if not valid_id(rid):
            raise QueueError(f"{rid!r} is not a request id")
        missing = [k for k in BOUND if k not in rec]
        if missing:
            raise QueueError(f"a request needs {', '.join(missing)}")
        rec["hash"] = hash_of(rec)
        # Nothing here is redacted: the parameters must stay exact (they are run), so
        # the record holds every secret the call does whatever else it says, and what
        # the approver is shown is the exact text that is hashed and run. The terminal
        # record in done/ and the audit log are redacted (finalize, append_audit).
        rec.setdefault("created", time.time())
        rec.setdefault("requester", self.seam.me())
        tmp = self._tmp("pending", rid, rec, sync=False)
        try:
            self._link(tmp, self.path("pending", rid))
        finally:
            os.unlink(tmp)
        return rec

    def decide(self, rid: str, decision: str, *, by: str = "", reason: str = "",
               ttl: float = 1800.0, remember: bool = False, expect_hash: str | None = None
               ) -> dict[str, Any]:
        """Record the one decision on a pending request. Raises QueueError when
        the request is gone or someone decided first (the message says what)."""
        if decision not in DECISIONS:
            raise QueueError(f"unknown decision {decision!r}")
        req = read_json(self.path("pending", rid))
        if req is None:
            done = self.result(rid)
            if done is not None:
                raise QueueError(f"request {rid} is already finished ({done.get('status')})")
            if os.path.exists(self.path("claimed", rid)):
                raise QueueError(f"request {rid} is already approved and running")
            raise QueueError(f"no pending request {rid}")
        if expect_hash is not None and req.get("hash") != expect_hash:
            raise QueueError(f"request {rid} changed since it was displayed (its hash is "
                             f"{str(req.get('hash'))[:12]}, you saw {expect_hash[:12]}): "
                             "look at it again")
        requester = req.get("requester") or {}
        if decision == "approve" and not req.get("detached") and not self.seam.alive(
                requester.get("pid"), requester.get("start")):
            try:
                self.decide(rid, "cancel", by="recovery",
                            reason="the agent's hook stopped waiting for it")
            except QueueError:
                pass
            raise QueueError(f"request {rid} was cancelled: the agent stopped waiting for it "
                             "(its hook ended); nothing ran")
        now = time.time()
        rec = {"id": rid, "decision": decision, "hash": req.get("hash"), "by": by,
               "uid": os.geteuid(), "seen_hash": expect_hash, "reason": reason, "at": now,
               "remember": bool(remember)}
        if decision == "approve":
            rec["expires_at"] = now + ttl
        if not self._create_once("decided", rid, rec):
            prior = self.decision(rid) or {}
            raise QueueError(f"request {rid} was already decided: {prior.get('decision', '?')}")
        if decision != "approve":
            self.finalize(rid, _DECISION_STATUS[decision], request=req, decision=rec)
        return rec

    def finalize(self, rid: str, status: str, *, request: dict[str, Any] | None = None,
                 decision: dict[str, Any] | None = None, **result: Any) -> bool:
        """Write the terminal record once; clean every other trace of ``rid``."""
        if status not in TERMINAL:
            raise QueueError(f"unknown terminal status {status!r}")
        from agent_sandbox.audit.redact import redact

        req = request or self.request(rid) or {"id": rid}
        rec = {"id": rid, "status": status, "request": req,
               "decision": decision or self.decision(rid), "finished": time.time(), **result}
        # the terminal record stays: secrets in the call or its output are
        # redacted like the audit log's (the hashes it carries are kept)
        won = self._create_once("done", rid, redact(rec))
        self._cleanup(rid)
        return won

    def _cleanup(self, rid: str) -> None:
        for p in (self.path("pending", rid), self.path("claimed", rid)):
            try:
                self._unlink(p)
            except OSError:
                pass
        cdir = self.dir("claimed")
        try:
            names = os.listdir(cdir)
        except OSError:
            return
        for n in names:
            if n.startswith(rid + ".") and not n.endswith(".json"):
                try:
                    self._unlink(os.path.join(cdir, n))
                except OSError:
                    pass

    def spent(self, rid: str) -> dict[str, Any] | None:
        """Who used the approval of ``rid`` and for what (None: nobody yet)."""
        return read_json(self.path("spent", rid))

    def _spend(self, rid: str, use: str, **why: Any) -> bool:
        """Use the approval of ``rid``, once ever: the exclusive creation of
        ``spent/<id>.json``, which nothing deletes. Only the process that wins
        this may run the command (``use`` "run"/"grant") or record that it was
        refused; whatever else moved the request's files around, a second
        winner is impossible."""
        os.makedirs(self.dir("spent"), mode=0o700, exist_ok=True)
        return self._create_once("spent", rid, {"id": rid, "use": use, "at": time.time(),
                                                **self.seam.me(), **why})

    def claim(self, rid: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """Take an approved request for execution. Returns (request, decision),
        or None when it is not ours to run (not approved, already used or
        finished, hash mismatch, expired: the last two are finalized here)."""
        dec = self.decision(rid)
        if dec is None or dec.get("decision") != "approve":
            return None
        if self.spent(rid) is not None or os.path.exists(self.path("done", rid)):
            return None
        ident = self.seam.me()
        owner = os.path.join(self.dir("claimed"), f"{rid}.owner.{ident['pid']}")
        self.seam.pause("create", owner)
        with open(owner, "w") as fh:
            fh.write(str(ident["start"]))
        try:
            self._rename(self.path("pending", rid), self.path("claimed", rid))
        except OSError as exc:
            self._drop(owner)
            if exc.errno == errno.ENOENT:
                return None
            raise
        req = read_json(self.path("claimed", rid))
        refusal: tuple[str, str] | None = None
        if req is None:
            refusal = ("refused", "the request record is unreadable")
        else:
            actual = hash_of(req)
            if actual != req.get("hash") or actual != dec.get("hash") or dec.get("id") != rid:
                refusal = ("refused", "the approval does not match this exact tool, parameters "
                                      "and working directory")
            elif not dec.get("written_by_decide"):
                # decide() writes 0600 through a temporary file and a link; a file a
                # client's write tool made (umask modes), or a link, is no decision
                refusal = ("refused", "the decision file is not one the approver wrote "
                                      "(a regular file only its owner can read and write)")
            elif float(dec.get("expires_at", 0)) < time.time():
                refusal = ("expired", "the approval expired before it was used")
        use = "grant" if (req or {}).get("mode") == "grant" else "run"
        if not self._spend(rid, refusal[0] if refusal else use,
                           reason=refusal[1] if refusal else ""):
            # used already (a resurrected file): never twice; the user finishes it
            self._drop(owner)
            if os.path.exists(self.path("done", rid)):
                self._cleanup(rid)
            return None
        if refusal is not None or req is None:
            status, reason = refusal or ("refused", "unreadable")
            self.finalize(rid, status, request=req, decision=dec, reason=reason)
            return None
        return req, dec

    def _drop(self, path: str) -> None:
        try:
            self._unlink(path)
        except OSError:
            pass

    def execute(self, rid: str, run: Callable[[dict[str, Any]], dict[str, Any]]
                ) -> dict[str, Any] | None:
        """Claim and run an approved request once; returns the terminal record
        this process wrote, or None when it was not ours to run."""
        claimed = self.claim(rid)
        if claimed is None:
            return None
        req, dec = claimed
        try:
            result = run(req)
        except Exception as exc:  # the command could not be run: say so, once
            result = {"status": "failed", "reason": f"{type(exc).__name__}: {exc}"}
        status = result.pop("status", "completed")
        self.finalize(rid, status, request=req, decision=dec, **result)
        return self.result(rid)

    def consume(self, rid: str) -> bool:
        """Use an approval for a tool the agent runs itself (``grant`` mode)."""
        claimed = self.claim(rid)
        if claimed is None:
            return False
        req, dec = claimed
        return self.finalize(rid, "granted", request=req, decision=dec)

    # -- crash recovery --------------------------------------------------
    def recover(self, now: float | None = None, grace: float = 2.0) -> list[str]:
        """Finish what killed processes left. Returns ids of approved requests
        that have no live executor or requester and should be run now."""
        now = time.time() if now is None else now
        to_run: list[str] = []
        for state in (*STATES, "spent", "uses"):  # temporary files of writers killed mid-write
            try:
                names = os.listdir(self.dir(state))
            except OSError:
                continue
            for n in names:
                if n.startswith(".tmp-"):
                    p = os.path.join(self.dir(state), n)
                    try:
                        if now - os.stat(p).st_mtime > 60:
                            self._unlink(p)
                    except OSError:
                        pass
        done = set(self.ids("done"))
        for rid in done:
            if os.path.exists(self.path("pending", rid)) or os.path.exists(
                    self.path("claimed", rid)):
                self._cleanup(rid)
        for rid in self.ids("claimed"):
            if rid in done:
                continue
            owners = self._owners(rid)
            if any(self.seam.alive(pid, start) for pid, start in owners):
                continue
            if self._settle_spent(rid):
                continue
            try:
                ctime = os.stat(self.path("claimed", rid)).st_ctime
            except OSError:
                continue
            if not owners and now - ctime < grace:
                continue
            for pid, _ in owners:
                self._drop(os.path.join(self.dir("claimed"), f"{rid}.owner.{pid}"))
            try:  # back to pending, to be claimed again (one recoverer wins)
                self._rename(self.path("claimed", rid), self.path("pending", rid))
            except OSError:
                continue
        for rid in self.ids("pending"):
            if rid in done or self._settle_spent(rid):
                continue
            req = read_json(self.path("pending", rid))
            if req is None:
                continue
            dec = self.decision(rid)
            requester = req.get("requester") or {}
            waiting = self.seam.alive(requester.get("pid"), requester.get("start"))
            if dec is None:
                deadline = float(req.get("wait_until", 0) or 0)
                verdict = reason = ""
                if deadline and now > deadline + (grace if waiting else 0):
                    verdict, reason = "timeout", "nobody decided before the request's deadline"
                elif not waiting and not req.get("detached"):
                    verdict, reason = "cancel", "the agent's hook stopped waiting for it"
                if verdict:
                    try:
                        self.decide(rid, verdict, by="recovery", reason=reason)
                    except QueueError:
                        pass
                continue
            kind = dec.get("decision")
            if kind != "approve":
                self.finalize(rid, _DECISION_STATUS.get(str(kind), "denied"), request=req,
                              decision=dec)
                continue
            if float(dec.get("expires_at", 0)) < now:
                self.claim(rid)  # finalizes it expired
                continue
            if req.get("mode", "run") == "grant":
                if not waiting and self._spend(
                        rid, "expired", reason="approved after the agent stopped waiting"):
                    # nobody is left to use a grant: record it unused
                    self.finalize(rid, "expired", request=req, decision=dec,
                                  reason="approved after the agent stopped waiting")
                continue
            if not waiting or now - float(dec.get("at", now)) > grace:
                to_run.append(rid)
        return to_run

    def _settle_spent(self, rid: str) -> bool:
        """If the approval of ``rid`` was used, finish the request for a user
        that died before writing its terminal record (True), unless that user
        is still alive (True: leave it); False when it was never used."""
        use = self.spent(rid)
        if use is None:
            if not os.path.exists(self.path("spent", rid)):
                return False
            use = {"use": "run"}  # a record cut short: it may have run
        if self.seam.alive(use.get("pid"), use.get("start")):
            return True
        kind = str(use.get("use"))
        if kind in ("refused", "expired"):
            self.finalize(rid, kind, reason=str(use.get("reason") or kind))
        else:
            self.finalize(rid, "interrupted",
                          reason="the executor stopped after it took the approval; it is "
                                 "never run again")
        return True

    def _owners(self, rid: str) -> list[tuple[int, str | None]]:
        out: list[tuple[int, str | None]] = []
        prefix = rid + ".owner."
        try:
            names = os.listdir(self.dir("claimed"))
        except OSError:
            return out
        for n in names:
            if n.startswith(prefix):
                try:
                    pid = int(n[len(prefix):])
                    with open(os.path.join(self.dir("claimed"), n)) as fh:
                        start = fh.read().strip() or None
                except (ValueError, OSError):
                    continue
                out.append((pid, start))
        return out

    def counts(self) -> dict[str, int]:
        decided = set(self.ids("decided"))
        pend = self.ids("pending")
        return {
            "pending": sum(1 for r in pend if r not in decided),
            "approved": sum(1 for r in pend if r in decided),
            "running": len(self.ids("claimed")),
            "done": len(self.ids("done")),
        }


def queue_for(repo: str) -> FolderQueue:
    """The queue of a repository, or of the host-level site (``repo_layout.Site``)."""
    from agent_sandbox.repo_layout import Site

    return FolderQueue(Site(repo).queue)
