"""Counts for the differential containment suite, per class: how many inputs,
how many the engine allows, how many of those had a forbidden effect.

Run from the repository root (any engine can be measured by putting its
``src`` first on PYTHONPATH):

    PYTHONPATH=src:. .venv/bin/python -m tests.approval.containment_report
"""

from __future__ import annotations

import collections
import os
import sys

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_sandbox.spec.rules import Verdict

from . import test_differential as suite


def main() -> int:
    os.environ["PATH"] = "/usr/bin:/bin"
    os.environ.pop("CDPATH", None)
    counts: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0, 0])
    for cls, shape, client, data in suite.CASES:
        v, effects = suite.verdict_and_effects(shape, client, data, suite.fresh())
        counts[cls][0] += 1
        counts[cls][1] += v in (Verdict.ALLOW, Verdict.OBSERVE)
        counts[cls][2] += bool(effects)
    generated = [0, 0, 0]

    @settings(max_examples=400, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(command=st.one_of(suite.command_lines, suite.focused))
    def run(command: str) -> None:
        v, effects = suite.verdict_and_effects(
            "bash", "claude", {"tool_name": "Bash", "tool_input": {"command": command}},
            suite.fresh())
        generated[0] += 1
        generated[1] += v in (Verdict.ALLOW, Verdict.OBSERVE)
        generated[2] += bool(effects)

    run()
    print(f"{'class':<50} {'inputs':>7} {'allowed':>8} {'forbidden effect':>17}")
    for cls, (n, a, e) in counts.items():
        print(f"{cls:<50} {n:7} {a:8} {e:17}")
    total = [sum(c[i] for c in counts.values()) for i in range(3)]
    print(f"{'hand-written total':<50} {total[0]:7} {total[1]:8} {total[2]:17}")
    print(f"{'generated (Hypothesis, derandomized)':<50} {generated[0]:7} {generated[1]:8} "
          f"{generated[2]:17}")
    return 1 if total[2] or generated[2] else 0


if __name__ == "__main__":
    sys.exit(main())
