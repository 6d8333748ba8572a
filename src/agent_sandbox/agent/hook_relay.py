"""``sandbox hook`` inside ``sandbox agent``: hand the hook to the host.

A client run by ``sandbox agent`` starts our hooks inside the sandbox, where the
audit log and the approval queue are read-only. ``agent.run`` sets
``AGENT_SANDBOX_HOOK_RELAY`` to a port of the sandbox's own loopback where the
host side listens; this module sends the hook's arguments and input there and
prints the answer the host-side hook gave.

The variable alone is not trusted: a client's settings can set environment
variables for its hooks (Claude Code's ``env``), and outside a sandbox a
listener on that port could be anybody's. The relay is used only where this
process is provably inside one of our sandboxes: the runtime's own package is
on a read-only mount and the network namespace has no interface but ``lo``.
Anywhere else, and on any error, the hook refuses (fail closed), never allows.

Stdlib only (the hook's fast path).
"""

from __future__ import annotations

import os
import sys


def inside_sandbox() -> bool:
    """Whether this process runs in one of our sandboxes (see the module doc)."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        if not os.statvfs(package).f_flag & os.ST_RDONLY:
            return False
        with open("/proc/net/dev", encoding="ascii", errors="replace") as fh:
            names = [line.split(":", 1)[0].strip() for line in fh.read().splitlines()[2:]]
    except OSError:
        return False
    return names == ["lo"]


def relay(args: list[str], port_text: str) -> int:
    from agent_sandbox.hooks.tool_call import refuse

    from .hook_frames import MAX_ANSWER, MAX_REQUEST, recv_frame, send_frame

    agent, event = [*args, "", ""][:2]
    try:
        port = int(port_text)
        if not 1 <= port <= 65535 or len(args) != 2:
            raise ValueError(port_text)
    except ValueError:
        return refuse(agent, event, "hook relay: malformed relay settings")
    if not inside_sandbox():
        return refuse(agent, event, "hook relay requested outside a `sandbox agent` sandbox; "
                                    "refused (unset AGENT_SANDBOX_HOOK_RELAY)")
    limit = MAX_REQUEST - 1024
    try:
        stdin = sys.stdin.buffer.read(limit + 1)
        if len(stdin) > limit:
            return refuse(agent, event, "hook input is larger than 8 MiB")
        import socket

        with socket.create_connection(("127.0.0.1", port)) as conn:
            send_frame(conn, {"argv": args,
                              "stdin": stdin.decode("utf-8", "surrogateescape")})
            answer = recv_frame(conn, MAX_ANSWER)
        rc, out, err = answer["rc"], answer["stdout"], answer["stderr"]
        if not (isinstance(rc, int) and isinstance(out, str) and isinstance(err, str)):
            raise ValueError("malformed answer")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return refuse(agent, event, f"hook relay failed: {exc}")
    sys.stdout.write(out)
    sys.stdout.flush()
    sys.stderr.write(err)
    sys.stderr.flush()
    return rc
