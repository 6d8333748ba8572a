"""The srt backend: the same settings handed to an installed srt.

It writes the settings (srt format, unchanged, plus the runtime's own state
and installation in ``denyWrite``) to a private file and runs
``srt -s FILE -c CMD``; srt is found at ``$AGENT_SANDBOX_SRT`` or on PATH.
srt lets a command create protected names where none existed, so the sweep
runs after it, as after bwrap. A missing srt is a ``SandboxStartError``.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
import tempfile
import time

from ..failures import TIMED_OUT, SandboxStartError
from ..private_state import private_paths
from ..result import CompletedRun
from ..settings import Settings
from .base import OUTPUT_LIMIT, Backend

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..broker.pinned import Pin


def find_srt() -> str:
    env = os.environ.get("AGENT_SANDBOX_SRT")
    if env and os.access(env, os.X_OK):
        return env
    found = shutil.which("srt")
    if not found:
        raise SandboxStartError(
            "srt is not installed: `npm install -g @anthropic-ai/sandbox-runtime` "
            "(or set AGENT_SANDBOX_SRT), or use --backend bwrap"
        )
    return found


def _kill_tree(pid: int) -> None:
    """Kill a process and all its descendants (srt does not take its sandbox down)."""
    import psutil

    try:
        procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.kill()


def _run(argv: list[str], *, cwd: str, env: dict[str, str] | None, timeout: float | None,
         capture: bool, stdin: bytes | None, backend: str, output_limit: int) -> CompletedRun:
    from ..output import collect
    from ..result import bounded, completed

    started = time.monotonic()
    out = bounded(output_limit)
    pipe = subprocess.PIPE if capture else None
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=pipe, stderr=pipe,
                            stdin=subprocess.PIPE if stdin is not None else None,
                            start_new_session=capture)

    def kill() -> None:
        _kill_tree(proc.pid)
        proc.kill()

    timed_out = collect(proc, out, stdin=stdin, timeout=timeout, kill=kill)
    return completed(out, TIMED_OUT if timed_out else proc.returncode,
                     time.monotonic() - started, timed_out, backend)


def run_srt(argv: list[str], settings: Settings, cwd: str, *, timeout: float | None,
            capture: bool, env: dict[str, str] | None, stdin: bytes | None,
            output_limit: int) -> CompletedRun:
    import json

    from ..bwrap import fsview
    from ..bwrap import plan as bw
    from ..bwrap.run import runtime_paths
    from ..bwrap.sweep import identities, quarantine
    from ..host import home_dir

    srt = find_srt()
    home = home_dir()
    plan = bw.plan(settings, home=home, cwd=cwd, fs=fsview.RealFs())
    before = identities(plan.before)
    with tempfile.TemporaryDirectory(prefix="agent-sandbox-srt-") as tmp:
        path = os.path.join(tmp, "srt-settings.json")
        doc = settings.to_srt()
        # the runtime's own state and installation: no sandbox may rewrite what
        # decides or runs outside it next (bwrap gets them through ``protect``)
        doc.setdefault("filesystem", {}).setdefault("denyWrite", []).extend(
            runtime_paths(home, settings.source))
        doc["filesystem"].setdefault("denyRead", []).extend(
            p for p in private_paths(home) if os.path.exists(p))
        with open(path, "w") as fh:
            json.dump(doc, fh)
        result = _run([srt, "-s", path, "-c", shlex.join(argv)], cwd=cwd, env=env,
                      timeout=timeout, capture=capture, stdin=stdin, backend="srt",
                      output_limit=output_limit)
    # srt does not stop a command from creating .git/hooks and the like where
    # none existed: disarm what it created, as the bwrap backend does
    roots = [w for w in plan.writable_roots if os.path.isdir(w)]
    notes = "".join(quarantine(roots, before, home)[1])
    if not notes:
        return result
    if not capture:
        os.write(2, notes.encode())
    return CompletedRun(result.returncode, result.stdout, result.stderr + notes.encode(),
                        result.duration, result.timed_out, "srt",
                        stdout_dropped=result.stdout_dropped,
                        stderr_dropped=result.stderr_dropped)


class SrtBackend(Backend):
    """srt behind the ``Backend`` interface: ``run_srt``."""

    name = "srt"

    def run(self, argv: list[str], settings: Settings, cwd: str, home: str, *,
            timeout: float | None, capture: bool, env: dict[str, str] | None = None,
            stdin: bytes | None = None, output_limit: int = OUTPUT_LIMIT,
            audit_dir: str | None = None, pin: Pin | None = None) -> CompletedRun:
        return run_srt(argv, settings, cwd, timeout=timeout, capture=capture, env=env,
                       stdin=stdin, output_limit=output_limit)
