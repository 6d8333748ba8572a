"""An approved command (and a command the MCP server's ``run_privileged`` runs,
through the same ``run_command``) that prints without bound costs the host
process that runs it a bounded amount of memory, and its done record keeps the
head and tail of each stream with a note of what was trimmed. Judged from the
host: the runner process's own peak resident memory."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")

SIZE = 400_000_000
KEEP = 64 * 1024

RUNNER = textwrap.dedent("""
    import json, sys
    from agent_sandbox.approval.executor import run_command
    repo, command = sys.argv[1:]
    rec = run_command(repo, {"id": "20261201T000000-000000000001", "cwd": repo,
                             "params": {"command": command}})
    # VmHWM: this process's own peak (ru_maxrss would carry the forking parent's,
    # which Linux keeps across exec)
    rec["peak_kib"] = int(next(l for l in open("/proc/self/status")
                               if l.startswith("VmHWM:")).split()[1])
    print(json.dumps(rec))
""")


def test_an_approved_command_printing_without_bound_keeps_the_runner_small(
        repo: Path) -> None:
    command = (f"printf HEADOUT; head -c {SIZE} /dev/zero; printf TAILOUT; "
               f"printf HEADERR >&2; head -c {SIZE} /dev/zero >&2; printf TAILERR >&2")
    p = subprocess.run([sys.executable, "-c", RUNNER, str(repo), command], capture_output=True,
                       timeout=120, check=False)
    assert p.returncode == 0, p.stderr.decode(errors="replace")[-2000:]
    rec = json.loads(p.stdout)
    assert rec["peak_kib"] < 200 * 1024, f"the runner peaked at {rec['peak_kib']} KiB"
    assert rec["status"] == "completed" and rec["exit_code"] == 0, rec.get("reason")
    half, total = KEEP // 2, SIZE + 14
    for stream, name in (("stdout", "OUT"), ("stderr", "ERR")):
        text = rec[stream]
        assert text == (f"HEAD{name}" + "\0" * (half - 7)
                        + f"\n[... {total - KEEP} bytes trimmed ...]\n"
                        + "\0" * (half - 7) + f"TAIL{name}"), stream
