"""Run approved requests: the only place an escalated action is carried out.

A shell command runs through the Linux sandbox runtime
(``agent_sandbox.runtime.run.run_sandboxed``) with the repository's srt
settings (``.sandbox/srt-settings.json``), never with the agent's rights and
never unsandboxed: if the sandbox cannot start the request ends ``failed``. An
approved file write (Write, Edit, MultiEdit) is applied exactly as approved, in
the same sandbox (``approved_write``: the host never writes it by path).

The executor runs detached from whoever started it (its own session), so a
killed hook or approver does not stop an approved command halfway:
``python -I -m agent_sandbox.approval.executor REPO ID`` or ``fork_runner``.
"""

from __future__ import annotations

import json
import os
import sys
import time

from ..audit.repo import audit
from ..queue import FolderQueue, new_id, queue_for, valid_id
from ..queue.records import OUTPUT_KEEP
from ..repo_layout import SANDBOX, SETTINGS, under

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

DEFAULT_TIMEOUT = 600.0


def pinned_roots(repo: str, cwd: str) -> tuple[list[str], list[str]]:
    """(the folders an approved command of ``repo`` may read that the agent can write:
    its settings' writable roots and the repository; the runtime's own state in
    them, which no command writes)."""
    from agent_sandbox.repo_layout import Site

    site = Site(repo)
    roots = [] if site.host else [repo]
    from agent_sandbox.errors import SandboxError
    from agent_sandbox.runtime.host import home_dir
    from agent_sandbox.runtime.settings import parse
    from agent_sandbox.spec.paths import expand, is_glob

    try:
        doc = _settings_document(site.settings)
        if isinstance(doc, str):
            with open(doc, "rb") as fh:
                doc = json.loads(fh.read())
        rules = parse(doc).filesystem.allow_write
    except (OSError, ValueError, SandboxError):
        rules = ()  # no settings to run with: the run itself fails, saying why
    home = home_dir()
    for rule in rules:
        path = expand(rule, home=home, cwd=cwd)
        if is_glob(path):  # the folder above the first glob character
            path = path.split("*", 1)[0].split("?", 1)[0].split("[", 1)[0].rsplit("/", 1)[0]
        roots.append(path or "/")
    return (list(dict.fromkeys(os.path.realpath(r) for r in roots)),
            [site.queue, site.state, site.audit, under(repo, SANDBOX)])


def pin_content(repo: str, q: FolderQueue, record: dict[str, Any]) -> str | None:
    """Record the tree a command request ``record`` may read (``content``) and bind
    the request to it; the reason when it cannot be."""
    from ..queue import content, mapped

    cwd = str(record.get("cwd") or repo)
    roots, skip = pinned_roots(repo, cwd)
    inodes = mapped.writable_mappings()
    try:
        entries = content.take(roots, skip)
    except content.TooLarge as exc:
        return f"{exc}: the content of this command cannot be pinned for approval"
    inodes |= mapped.writable_mappings()
    command = (record.get("params") or {}).get("command")
    named = content.named(command, cwd, entries) if isinstance(command, str) else []
    content.save(q, record["id"], entries)
    record["content"] = {"digest": content.digest(entries), "entries": len(entries),
                         "roots": roots, "named": named, "cwd_real": os.path.realpath(cwd),
                         "mapped": mapped.pinned_by_bytes(entries, inodes)}
    return None


def pin_remembered(repo: str, q: FolderQueue, record: dict[str, Any],
                   entry: dict[str, Any]) -> bool:
    """Bind the command request ``record`` to the tree a remembered approval saw
    (``entry``: its request id and content) when nothing of that tree changed
    since: True, and it may be approved without a human; False (``record``
    untouched) otherwise, and a human decides."""
    from ..queue import content

    seen, rid = entry.get("content"), entry.get("request_id")
    old = content.load(q, rid) if isinstance(rid, str) and valid_id(rid) else None
    if old is None or not isinstance(seen, dict) or content.digest(old) != seen.get("digest"):
        return False
    _, skip = pinned_roots(repo, str(record.get("cwd") or repo))
    try:
        now = content.take(list(seen.get("roots") or ()), skip)
    except content.TooLarge:
        return False
    cwd = str(record.get("cwd") or repo)
    command = (record.get("params") or {}).get("command")
    if content.touched(old, now, command if isinstance(command, str) else None, cwd):
        return False
    # the files this command names, where it runs now, by their bytes: the ones the
    # human was shown (a remembered decision for any folder names others there)
    shown = {str(n.get("path")): n.get("sha256") for n in seen.get("named") or ()
             if isinstance(n, dict)}
    if {str(n["path"]): n["sha256"] for n in (content.named(command, cwd, now) if
                                             isinstance(command, str) else [])} != shown:
        return False
    content.save(q, record["id"], old)  # the run is pinned to what the human saw
    record["content"] = {**seen, "cwd_real": os.path.realpath(cwd)}
    record["remembered_from"] = rid
    return True


def changed_since(repo: str, req: dict[str, Any]) -> list[str] | None:
    """What of the tree a pending command request was made with is no longer as it
    was (``content.touched``: the approval would refuse it and ask again); None
    for a request that pinned no content."""
    from ..queue import content

    seen = req.get("content")
    rid = req.get("id")
    if not isinstance(seen, dict) or not isinstance(rid, str):
        return None
    old = content.load(queue_for(repo), rid)
    if old is None:
        return ["the record of the tree it was made with is missing"]
    _, skip = pinned_roots(repo, str(req.get("cwd") or repo))
    try:
        command = (req.get("params") or {}).get("command")
        return content.touched(old, content.take(list(seen.get("roots") or ()), skip),
                               command if isinstance(command, str) else None,
                               str(req.get("cwd") or repo))
    except content.TooLarge as exc:
        return [str(exc)]


def run_command(repo: str, req: dict[str, Any]) -> dict[str, Any]:
    command = req["params"].get("command")
    if not isinstance(command, str) or not command:
        return {"status": "failed", "reason": "the request has no command"}
    pin = None
    if req.get("content") is not None:
        pin, refusal = _pinned(repo, req)
        if refusal is not None:
            return refusal
    result = sandboxed(repo, req, ["bash", "-c", command], command=command, pin=pin)
    if pin is not None:
        result["content_digest"] = req["content"].get("digest")
        if pin.refused:
            result["refused_reads"] = pin.refused[:40]
    return result


def _pinned(repo: str, req: dict[str, Any]) -> tuple[Any, dict[str, Any] | None]:
    """The tree the request was approved with, as the run's pin, when the tree is
    still that tree; otherwise the refusal, and the request queued anew with what
    changed (the human approves what is there now, or not)."""
    from agent_sandbox.runtime.broker.pinned import Pin

    from ..queue import content

    q = queue_for(repo)
    old = content.load(q, req["id"])
    roots = list(req["content"].get("roots") or [])
    if old is None:
        return None, {"status": "failed", "reason": "the record of the approved tree is missing"}
    _, skip = pinned_roots(repo, str(req.get("cwd") or repo))
    try:
        now = content.take(roots, skip)
    except content.TooLarge as exc:
        return None, {"status": "refused", "reason": str(exc)}
    named = {str(n.get("path")): str(n.get("sha256")) for n in
             req["content"].get("named") or () if isinstance(n, dict)}
    mapped = req["content"].get("mapped")
    if isinstance(mapped, dict):  # mapped shared and writable when the request was made
        named.update({str(p): str(h) for p, h in mapped.items()})
    # the named files by their bytes too: a write through a shared mapping changes
    # a file's text and none of the times the record holds (``queue.mapped``)
    command = (req.get("params") or {}).get("command")
    diff = content.touched(old, now, command if isinstance(command, str) else None,
                           str(req.get("cwd") or repo))
    diff += [f"changed {p}" for p, h in named.items() if content.sha256_of(p) != h]
    if not diff:
        return Pin(old, roots, named), None
    again = {k: v for k, v in req.items()
             if k not in ("id", "hash", "created", "requester", "content")}
    again["id"] = new_id()
    again["requeued_from"] = req["id"]
    again["changed"] = diff[:200]
    again["wait_until"] = time.time() + max(60.0, float(req.get("wait_until") or 0)
                                            - float(req.get("created") or 0))
    pin_content(repo, q, again)
    q.submit(again)
    audit(repo, "request", request_id=again["id"], requeued_from=req["id"],
          tool=req.get("tool"), summary=req.get("summary"), changed=len(diff))
    shown = "; ".join(diff[:10]) + (f"; and {len(diff) - 10} more" if len(diff) > 10 else "")
    return None, {"status": "refused", "requeued_as": again["id"], "changed": diff[:200],
                  "reason": f"the files it may read changed after the request ({shown}); "
                            f"nothing ran, and it waits for approval again as {again['id']}"}


def sandboxed(repo: str, req: dict[str, Any], argv: list[str], *, command: str,
              stdin: bytes | None = None, pin: Any = None) -> dict[str, Any]:
    """Run ``argv`` for the approved request ``req`` in a new sandbox with the
    repository's settings, in the request's folder; ``failed`` when the sandbox
    cannot start (it never runs unsandboxed)."""
    from agent_sandbox.repo_layout import Site
    from agent_sandbox.runtime.failures import SandboxStartError
    from agent_sandbox.runtime.run import run_sandboxed

    site = Site(repo)
    settings = site.settings
    if not os.path.isfile(settings):
        return {"status": "failed", "reason": f"{settings} is missing: run sandbox init"}
    cwd = req.get("cwd") or repo
    if not site.host:
        # the folder is resolved now, when the command runs: a link a sandboxed command
        # swapped in after the approval cannot take an approved command of this
        # repository (and its settings) into another folder
        real, top = os.path.realpath(str(cwd)), os.path.realpath(repo)
        if real != top and not real.startswith(top.rstrip("/") + "/"):
            return {"status": "failed",
                    "reason": f"the working folder {cwd!r} resolves outside the repository"}
        was = (req.get("content") or {}).get("cwd_real")
        if was and real != was:  # a link swapped in after the tree was checked
            return {"status": "failed", "reason": f"the working folder {cwd!r} resolves to "
                    f"{real}, not to {was} as when the request was made; nothing ran"}
        cwd = real
    timeout = float(req.get("timeout") or DEFAULT_TIMEOUT)
    import fcntl

    # Approved commands of one repository run one at a time, in the order they
    # get here: a human approved each against the state they saw, and two
    # sandboxes starting at once over the same writable root can race on the
    # runtime's protected-name placeholders.
    os.makedirs(site.state, mode=0o700, exist_ok=True)
    lock = os.open(os.path.join(site.state, "run.lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC,
                   0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        content = req.get("content") or {}
        audit(repo, "sandbox_started", request_id=req.get("id", ""), command=command, cwd=cwd,
              uid=os.geteuid(), content_digest=content.get("digest"),
              named={str(n.get("path")): n.get("sha256") for n in content.get("named") or ()
                     if isinstance(n, dict)} or None)
        try:
            # the output is read while the command runs and cut to its head and tail
            # there: a command printing without end costs this process no memory
            run = run_sandboxed(argv, _settings_document(settings), cwd=cwd, timeout=timeout,
                                capture=True, stdin=stdin, output_limit=OUTPUT_KEEP, pin=pin)
        except SandboxStartError as exc:
            return {"status": "failed", "reason": f"the sandbox could not start: {exc}"}
    finally:
        os.close(lock)
    return {"status": "completed", "exit_code": run.returncode,
            "stdout": run.stdout.decode("utf-8", "replace"),
            "stderr": run.stderr.decode("utf-8", "replace"), "duration": round(run.duration, 4),
            "timed_out": run.timed_out}


def _settings_document(path: str) -> dict[str, Any] | str:
    """A repository's srt settings, parsed here. The file sits in the
    repository's ``.sandbox/``, which is inside the sandbox's writable root but
    read-only in every sandbox (``protected.py``); the runtime refuses a
    settings *path* inside a writable root, so the runner, which runs on the
    host, reads it (a regular file, writable by nobody else) and passes the
    document. The host's system settings are passed as a path."""
    import stat

    if not path.endswith(os.path.join(*SETTINGS.split("/"))):
        return path
    from agent_sandbox.runtime.failures import SandboxStartError

    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_mode & 0o022 or st.st_size > 1 << 20:
            raise SandboxStartError(f"{path} must be a regular file of at most 1 MiB that "
                                    "only its owner can write")
        with os.fdopen(os.dup(fd), "rb") as fh:
            doc = json.loads(fh.read())
    finally:
        os.close(fd)
    if not isinstance(doc, dict):
        raise SandboxStartError(f"{path} is not a JSON object")
    return doc


def apply_write(repo: str, req: dict[str, Any]) -> dict[str, Any]:
    """Apply an approved Write/Edit/MultiEdit exactly as the agent asked, inside the
    repository's sandbox (``approved_write``: never by path on the host)."""
    from .approved_write import apply_write as apply

    summary = f"{req.get('tool')} {(req.get('params') or {}).get('file_path')}"
    return apply(repo, req, lambda argv, data: sandboxed(repo, req, argv, command=summary,
                                                         stdin=data))


def execute_request(repo: str, req: dict[str, Any]) -> dict[str, Any]:
    if req.get("kind") == "bash":
        result = run_command(repo, req)
    elif req.get("kind") == "write":
        result = apply_write(repo, req)
    elif req.get("kind") == "action":
        from ..actions.execution import execute

        result = execute(repo, req)
    else:
        result = {"status": "failed", "reason": f"{req.get('tool')} cannot run outside the agent"}
    audit(repo, "completed", request_id=req["id"], status=result.get("status"), uid=os.geteuid(),
          exit_code=result.get("exit_code"), duration_ms=round(
              float(result.get("duration") or 0) * 1000, 3))
    return result


def run_one(repo: str, rid: str) -> dict[str, Any] | None:
    """Claim and run ``rid`` if it is approved and nobody else has it."""
    q = queue_for(repo)
    return q.execute(rid, lambda req: execute_request(repo, req))


def fork_runner(repo: str, rid: str) -> int:
    """Run ``rid`` in a detached child (double fork, own session); returns the
    pid of the intermediate child (already reaped)."""
    pid = os.fork()
    if pid == 0:  # child
        try:
            os.setsid()
            if os.fork() != 0:
                os._exit(0)
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            run_one(repo, rid)
        except BaseException:
            os._exit(1)
        os._exit(0)
    os.waitpid(pid, 0)
    return pid


def spawn_runner(repo: str, rid: str) -> None:
    """Start ``python -I -m agent_sandbox.approval.executor REPO ID`` detached."""
    import subprocess

    subprocess.Popen([sys.executable, "-I", "-m", "agent_sandbox.approval.executor", repo, rid],
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True)


def recover_and_run(repo: str) -> list[str]:
    """One recovery pass; starts a runner for each orphaned approval."""
    q = queue_for(repo)
    ids = q.recover()
    for rid in ids:
        spawn_runner(repo, rid)
    return ids


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        sys.stderr.write("usage: python -m agent_sandbox.approval.executor REPO ID\n")
        return 2
    repo, rid = argv
    started = time.monotonic()
    rec = run_one(os.path.abspath(repo), rid)
    if rec is not None:
        sys.stdout.write(json.dumps({"id": rid, "status": rec.get("status"),
                                     "seconds": round(time.monotonic() - started, 3)}) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
