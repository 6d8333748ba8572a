"""Many sandboxes started at once over the same writable root.

Each run plans which protected names exist and creates placeholders for the
rest; a run that binds another run's placeholder must count as its user, or the
other run's cleanup deletes it between the plan and bwrap's bind ("Can't find
source path .../.git/config"). Judged by every run's exit status and by the root
being left clean afterwards.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

CHILD = (
    "import sys\n"
    "from agent_sandbox.runtime.run import run_sandboxed\n"
    "f = 'out.' + sys.argv[3]\n"
    "r = run_sandboxed(['sh', '-c', f'echo ok > {f} && rm {f}'], sys.argv[1], cwd=sys.argv[2])\n"
    "sys.stdout.write(f'{r.returncode} {r.stderr[:300]!r}')\n"
)


def test_parallel_runs_over_one_root_all_start_and_leave_it_clean(tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({
        "network": {"allowedDomains": [], "deniedDomains": []},
        "filesystem": {"denyRead": [], "allowWrite": [str(root)], "denyWrite": []},
    }))
    env = {**os.environ, "AGENT_SANDBOX_LOCK_DIR": str(tmp_path / "locks")}

    def one(i: int) -> str:
        proc = subprocess.run([sys.executable, "-c", CHILD, str(settings), str(root), str(i)],
                              capture_output=True, text=True, env=env, timeout=120)
        return proc.stdout.strip() or proc.stderr[-300:]

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, range(24)))
    failed = [r for r in results if not r.startswith("0 ")]
    assert failed == [], failed
    # the last run out removed every placeholder it and the others created
    assert sorted(os.listdir(root)) == []
