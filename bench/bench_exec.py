"""Cold start of ``sandbox exec -- true`` against srt, bare bwrap, gVisor and Codex.

Each round runs every command once, in turn, so load on the machine falls on
all of them alike; the table shows the median, the spread (25th-75th
percentile and the 90th percentile) of wall time, the CPU time of each process
tree, and the ratios the goals are stated in: at most 1/5 of srt, at most 3x
bare bwrap, and no slower than Codex's native Linux sandbox.

``sandbox exec`` is the installed command (``.venv/bin/sandbox``): every run
starts a new sandbox (namespaces, mounts, seccomp, proxy ports). The row
"planned afresh" (shown only when the installed command is the native
launcher, which keeps a plan cache) is the same command with the cache off
(``AGENT_SANDBOX_NO_PLAN_CACHE=1``): what a run costs after the settings or
the filesystem it depends on changed. The row "sandbox-py" is the Python
entry point called directly (``.venv/bin/sandbox-py``, when installed): what
every run costs without a native launcher in front.

The others, each with the flags that work on this machine:

- ``srt -s SETTINGS -c true``: Anthropic's sandbox-runtime from
  ``.tools/node_modules`` (``make setup`` installs it), same settings file.
- ``bwrap --unshare-net ... true``: bubblewrap alone, the floor.
- ``runsc --network=none do true``: gVisor; ``runsc do`` needs root, and the
  row says "not run" with the reason otherwise.
- ``codex sandbox -- true``: Codex's native Linux sandbox. Codex CLI 0.171.0
  runs it as ``codex sandbox [COMMAND]...``; the ``linux`` subcommand of earlier
  releases is gone (``codex sandbox linux -- true`` now tries to run a program
  named ``linux``). Two rows: the npm entry point (a Node script that starts
  the native binary) and the native binary itself. The first
  ``.tools/**/node_modules/.bin/codex`` found is used; when there is none,
  the bench installs the pinned ``@openai/codex`` into ``.tools/bench`` with
  npm and says so.

With ``BENCH_EXEC_AGAINST=DIR`` (another checkout of the project, set up with
``make setup``), one more row runs that checkout's ``.venv/bin/sandbox`` the same
way, alternated with the others: a change measured against what it changed.

    .venv/bin/python bench/bench_exec.py [ROUNDS]      # default 30
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SANDBOX = REPO / ".venv" / "bin" / "sandbox"
# the newest srt make setup installs (node 24 from PyPI), else the one Debian's node runs
SRT = next((p for p in (REPO / ".tools/srt-newest/srt", REPO / ".tools/node_modules/.bin/srt")
            if p.exists()), REPO / ".tools/node_modules/.bin/srt")
BWRAP = shutil.which("bwrap") or "bwrap"
RUNSC = shutil.which("runsc")
CODEX_VERSION = "0.171.0"  # the version the agent clients' bootstrap pins
CODEX_BENCH_DIR = REPO / ".tools" / "bench"
OURS = "sandbox exec -- true"
FRESH = "  planned afresh"
PY_ENTRY = "  sandbox-py (Python entry)"
SANDBOX_PY = REPO / ".venv" / "bin" / "sandbox-py"
BARE = "bwrap --unshare-net ... true"
SRT_ROW = "srt -c true"
RUNSC_ROW = "runsc do true"
CODEX_NPM = "codex sandbox -- true (npm)"
CODEX_NATIVE = "codex sandbox -- true (native)"
AGAINST_ROW = "  other checkout (AGAINST)"


def timed(argv: list[str], cwd: str) -> tuple[float, float, bytes]:
    """(wall ms, CPU ms of the whole process tree: user + system, stderr)."""
    env = None
    if argv[0] == "env":
        n = 1
        while "=" in argv[n]:
            n += 1
        env = dict(os.environ, **dict(a.split("=", 1) for a in argv[1:n]))
        argv = argv[n:]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    r = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise SystemExit(f"{argv[0]} failed ({r.returncode}): {r.stderr.decode()[-500:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed * 1000, cpu * 1000, r.stderr


def codex_entry() -> tuple[Path | None, str]:
    """The Codex CLI's npm entry point: one already under .tools/, or the pinned
    version installed into .tools/bench now. (path or None, a note to print)."""
    found = sorted((REPO / ".tools").glob("**/node_modules/.bin/codex"))
    if found:
        return found[0], f"codex: using {found[0].relative_to(REPO)}"
    if shutil.which("npm") is None:
        return None, "codex: not installed under .tools/ and npm is missing; codex rows skipped"
    print(f"note: no codex under .tools/; installing @openai/codex@{CODEX_VERSION} into "
          f"{CODEX_BENCH_DIR.relative_to(REPO)} with npm", flush=True)
    CODEX_BENCH_DIR.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["npm", "install", "--silent", "--no-audit", "--no-fund", "--prefix",
                        str(CODEX_BENCH_DIR), f"@openai/codex@{CODEX_VERSION}"],
                       capture_output=True, text=True, timeout=600)
    entry = CODEX_BENCH_DIR / "node_modules" / ".bin" / "codex"
    if r.returncode != 0 or not entry.exists():
        return None, f"codex: npm install failed ({r.returncode}): {r.stderr.strip()[-300:]}"
    return entry, (f"codex: installed @openai/codex@{CODEX_VERSION} into "
                   f"{CODEX_BENCH_DIR.relative_to(REPO)} (none was under .tools/)")


def codex_native(entry: Path) -> Path | None:
    """The native binary the npm entry point starts (the platform package's vendor/)."""
    modules = entry.resolve().parents[3]  # node_modules/@openai/codex/bin/codex.js
    found = sorted(modules.glob("@openai/codex-linux-*/vendor/*/bin/codex"))
    found += sorted(modules.glob("@openai/codex/vendor/*/codex/codex"))
    return found[0] if found else None


def native_launcher() -> bool:
    """Whether the installed ``sandbox`` is the native launcher (a binary) rather
    than the Python entry point (a script)."""
    try:
        with SANDBOX.open("rb") as fh:
            return fh.read(2) != b"#!"
    except OSError:
        return False


def works(name: str, argv: list[str], cwd: str, notes: list[str]) -> bool:
    try:
        r = subprocess.run(argv, cwd=cwd, capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        notes.append(f"{name}: not run ({e})")
        return False
    if r.returncode != 0:
        tail = r.stderr.decode(errors="replace").strip().splitlines()[-1:] or [""]
        notes.append(f"{name}: not run, exit {r.returncode}: {tail[0][:200]}")
        return False
    return True


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[int(q * (len(s) - 1))]


def main() -> int:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    # the package's bytecode as an installed package has it (a shell that sets
    # PYTHONDONTWRITEBYTECODE would otherwise measure recompiling edited modules)
    import compileall

    against = os.environ.get("BENCH_EXEC_AGAINST")
    for checkout in (REPO, *([Path(against)] if against else [])):
        compileall.compile_dir(str(checkout / "src" / "agent_sandbox"), quiet=1)
    work = tempfile.mkdtemp(prefix="bench-exec-")
    # the settings file outside the writable root (sandbox exec refuses one inside it)
    settings_dir = tempfile.mkdtemp(prefix="bench-exec-settings-")
    settings = Path(settings_dir) / "srt-settings.json"
    settings.write_text(json.dumps({
        "network": {"allowedDomains": ["github.com", "*.github.com", "pypi.org",
                                       "files.pythonhosted.org"], "deniedDomains": []},
        "filesystem": {"denyRead": ["~/.ssh", "~/.aws", "**/.env"], "allowWrite": [work],
                       "denyWrite": []},
    }))
    notes: list[str] = []
    launcher = native_launcher()
    cmds: dict[str, list[str]] = {
        OURS: ["env", "AGENT_SANDBOX_TRACE=1", str(SANDBOX), "exec", "--settings", str(settings),
               "--", "true"],
    }
    if launcher:  # the plan cache exists only behind the native launcher
        cmds[FRESH] = ["env", "AGENT_SANDBOX_NO_PLAN_CACHE=1", str(SANDBOX), "exec",
                       "--settings", str(settings), "--", "true"]
    if against:
        cmds[AGAINST_ROW] = [str(Path(against) / ".venv" / "bin" / "sandbox"), "exec",
                             "--settings", str(settings), "--", "true"]
        notes.append(f"other checkout: {against}")
    if SANDBOX_PY.exists():  # what runs when there is no native launcher in front of it
        cmds[PY_ENTRY] = [str(SANDBOX_PY), "exec", "--settings", str(settings), "--", "true"]
    cmds |= {
        BARE: [BWRAP, "--ro-bind", "/", "/", "--dev", "/dev", "--proc",
               "/proc", "--unshare-net", "--unshare-pid",
               "--die-with-parent", "true"],
    }
    if SRT.exists():
        cmds[SRT_ROW] = [str(SRT), "-s", str(settings), "-c", "true"]
    else:
        print(f"note: {SRT} missing (make setup installs it); srt column skipped")
    if RUNSC is None:
        notes.append("runsc: not run (not installed; make setup installs it)")
    elif os.geteuid() != 0:
        notes.append("runsc: not run (`runsc do` needs root)")
    elif works(RUNSC_ROW, [RUNSC, "--network=none", "do", "true"], work, notes):
        cmds[RUNSC_ROW] = [RUNSC, "--network=none", "do", "true"]
    entry, where = codex_entry()
    notes.append(where)
    if entry is not None:
        if works(CODEX_NPM, [str(entry), "sandbox", "--", "true"], work, notes):
            cmds[CODEX_NPM] = [str(entry), "sandbox", "--", "true"]
        native = codex_native(entry)
        if native is None:
            notes.append("codex: native binary not found beside the npm entry point")
        elif works(CODEX_NATIVE, [str(native), "sandbox", "--", "true"], work, notes):
            cmds[CODEX_NATIVE] = [str(native), "sandbox", "--", "true"]
    times: dict[str, list[float]] = {k: [] for k in cmds}
    cpu: dict[str, list[float]] = {k: [] for k in cmds}
    # each command in a working directory of its own (all below the writable root),
    # so that what one tool leaves behind (mount points, placeholders) meets no other
    cwd = {k: os.path.join(work, f"cwd{i}") for i, k in enumerate(cmds)}
    for d in cwd.values():
        os.mkdir(d)
    for k, argv in cmds.items():  # warm the page cache once
        timed(argv, cwd[k])
    _, _, trace = timed(cmds[OURS], cwd[OURS])
    if launcher and b"plan replayed" not in trace:
        print("note: sandbox exec did not replay its plan: "
              + trace.decode(errors="replace").strip())
    load = os.getloadavg()[0]
    replayed = 0
    for _ in range(rounds):
        for name, argv in cmds.items():
            wall, used, err = timed(argv, cwd[name])
            times[name].append(wall)
            cpu[name].append(used)
            replayed += name == OURS and b"plan replayed" in err
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(settings_dir, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    p90 = {k: percentile(v, 0.9) for k, v in times.items()}
    iqr = {k: (percentile(v, 0.25), percentile(v, 0.75)) for k, v in times.items()}
    cmed = {k: statistics.median(v) for k, v in cpu.items()}
    ours, bare = med[OURS], med[BARE]
    print(f"cold start, {rounds} rounds, {os.cpu_count()} CPUs, "
          f"load average {load:.2f} -> {os.getloadavg()[0]:.2f}")
    print(f"{'command':32} {'median ms':>10} {'p90 ms':>8} {'CPU ms':>8} {'p25-p75 ms':>14}")
    for k in cmds:
        spread = f"{iqr[k][0]:.1f}-{iqr[k][1]:.1f}"
        print(f"{k:32} {med[k]:10.1f} {p90[k]:8.1f} {cmed[k]:8.1f} {spread:>14}")
    if launcher:
        print(f"  sandbox exec replayed a plan in {replayed} of {rounds} runs "
              "(AGENT_SANDBOX_TRACE=1 on that row)")
    else:
        print(f"  sandbox exec: {SANDBOX.relative_to(REPO)} is the Python entry point "
              "(no native launcher, no plan cache)")
    for n in notes:
        print(f"  {n}")
    print()
    print(f"sandbox exec / bare bwrap : {ours / bare:5.2f}x   (goal <= 3x)")
    fresh = med.get(FRESH)
    if fresh:
        print(f"  planned afresh / bwrap  : {fresh / bare:5.2f}x")
    if SRT_ROW in med:
        srt = med[SRT_ROW]
        print(f"sandbox exec / srt        : {ours / srt:5.3f}    (goal <= 0.200, i.e. 1/5)")
        print(f"srt / sandbox exec        : {srt / ours:5.1f}x faster")
        ratio = cmed[OURS] / cmed[SRT_ROW]
        print(f"CPU time, sandbox exec / srt: {ratio:.3f}")
        if fresh:
            print(f"  planned afresh / srt    : {fresh / srt:5.3f}")
    if PY_ENTRY in med and SRT_ROW in med:
        print(f"  sandbox-py / srt        : {med[PY_ENTRY] / med[SRT_ROW]:5.3f}")
    for row in (CODEX_NATIVE, CODEX_NPM):
        if row in med:
            r = ours / med[row]
            verdict = "met" if r <= 1.0 else "NOT met"
            print(f"sandbox exec / {row:31}: {r:5.2f}x   (goal <= 1.00: {verdict})")
            if fresh:
                print(f"  planned afresh / {row:27}: {fresh / med[row]:5.2f}x")
            if PY_ENTRY in med:
                print(f"  sandbox-py / {row:31}: {med[PY_ENTRY] / med[row]:5.2f}x")
    if RUNSC_ROW in med:
        print(f"sandbox exec / runsc do   : {ours / med[RUNSC_ROW]:5.2f}x")
    if AGAINST_ROW in med:
        print(f"sandbox exec / other checkout: {ours / med[AGAINST_ROW]:5.2f}x wall, "
              f"{cmed[OURS] / cmed[AGAINST_ROW]:5.2f}x CPU")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
