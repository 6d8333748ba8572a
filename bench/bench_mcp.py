"""Benchmark the MCP server's start: how long a client waits for our tools.

Starts ``python -I -m agent_sandbox mcp DIR`` exactly as ``sandbox init``
renders it into the clients' MCP configs (stdio, newline-delimited JSON-RPC),
sends ``initialize`` at once, as the clients do, and times, from the spawn, in
two ways side by side, alternated in the same rounds: warm (this user's resident
server is up: the launcher hands it the session, ``mcp_launch``) and cold
(``AGENT_SANDBOX_MCP_RESIDENT=off``: the launcher serves the session itself, as
on a miss):

1. the ``initialize`` answer (goal: at most 300 ms at rest);
2. the ``tools/list`` answer sent right after ``notifications/initialized``
   (the point at which a client's first turn can carry our tools);
3. the server's CPU time up to its ``initialize`` answer (what a loaded
   machine stretches in wall time but not in CPU time; warm: the launcher's and
   the session's child's), beside the floors of the cold start:
   importing the SDK alone (plainly, and as the server does, with pydantic's
   ``defer_build``), and its protocol types package alone (``mcp_types``,
   which any process speaking MCP through the SDK must import), in CPU time.

Each run starts a new launcher process; the bare interpreter
(``python -I -S -c pass``) is timed in the same run, interleaved, as the
machine's yardstick. Bytecode is compiled first (``compileall``) so the figures
reflect an installed package, whatever ``PYTHONDONTWRITEBYTECODE`` says.

Run: ``.venv/bin/python bench/bench_mcp.py [--runs N]``.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import select
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PY = sys.executable
SRC = Path(__file__).resolve().parent.parent / "src"
TOOLS = {"run_privileged", "check_request", "sandbox_status"}
PROTOCOL = "2025-06-18"
# the floor: importing the SDK the server is built on, and nothing else
SDK_IMPORT = "import mcp.server.mcpserver"
# the same import as the server does it (``mcp_server._sdk_server_class``)
SDK_DEFERRED = "from agent_sandbox.mcp_server import _sdk_server_class; _sdk_server_class()"
TYPES_IMPORT = "import mcp_types"


def make_repo(root: Path) -> Path:
    """A repository prepared by ``sandbox init`` (no agent configs: only the server)."""
    from agent_sandbox.repo_init import init

    root.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    init(str(root), agents=[], mcp=True)
    return root


def _message(obj: dict[str, object]) -> bytes:
    return json.dumps(obj).encode() + b"\n"


class Server:
    """One ``sandbox mcp`` process and its stdout, read line by line."""

    def __init__(self, repo: Path, argv: list[str] | None = None,
                 env: dict[str, str] | None = None, resident: int | None = None) -> None:
        self.resident = resident
        self.spawned = time.perf_counter()
        self.proc = subprocess.Popen(argv or [PY, "-I", "-m", "agent_sandbox", "mcp", str(repo)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=env)
        self._buf = b""

    def send(self, obj: dict[str, object]) -> None:
        assert self.proc.stdin
        self.proc.stdin.write(_message(obj))
        self.proc.stdin.flush()

    def cpu(self) -> float:
        """CPU seconds the server has run so far (``/proc/PID/schedstat``, ns): what
        its start costs, which a loaded machine stretches in wall time but not here."""
        pids = [self.proc.pid]
        if self.resident:  # warm: the session is the resident's child
            with open(f"/proc/{self.resident}/task/{self.resident}/children") as fh:
                pids += [int(x) for x in fh.read().split()]
        total = 0
        for pid in pids:
            with open(f"/proc/{pid}/schedstat", encoding="ascii") as fh:
                total += int(fh.read().split()[0])
        return total / 1e9

    def answer(self, want_id: int, timeout: float = 30.0) -> tuple[dict[str, object], float]:
        """The response to request ``want_id`` and the seconds from the spawn to it."""
        assert self.proc.stdout
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while True:
            while b"\n" in self._buf:
                line, self._buf = self._buf.split(b"\n", 1)
                at = time.perf_counter()
                msg = json.loads(line)
                if msg.get("id") == want_id:
                    return msg, at - self.spawned
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise SystemExit(f"no answer to request {want_id} within {timeout:g} s")
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                raise SystemExit(f"the server exited before answering: {err}")
            self._buf += chunk

    def close(self) -> None:
        assert self.proc.stdin
        self.proc.stdin.close()  # end of input: the stdio server exits
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for f in (self.proc.stdout, self.proc.stderr):
            if f:
                f.close()


def one_start(repo: Path, argv: list[str] | None = None, env: dict[str, str] | None = None,
              resident: int | None = None) -> tuple[float, float, float]:
    srv = Server(repo, argv, env, resident)
    try:
        srv.send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": PROTOCOL, "capabilities": {},
            "clientInfo": {"name": "bench", "version": "1"}}})
        init, t_init = srv.answer(1)
        cpu_init = srv.cpu()
        result = init.get("result")
        if not isinstance(result, dict) or "serverInfo" not in result:
            raise SystemExit(f"initialize failed: {init}")
        srv.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        srv.send({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}})
        tools, t_tools = srv.answer(2)
        listed: Any = tools.get("result") or {}
        names = {t["name"] for t in listed.get("tools", [])}
        if names != TOOLS:
            raise SystemExit(f"tools/list answered {sorted(names)}, want {sorted(TOOLS)}")
        return t_init, t_tools, cpu_init
    finally:
        srv.close()


def timed(argv: list[str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one process."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(argv, check=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def row(name: str, xs: list[float]) -> str:
    xs = sorted(xs)
    p90 = xs[min(len(xs) - 1, round(0.9 * (len(xs) - 1)))]
    return (f"{name:<52} {statistics.median(xs) * 1000:9.1f} {p90 * 1000:9.1f} "
            f"{xs[0] * 1000:9.1f} ms")


def start_resident(state: Path) -> int:
    """This user's resident server for ``state``, started as a launcher does on a
    miss, and its pid once it listens (its log says so)."""
    from agent_sandbox import contract
    from agent_sandbox.mcp_launch import resident_dir, resident_file

    folder = Path(resident_dir())
    assert folder == state / "mcp"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    subprocess.Popen(contract.self_argv(PY, "mcp", "--resident"), cwd="/",
                     start_new_session=True, stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        log = Path(resident_file(".log"))
        lines = [x for x in (log.read_text().splitlines() if log.exists() else [])
                 if " listening on " in x]
        if lines and os.path.exists(resident_file(".sock")):
            return int(lines[-1].split("[", 1)[1].split("]", 1)[0])
        time.sleep(0.05)
    raise SystemExit("the resident server did not start")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    compileall.compile_dir(str(SRC / "agent_sandbox"), quiet=1)
    from agent_sandbox import contract

    with tempfile.TemporaryDirectory(prefix="bench-mcp-") as tmp:
        state = Path(tmp) / "user-state"
        os.environ[contract.STATE_DIR_ENV] = str(state)  # own registry, own resident
        os.environ["HOME"] = str(Path(tmp) / "home")  # init touches nothing of the user's
        os.environ.pop(contract.MCP_RESIDENT_ENV, None)
        Path(os.environ["HOME"]).mkdir()
        repo = make_repo(Path(tmp) / "repo")
        cold_env = {**os.environ, contract.MCP_RESIDENT_ENV: "off"}
        one_start(repo, env=cold_env)  # warm the page cache and write bytecode for the SDK
        resident = start_resident(state)
        try:
            one_start(repo, resident=resident)
            rows = _rounds(repo, args.runs, cold_env, resident)
        finally:
            os.kill(resident, 9)
    loads = rows.pop("load")
    print(f"interpreter: {PY}  (rounds: {args.runs}, warm and cold alternated; "
          f"load average: {min(loads):.1f}-{max(loads):.1f})")
    print(f"{'measurement':<52} {'median':>9} {'p90':>9} {'min':>9}")
    for name, xs in rows.items():
        print(row(name, xs))
    return 0


def _rounds(repo: Path, runs: int, cold_env: dict[str, str],
            resident: int) -> dict[str, list[float]]:
    names = ["bare interpreter: python -I -S -c pass",
             "warm: spawn -> initialize answer (goal <= 300)",
             "warm: spawn -> tools/list answer",
             "warm: CPU (launcher + session) to initialize",
             "cold: spawn -> initialize answer",
             "cold: spawn -> tools/list answer",
             "cold: CPU time up to the initialize answer",
             "the SDK alone: python -I -c 'import mcp.server.mcpserver'",
             "the SDK alone, CPU time",
             "the SDK alone as the server imports it, CPU time",
             "its protocol types alone: 'import mcp_types', CPU"]
    rows: dict[str, list[float]] = {n: [] for n in ["load", *names]}
    for i in range(runs):
        rows["load"].append(os.getloadavg()[0])
        rows[names[0]].append(timed([PY, "-I", "-S", "-c", "pass"])[0])
        order = (("warm", "cold") if i % 2 == 0 else ("cold", "warm"))
        for mode in order:
            if mode == "warm":
                t_init, t_tools, c_init = one_start(repo, resident=resident)
                at = 1
            else:
                t_init, t_tools, c_init = one_start(repo, env=cold_env)
                at = 4
            rows[names[at]].append(t_init)
            rows[names[at + 1]].append(t_tools)
            rows[names[at + 2]].append(c_init)
        wall, cpu = timed([PY, "-I", "-c", SDK_IMPORT])
        rows[names[7]].append(wall)
        rows[names[8]].append(cpu)
        rows[names[9]].append(timed([PY, "-I", "-c", SDK_DEFERRED])[1])
        rows[names[10]].append(timed([PY, "-I", "-c", TYPES_IMPORT])[1])
    return rows


if __name__ == "__main__":
    raise SystemExit(main())
