"""Converge benchmark: what a no-change `site.yml` run costs against a floor.

The floor is a playbook of 48 no-op tasks a host (``ansible.builtin.ping``, one
round trip each) over the same connection plugin and inventory, timed in the
same run: the time a role would take that paid one round trip per task. The
roles' no-change run is reported as a ratio of that floor. Goal: <= 0.25x.

With ``--scale N`` it also creates N more container hosts (``sandbox-scale-*``,
the demo's base image and the same connection plugin), converges them with
``site.yml`` (first run and no-change run) and prints the time per host, then
removes them (``--keep`` leaves them).

Needs the demo fleet (``make demo``), root and podman::

    .venv/bin/python bench/bench_converge.py [--runs 3] [--scale 30] [--keep]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEMO = os.path.join(REPO, "inventories", "demo")
BIN = os.path.dirname(sys.executable)
GOAL = 0.25
FLOOR_TASKS = 48


def env() -> dict[str, str]:
    return {**os.environ, "CONTAINERS_CONF": os.path.join(REPO, "containers.conf"),
            "ANSIBLE_COLLECTIONS_PATH": os.path.join(REPO, ".collections"),
            "ANSIBLE_CONFIG": os.path.join(REPO, "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
            "PATH": f"{BIN}:{os.environ.get('PATH', '')}"}


def playbook(inventory: str, book: str, *extra: str) -> tuple[float, str]:
    """Seconds a playbook run took, and its output; fails on a failed run."""
    start = time.perf_counter()
    proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", inventory, book,
                           *extra], cwd=REPO, env=env(), capture_output=True, text=True,
                          check=False)
    took = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"{book} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}")
    return took, proc.stdout


def changed(out: str) -> int:
    return sum(int(n) for n in re.findall(r"changed=(\d+)", out))


def floor_book(folder: str, hosts: str) -> str:
    path = os.path.join(folder, "floor.yml")
    tasks = "".join(f"    - name: No-op {i}\n      ansible.builtin.ping:\n"
                    for i in range(FLOOR_TASKS))
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(f"---\n- name: The floor\n  hosts: {hosts}\n  gather_facts: false\n"
                 f"  tasks:\n{tasks}")
    return path


def compare(inventory: str, hosts: str, runs: int, folder: str) -> tuple[float, float]:
    """Median no-change site.yml and floor seconds, alternated."""
    floor = floor_book(folder, hosts)
    took, out = playbook(inventory, "site.yml", "--limit", hosts)  # converged first
    site_times, floor_times = [], []
    for _ in range(runs):
        took, out = playbook(inventory, "site.yml", "--limit", hosts)
        if changed(out):
            sys.exit(f"a no-change run changed something:\n{out[-4000:]}")
        site_times.append(took)
        floor_times.append(playbook(inventory, floor)[0])
    return statistics.median(site_times), statistics.median(floor_times)


def scale_inventory(folder: str, n: int) -> str:
    """The demo inventory's spec layers with n developer hosts like sandbox-demo-1."""
    root = os.path.join(folder, "scale")
    shutil.copytree(os.path.join(DEMO, "sandbox"), os.path.join(root, "sandbox"))
    hosts = "".join(f"            sandbox-scale-{i}:\n" for i in range(1, n + 1))
    with open(os.path.join(root, "hosts.yml"), "w", encoding="utf-8") as fh:
        fh.write("all:\n  vars:\n    sandbox_os: linux\n  children:\n    demo:\n"
                 "      vars:\n        ansible_connection: agent_sandbox_podman\n"
                 "        ansible_become: false\n"
                 "        ansible_python_interpreter: /usr/bin/python3\n"
                 "        sandbox_users: [{name: alice}]\n"
                 "        sandbox_repositories: [/home/alice/src/app]\n"
                 "      children:\n        developers:\n          hosts:\n" + hosts)
    return root


def scale(n: int, runs: int, keep: bool, folder: str) -> None:
    inventory = scale_inventory(folder, n)
    start = time.perf_counter()
    playbook(inventory, "playbooks/demo-up.yml")
    made = time.perf_counter() - start
    try:
        first, out = playbook(inventory, "site.yml", "-f", "50")
        again = []
        for _ in range(runs):
            took, out = playbook(inventory, "site.yml", "-f", "50")
            if changed(out):
                sys.exit(f"a no-change run of the scale hosts changed something:\n{out[-4000:]}")
            again.append(took)
        print(f"{n} hosts created in {made:.1f} s")
        print(f"first converge: {first:.1f} s, {first / n:.2f} s a host (forks 50)")
        med = statistics.median(again)
        print(f"no-change run:  {med:.1f} s, {med / n:.2f} s a host (median of {runs})")
    finally:
        if not keep:
            playbook(inventory, "playbooks/demo-down.yml")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--scale", type=int, default=0, help="also converge N more hosts")
    ap.add_argument("--keep", action="store_true", help="keep the scale hosts")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        site, floor = compare(DEMO, "demo", args.runs, folder)
        ratio = site / floor
        print(f"no-change site.yml on the 3 demo hosts: {site:.2f} s (median of {args.runs})")
        print(f"floor, {FLOOR_TASKS} no-op tasks a host:          {floor:.2f} s")
        print(f"ratio: {ratio:.2f}x (goal <= {GOAL}x: {'met' if ratio <= GOAL else 'NOT met'})"
              f"; load {os.getloadavg()[0]:.1f}")
        if args.scale:
            scale(args.scale, args.runs, args.keep, folder)


if __name__ == "__main__":
    main()
