"""Ending sandboxes left stuck in bubblewrap's start-up by a killed caller.

It only ever kills this user's processes that are a ``bwrap`` running our start
gate (``bwrap.GATE_SCRIPT``) with no parent left: the command never ran there.
"""

from __future__ import annotations

import _signal as signal
import os
import time

REAP_EVERY = 30.0  # seconds between two looks for stuck sandboxes (per user)
GATE_MARKER = b"sandbox-gate"


def reap_stuck(lock_dir: str, every: float | None = None) -> int:
    """Kill this user's sandboxes left behind without a supervisor; how many.

    A caller SIGKILLed while bwrap is still setting up can leave bwrap's inner
    process blocked for good in bwrap's own start-up handshake (its parent,
    which would have answered, died with the caller; its parent-death signal
    is not armed yet). The command never runs there (the start gate), but the
    process stays. Such a process is a bwrap running our start gate whose
    parent is gone (it was handed to init, parent pid 1) and that no live run
    recorded as its own (under a supervisor that is pid 1 itself, a container's
    entry point, every live sandbox has parent pid 1 too). The last run of a
    user to finish looks for them, at most every ``REAP_EVERY`` seconds
    (``AGENT_SANDBOX_REAP_EVERY`` overrides it).
    """
    from .run_records import live_pids

    if every is None:
        every = float(os.environ.get("AGENT_SANDBOX_REAP_EVERY", REAP_EVERY))
    stamp = os.path.join(lock_dir, "reaped")
    try:
        if time.time() - os.stat(stamp).st_mtime < every:
            return 0
    except OSError:
        pass
    try:
        os.close(os.open(stamp, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600))
        os.utime(stamp)
    except OSError:
        return 0
    uid, killed = os.getuid(), 0
    alive = live_pids(os.path.join(lock_dir, "runs"))
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in alive:
            continue
        try:
            if os.stat(f"/proc/{name}").st_uid != uid:
                continue
            with open(f"/proc/{name}/stat", "rb") as fh:
                if fh.read().rsplit(b")", 1)[1].split()[1] != b"1":
                    continue  # it still has its parent
            with open(f"/proc/{name}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
            if argv[0].endswith(b"/bwrap") and GATE_MARKER in argv:
                os.kill(int(name), signal.SIGKILL)
                killed += 1
        except (OSError, ValueError, IndexError):
            continue
    return killed
