"""What-if measurement: the MCP server's start if the SDK were already imported.

Not a feature: the figure behind a design decision. Importing the official SDK
costs more CPU than the 300 ms ``initialize`` goal (``bench_mcp.py`` shows its
protocol types package alone near 400 ms), so no server that imports it on the
client's clock can meet the goal. This measures the alternative: a process
that imported the SDK and ``agent_sandbox.mcp_server`` beforehand, listening
on a Unix socket in a private folder, forks one child per session; the command
the client starts is a stdlib-only launcher that passes its own stdin and
stdout to the child (``SCM_RIGHTS``) with the repository it was started for,
and waits until the child ends. The child then runs the unchanged
``mcp_server.serve(repo)``: the SDK still does all the protocol work.

It is timed exactly as ``bench_mcp.py`` times ``sandbox mcp`` (same client,
same repository, same checks of the answers). The real implementation
(``mcp_launch`` and ``mcp_resident``, whose warm sessions ``bench_mcp.py``
times) adds what this prototype leaves out: who starts the resident, the
identity of the installed code, the peer's uid and confinement, the client's
folder, environment, umask and limits, the fallback to a cold start; this
stays as the floor of the design, with none of those checks.

Run: ``.venv/bin/python bench/bench_mcp_preimported.py [--runs N]``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_mcp

RESIDENT = r"""
import array, os, signal, socket, sys
from agent_sandbox import mcp_server
mcp_server._sdk_server_class()          # the SDK, imported before any client asks
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
listener = socket.socket(socket.AF_UNIX)
listener.bind(sys.argv[1])
listener.listen(16)
print("ready", flush=True)
while True:
    conn, _ = listener.accept()
    fds = array.array("i")
    msg, anc, _, _ = conn.recvmsg(4096, socket.CMSG_SPACE(2 * fds.itemsize))
    for _level, _kind, data in anc:
        fds.frombytes(data[:len(data) - len(data) % fds.itemsize])
    if os.fork() == 0:
        listener.close()
        os.dup2(fds[0], 0)
        os.dup2(fds[1], 1)
        for fd in fds:
            os.close(fd)
        mcp_server.serve(msg.decode())
        os._exit(0)
    for fd in fds:
        os.close(fd)
    conn.close()
"""

LAUNCHER = r"""
import array, socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendmsg([sys.argv[2].encode()],
          [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0, 1]).tobytes())])
s.recv(1)   # until the session's child ends
"""


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    py = bench_mcp.PY
    with tempfile.TemporaryDirectory(prefix="bench-mcp-pre-") as tmp:
        from agent_sandbox import contract

        os.environ[contract.STATE_DIR_ENV] = str(Path(tmp) / "user-state")
        os.environ["HOME"] = str(Path(tmp) / "home")
        Path(os.environ["HOME"]).mkdir()
        repo = bench_mcp.make_repo(Path(tmp) / "repo")
        private = Path(tmp) / "run"
        private.mkdir(mode=0o700)
        sock = str(private / "mcp.sock")
        resident = subprocess.Popen([py, "-I", "-c", RESIDENT, sock], stdout=subprocess.PIPE)
        try:
            assert resident.stdout and resident.stdout.readline() == b"ready\n"
            argv = [py, "-I", "-S", "-c", LAUNCHER, sock, str(repo)]
            bench_mcp.one_start(repo, argv)  # warm
            init, tools = [], []
            for _ in range(args.runs):
                t_init, t_tools, _cpu = bench_mcp.one_start(repo, argv)
                init.append(t_init)
                tools.append(t_tools)
        finally:
            resident.kill()
            resident.wait()
    print(f"interpreter: {py}  (sessions: {args.runs}, "
          f"load average: {os.getloadavg()[0]:.1f})")
    print(f"{'measurement':<52} {'median':>9} {'p90':>9} {'min':>9}")
    print(bench_mcp.row("pre-imported: spawn -> initialize answer", init))
    print(bench_mcp.row("pre-imported: spawn -> tools/list answer", tools))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
