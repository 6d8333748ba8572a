"""What judging reads at open costs the commands that read.

With ``**/`` globs in ``denyRead``, ``sandbox exec`` hands every open of the
command to the broker (``runtime/broker/reads.py``) instead of walking the tree
before the run; without them, reading is the kernel's alone. This times, side
by side in each round, reading commands in a tree of ``FILES`` small files
(and a git repository of it):

- ``grep -r`` over the tree (one open per file and folder: ``OPENS``),
- ``git status`` in the repository,
- a Python start that imports a few standard modules,

under no sandbox, bare ``bwrap`` (the floor), ``sandbox exec`` without and
with the globs, and srt with the globs (the one ``make setup`` installs, or
``BENCH_SRT``; srt finds its globs by a walk at every start). The table gives
the median wall time; the broker's cost per open is the ``grep`` difference
between ``sandbox exec`` with and without globs, divided by ``OPENS``.

    .venv/bin/python bench/bench_read_calls.py [ROUNDS]    # default 5
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
from bench_exec import SANDBOX, SRT

FOLDERS, PER_FOLDER = 100, 100
FILES = FOLDERS * PER_FOLDER
OPENS = FILES + FOLDERS + 1
GLOBS = ["**/.env", "**/*.pem"]
COMMANDS = {
    "grep -r": "grep -r zzz . >/dev/null; true",
    "git status": "git status --short >/dev/null",
    "python imports": "python3 -c 'import json, email.parser, http.client, asyncio'",
}
ENV = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "b",
       "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@b"}


def tree(root: Path) -> None:
    for d in range(FOLDERS):
        (root / f"d{d}").mkdir(parents=True)
        for f in range(PER_FOLDER):
            (root / f"d{d}" / f"f{f}.txt").write_text("hello\n")
    (root / ".env").write_text("SECRET=1\n")
    subprocess.run("git init -q && git add -A && git commit -qm t", shell=True, cwd=root,
                   env=ENV, check=True)


def settings(path: Path, work: Path, deny: list[str]) -> Path:
    path.write_text(json.dumps({
        "network": {"allowedDomains": [], "deniedDomains": []},
        "filesystem": {"denyRead": deny, "allowWrite": [str(work)], "denyWrite": []}}))
    return path


def timed(argv: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=ENV, check=False, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> int:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    srt = Path(os.environ.get("BENCH_SRT", str(SRT)))
    with tempfile.TemporaryDirectory(prefix="bench-read-") as tmp:
        work = Path(tmp) / "w"
        tree(work)
        plain = settings(Path(tmp) / "plain.json", work, [])
        globs = settings(Path(tmp) / "globs.json", work, GLOBS)
        bwrap = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
                 "--bind", str(work), str(work), "--unshare-all", "--die-with-parent",
                 "--chdir", str(work)]
        ways = {
            "none": lambda c: ["sh", "-c", c],
            "bwrap": lambda c: [*bwrap, "sh", "-c", c],
            "sandbox exec": lambda c: [str(SANDBOX), "exec", "--settings", str(plain), "--",
                                       "sh", "-c", c],
            "sandbox exec, globs": lambda c: [str(SANDBOX), "exec", "--settings", str(globs),
                                              "--", "sh", "-c", c],
        }
        if srt.exists():
            ways["srt, globs"] = lambda c: [str(srt), "-s", str(globs), "-c", c]
        times: dict[tuple[str, str], list[float]] = {}
        for _ in range(rounds):
            for cname, cmd in COMMANDS.items():
                for wname, way in ways.items():
                    times.setdefault((cname, wname), []).append(timed(way(cmd), work))
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"median wall time, s ({rounds} rounds; {FILES} files)")
    print(f"{'':<16}" + "".join(f"{w:>22}" for w in ways))
    for cname in COMMANDS:
        print(f"{cname:<16}" + "".join(f"{med[(cname, w)]:>22.3f}" for w in ways))
    per_open = (med[("grep -r", "sandbox exec, globs")] - med[("grep -r", "sandbox exec")]) / OPENS
    print(f"broker cost per open (grep -r, {OPENS} opens): {per_open * 1e6:.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
