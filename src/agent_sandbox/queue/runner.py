"""Run approved requests: the only place an escalated action is carried out.

A shell command runs through the Linux sandbox runtime
(``agent_sandbox.runtime.run.run_sandboxed``) with the repository's srt
settings (``.sandbox/srt-settings.json``), never with the agent's rights and
never unsandboxed: if the sandbox cannot start the request ends ``failed``. An
approved file write (Write, Edit, MultiEdit) is applied exactly as approved, in
the same sandbox (``write_file``: the host never writes it by path).

The executor runs detached from whoever started it (its own session), so a
killed hook or approver does not stop an approved command halfway:
``python -I -m agent_sandbox.queue.runner REPO ID`` or ``fork_runner``.
"""

from __future__ import annotations

import json
import os
import sys
import time

from .folder import FolderQueue

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

OUTPUT_KEEP = 64 * 1024  # bytes of each stream kept in the done record (head and tail)
DEFAULT_TIMEOUT = 600.0


def sandbox_dir(repo: str) -> str:
    return os.path.join(repo, ".sandbox")


def queue_for(repo: str) -> FolderQueue:
    """The queue of a repository, or of the host-level site (``state_paths.Site``)."""
    from agent_sandbox.state_paths import Site

    return FolderQueue(Site(repo).queue)


def audit(repo: str, event: str, **fields: Any) -> None:
    """Append to the repository's audit log; an audit failure is reported on
    stderr and never turns a refusal into an allow."""
    from agent_sandbox.audit.repo import append_audit

    append_audit(repo, event, fields)


def run_command(repo: str, req: dict[str, Any]) -> dict[str, Any]:
    command = req["params"].get("command")
    if not isinstance(command, str) or not command:
        return {"status": "failed", "reason": "the request has no command"}
    return sandboxed(repo, req, ["bash", "-c", command], command=command)


def sandboxed(repo: str, req: dict[str, Any], argv: list[str], *, command: str,
              stdin: bytes | None = None) -> dict[str, Any]:
    """Run ``argv`` for the approved request ``req`` in a new sandbox with the
    repository's settings, in the request's folder; ``failed`` when the sandbox
    cannot start (it never runs unsandboxed)."""
    from agent_sandbox.runtime.errors import SandboxStartError
    from agent_sandbox.runtime.run import run_sandboxed
    from agent_sandbox.state_paths import Site

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
        audit(repo, "sandbox_started", request_id=req.get("id", ""), command=command, cwd=cwd,
              uid=os.geteuid())
        try:
            # the output is read while the command runs and cut to its head and tail
            # there: a command printing without end costs this process no memory
            run = run_sandboxed(argv, _settings_document(settings), cwd=cwd, timeout=timeout,
                                capture=True, stdin=stdin, output_limit=OUTPUT_KEEP)
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

    if not path.endswith(os.path.join(".sandbox", "srt-settings.json")):
        return path
    from agent_sandbox.runtime.errors import SandboxStartError

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
    repository's sandbox (``write_file``: never by path on the host)."""
    from .write_file import apply_write as apply

    summary = f"{req.get('tool')} {(req.get('params') or {}).get('file_path')}"
    return apply(repo, req, lambda argv, data: sandboxed(repo, req, argv, command=summary,
                                                         stdin=data))


def execute_request(repo: str, req: dict[str, Any]) -> dict[str, Any]:
    if req.get("kind") == "bash":
        result = run_command(repo, req)
    elif req.get("kind") == "write":
        result = apply_write(repo, req)
    elif req.get("kind") == "action":
        from agent_sandbox.actions.service import execute

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
    """Start ``python -I -m agent_sandbox.queue.runner REPO ID`` detached."""
    import subprocess

    subprocess.Popen([sys.executable, "-I", "-m", "agent_sandbox.queue.runner", repo, rid],
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
        sys.stderr.write("usage: python -m agent_sandbox.queue.runner REPO ID\n")
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
