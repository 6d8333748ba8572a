"""An approved file write (Write, Edit, MultiEdit, ``write_file``), applied inside
the sandbox.

The file lies in a tree a sandboxed command can rearrange while the write is
applied: a folder exchanged with a link, or with another folder (``renameat2``
``RENAME_EXCHANGE``), between a host-side check and a host-side ``open`` sends
the approved bytes wherever the attacker pointed them (``.git/config``, a
hook), and an Edit would read its old text from there. No host-side check by
path, and no descriptor walk, can close that: a folder held open is still moved
under another name. So the host never writes the file. It refuses protected
targets early (a clear message for the human), then runs ``WRITER`` (stdlib
only, ``-I -S``) in a new sandbox with the repository's settings, where the
protected set is read-only by mount: a mount goes with the file whatever name
the tree gives it, so a swap lands the write on a read-only file and it fails.
Reads obey ``denyRead`` there too, and the run's sweep judges what it made.

It never writes anything on the host itself, and never reports ``completed``
unless the writer in the sandbox said so.
"""

from __future__ import annotations

import os

from agent_sandbox import quickjson

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

WRITE_TOOLS = ("Write", "write_file")
EDIT_TOOLS = ("Edit", "MultiEdit")
REPLY_LIMIT = 4096  # bytes of the writer's answer read back

# Runs inside the sandbox: reads {"path", "content"} or {"path", "edits"} on stdin,
# answers one JSON object on stdout. The temporary file is made beside the target,
# exclusively and without following links, then renamed over it.
WRITER = r"""
import json, os, sys
req = json.loads(sys.stdin.buffer.read())
path = req["path"]
def answer(**kw):
    sys.stdout.write(json.dumps(kw))
    sys.exit(0)
mode = 0o666
if "edits" in req:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        mode = os.fstat(fd).st_mode & 0o777
        with os.fdopen(fd, encoding="utf-8") as fh:
            new = fh.read()
    except (OSError, UnicodeDecodeError) as exc:
        answer(status="failed", reason=f"cannot read {path}: {exc}")
    for e in req["edits"]:
        old, rep = e["old_string"], e["new_string"]
        if old not in new:
            answer(status="failed", reason="old_string not found in the file")
        new = new.replace(old, rep) if e.get("replace_all") else new.replace(old, rep, 1)
else:
    new = req["content"]
    try:
        mode = os.stat(path, follow_symlinks=False).st_mode & 0o777
    except OSError:
        pass
folder, name = os.path.split(path)
tmp = None
try:
    os.makedirs(folder, exist_ok=True)
    # a random name, never the pid: in the sandbox's own pid namespace the pid is the
    # same on every run, and a name the command can predict is one it can occupy
    for _ in range(16):
        tmp = os.path.join(folder, f".{name}.sandbox-tmp-{os.urandom(8).hex()}")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, mode)
            break
        except FileExistsError:
            tmp = None
    else:
        answer(status="failed", reason=f"cannot write {path}: no free temporary name")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(new)
    os.replace(tmp, path)
except OSError as exc:
    try:
        if tmp:
            os.unlink(tmp)
    except OSError:
        pass
    answer(status="failed", reason=f"cannot write {path}: {exc.strerror or exc}")
answer(status="completed", chars=len(new))
"""


def _request(tool: str, params: dict[str, Any], full: str) -> dict[str, Any] | str:
    """What the writer gets, or why the request cannot be applied."""
    if tool in WRITE_TOOLS:
        content = params.get("content")
        if not isinstance(content, str):
            return "no content"
        return {"path": full, "content": content}
    if tool not in EDIT_TOOLS:
        return f"{tool} is not a file write"
    edits = params.get("edits") if tool == "MultiEdit" else [params]
    if not isinstance(edits, list) or not edits:
        return "edits must be a non-empty list"
    out = []
    for e in edits:
        if not isinstance(e, dict):
            return "each edit must be an object"
        old, rep = e.get("old_string"), e.get("new_string")
        if not isinstance(old, str) or not old or not isinstance(rep, str):
            return "each edit needs old_string (not empty) and new_string"
        out.append({"old_string": old, "new_string": rep,
                    "replace_all": e.get("replace_all") is True})
    return {"path": full, "edits": out}


def apply_write(repo: str, req: dict[str, Any],
                run: Callable[[list[str], bytes], dict[str, Any]]) -> dict[str, Any]:
    """Apply the approved write ``req`` of ``repo``. ``run(argv, stdin)`` runs argv
    in the repository's sandbox (``executor.sandboxed``) and returns its result."""
    import sys

    from agent_sandbox.policy.self_protection import protected_paths
    from agent_sandbox.spec.paths import OpaquePath, covers, places, special_device
    from agent_sandbox.state_paths import account_home

    params = req.get("params") or {}
    path = params.get("file_path")
    if not isinstance(path, str) or not path or "\x00" in path:
        return {"status": "failed", "reason": "no file_path"}
    # the engine's readings of the path (paths.places), protected under every home:
    # an early, clear refusal; the sandbox's mounts enforce it whatever happens next
    if special_device(path) is not None:
        return {"status": "refused", "reason": f"{path} is a device, not a file"}
    try:
        readings = places(path, str(req["cwd"]))
    except OpaquePath as exc:
        return {"status": "refused", "reason": str(exc)}
    except OSError as exc:  # a tree rearranged while it is resolved
        return {"status": "failed", "reason": f"cannot resolve {path}: {exc.strerror}"}
    full = readings[0]  # the kernel's
    rules = [r for h in dict.fromkeys((account_home(), os.path.expanduser("~")))
             for r in protected_paths(repo, h)]
    for place in readings:
        if any(covers(r, place) for r in rules) or place.rsplit("/", 1)[-1] == ".git":
            return {"status": "refused", "reason": f"{place} is protected"}
    doc = _request(str(req.get("tool")), params, full)
    if isinstance(doc, str):
        return {"status": "failed", "reason": doc}
    python = os.path.realpath(sys.executable)
    res = run([python, "-I", "-S", "-c", WRITER], quickjson.dumps(doc).encode())
    if res.get("status") != "completed":
        return res
    reply = _reply(res.get("stdout") or "")
    if reply.get("status") != "completed":
        said = reply.get("reason")
        reason = said if isinstance(said, str) else (
            f"the writer failed (exit {res.get('exit_code')}): "
            f"{str(res.get('stderr') or '')[-500:]}")
        return {"status": "failed", "reason": reason[:1000],
                "duration": res.get("duration", 0.0)}
    chars = reply.get("chars") if isinstance(reply.get("chars"), int) else 0
    return {"status": "completed", "exit_code": 0, "stdout": f"wrote {full} ({chars} chars)",
            "stderr": "", "duration": res.get("duration", 0.0)}


def _reply(text: str) -> dict[str, Any]:
    """The writer's answer; anything else counts as a failure."""
    try:
        got = quickjson.loads(text[:REPLY_LIMIT])
    except ValueError:
        return {}
    return got if isinstance(got, dict) else {}
