"""What the broker costs a command that writes many names.

Every call that creates, opens for writing, renames, links or removes a name in
``sandbox exec`` goes through the broker (``runtime.broker``): judged and made
by the launcher. This times one write-heavy command, side by side in each
round, under:

- ``sandbox exec`` (the installed ``.venv/bin/sandbox``),
- bare ``bwrap`` with the same folder bound writable (no broker: the floor),
- srt (``.tools/node_modules/.bin/srt``, when ``make setup`` installed it),
- no sandbox at all.

The command (one Python process, so the count of calls is known) makes
``FOLDERS`` folders and ``FILES`` files in them, renames a quarter of the files,
links and removes another quarter: about ``FILES * 1.75 + FOLDERS`` brokered
calls. The table gives the median wall time of each, and the broker's cost per
call (``sandbox exec`` minus bare bwrap, divided by the calls), measured
against a run of ``true`` under both (the start of a sandbox is not a call).

    .venv/bin/python bench/bench_write_calls.py [ROUNDS]    # default 7
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_exec import SRT

REPO = Path(__file__).resolve().parents[1]
SANDBOX = REPO / ".venv" / "bin" / "sandbox"
FOLDERS, FILES = 100, 2000
CALLS = FOLDERS + FILES + FILES // 4 * 3  # mkdir, create, rename, link and unlink

WORK = f"""
import os
os.makedirs("t", exist_ok=True)
for d in range({FOLDERS}):
    os.mkdir(f"t/d{{d}}")
for i in range({FILES}):
    with open(f"t/d{{i % {FOLDERS}}}/f{{i}}", "w") as f:
        f.write("x")
for i in range(0, {FILES}, 4):
    os.rename(f"t/d{{i % {FOLDERS}}}/f{{i}}", f"t/d{{i % {FOLDERS}}}/g{{i}}")
for i in range(1, {FILES}, 4):
    os.link(f"t/d{{i % {FOLDERS}}}/f{{i}}", f"t/d{{i % {FOLDERS}}}/h{{i}}")
    os.unlink(f"t/d{{i % {FOLDERS}}}/h{{i}}")
"""


def timed(argv: list[str], cwd: Path) -> float:
    shutil.rmtree(cwd / "t", ignore_errors=True)
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> int:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    py = os.path.realpath(sys.executable)
    with tempfile.TemporaryDirectory(prefix="bench-write-") as tmp:
        work = Path(tmp) / "w"
        work.mkdir()
        settings = Path(tmp) / "settings.json"
        settings.write_text(json.dumps({
            "network": {"allowedDomains": [], "deniedDomains": []},
            "filesystem": {"denyRead": [], "allowWrite": [str(work)], "denyWrite": []}}))
        bwrap = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
                 "--bind", str(work), str(work), "--unshare-all", "--die-with-parent",
                 "--chdir", str(work)]
        rows: dict[str, list[str]] = {
            "none": [py, "-I", "-c", WORK],
            "bwrap": [*bwrap, py, "-I", "-c", WORK],
            "sandbox exec": [str(SANDBOX), "exec", "--settings", str(settings), "--",
                             py, "-I", "-c", WORK],
            "bwrap: true": [*bwrap, "true"],
            "sandbox exec: true": [str(SANDBOX), "exec", "--settings", str(settings), "--",
                                   "true"],
        }
        if SRT.exists():
            rows["srt"] = [str(SRT), "-s", str(settings), "-c", f"{py} -I -c '{WORK}'"]
        times: dict[str, list[float]] = {k: [] for k in rows}
        for _ in range(rounds):
            for name, argv in rows.items():
                times[name].append(timed(argv, work))
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{'command':<22} {'median s':>9}   ({rounds} rounds, {CALLS} write calls each)")
    for name, value in med.items():
        print(f"{name:<22} {value:>9.3f}")
    per_call = ((med["sandbox exec"] - med["sandbox exec: true"])
                - (med["bwrap"] - med["bwrap: true"])) / CALLS
    print(f"broker cost per write call: {per_call * 1e6:.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
