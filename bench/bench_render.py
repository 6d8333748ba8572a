"""Render benchmark: a generated fleet of 1,000 and 10,000 hosts.

Generates an inventory (three groups, Linux/macOS/Windows hosts, one or two
users and repositories each) in a temporary folder, with the example fleet's
spec layers, then renders every host through ``FleetRenderer`` without keeping
the artifacts. Each size runs in a fresh interpreter so peak RSS is its own.

Reports: inventory load time, render throughput (hosts/s, files/s, MB/s),
peak RSS of the process, and the peak Python heap while rendering (tracemalloc,
in a separate pass) to show that rendering memory does not grow with the fleet.
Goal: >= 2,000 hosts/s on a 2-core machine.

    .venv/bin/python bench/bench_render.py [--sizes 1000,10000]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import tracemalloc

from agent_sandbox.fleet import FleetRenderer

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(REPO, "inventories", "example-fleet")
GOAL = 2000.0
GROUPS = ("engineering", "data_science", "ci_runners")
OSES = ("linux", "linux", "macos", "windows")


def generate(root: str, n: int) -> None:
    """hosts.yml with n hosts plus the example fleet's spec layers."""
    shutil.copytree(os.path.join(EXAMPLE, "sandbox"), os.path.join(root, "sandbox"))
    lines = ["all:", "  vars:", "    sandbox_os: linux", "  children:"]
    per_group: dict[str, list[str]] = {g: [] for g in GROUPS}
    for i in range(n):
        group = GROUPS[i % 3]
        os_name = OSES[(i // 3) % 4] if group != "ci_runners" else "linux"
        home = {"linux": "/home", "macos": "/Users", "windows": "C:/Users"}[os_name]
        users = [f"u{i}"] + ([f"v{i}"] if i % 2 else [])
        repos = [f"{home}/{u}/src/repo{i}" for u in users]
        per_group[group].append(
            f"        h{i:06d}: {{sandbox_os: {os_name}, "
            f"sandbox_users: [{', '.join('{name: ' + u + '}' for u in users)}], "
            f"sandbox_repositories: [{', '.join(repos)}]}}"
        )
    for group in GROUPS:
        lines += [f"    {group}:", "      hosts:"] + per_group[group]
    with open(os.path.join(root, "hosts.yml"), "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")


def breakdown(fleet: FleetRenderer, n: int) -> dict[str, float]:
    """Microseconds per host spent in each renderer module (first n hosts)."""
    import importlib

    from agent_sandbox.render import RENDERERS

    out = {}
    hosts = list(itertools.islice(fleet.inventory, n))
    pairs = [(fleet.spec_for(h), fleet.facts(h)) for h in hosts]
    for name in RENDERERS:
        fn = importlib.import_module(name).render
        t0 = time.process_time()
        for spec, facts in pairs:
            for _ in fn(spec, facts):
                pass
        out[name.rsplit(".", 1)[1]] = (time.process_time() - t0) / n * 1e6
    return out


def measure(n: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="bench-render-") as root:
        generate(root, n)
        t0 = time.perf_counter()
        fleet = FleetRenderer.from_path(root)
        load_s = time.perf_counter() - t0

        hosts = iter(fleet.inventory)
        t0 = time.perf_counter()
        first = fleet.render_host(next(hosts))  # imports, template compilation, spec stack
        first_s = time.perf_counter() - t0
        files, size = len(first), sum(len(a.content) for a in first.values())
        del first
        t0, c0 = time.perf_counter(), time.process_time()
        for host in hosts:  # streaming: nothing is kept
            artifacts = fleet.render_host(host)
            files += len(artifacts)
            size += sum(len(a.content) for a in artifacts.values())
        render_s = time.perf_counter() - t0
        cpu_s = time.process_time() - c0
        rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        modules = breakdown(fleet, min(n, 1000))

        # memory pass (tracemalloc slows Python down, so it is not timed)
        fleet = FleetRenderer.from_path(root)
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        for _host, artifacts in fleet:
            del artifacts
        heap_mb = (tracemalloc.get_traced_memory()[1] - base) / 2**20
        tracemalloc.stop()
    return {"hosts": n, "load_s": load_s, "first_s": first_s, "render_s": render_s,
            "hosts_per_s": (n - 1) / render_s, "cpu_hosts_per_s": (n - 1) / cpu_s,
            "modules": modules,
            "files": files, "mb_rendered": size / 2**20, "peak_rss_mb": rss_mb,
            "render_heap_mb": heap_mb}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(measure(args.one)))
        return 0
    rows = []
    for n in (int(s) for s in args.sizes.split(",")):
        proc = subprocess.run([sys.executable, __file__, "--one", str(n)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            sys.stderr.write(proc.stderr)
            return 1
        rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    print(f"{'hosts':>7} {'load s':>7} {'1st host s':>10} {'render s':>9} {'hosts/s':>8} "
          f"{'CPU hosts/s':>11} "
          f"{'files':>8} {'MB out':>7} {'peak RSS MB':>12} {'render heap MB':>15}")
    for r in rows:
        print(f"{r['hosts']:>7} {r['load_s']:>7.2f} {r['first_s']:>10.3f} {r['render_s']:>9.2f} "
              f"{r['hosts_per_s']:>8.0f} {r['cpu_hosts_per_s']:>11.0f} {r['files']:>8} "
              f"{r['mb_rendered']:>7.1f} "
              f"{r['peak_rss_mb']:>12.1f} {r['render_heap_mb']:>15.2f}")
    print("\nCPU microseconds per host by renderer module (first 1,000 hosts):")
    for name, us in rows[-1]["modules"].items():
        print(f"  {name:<10} {us:>8.0f}")
    worst = min(r["hosts_per_s"] for r in rows)
    worst_cpu = min(r["cpu_hosts_per_s"] for r in rows)
    load1 = os.getloadavg()[0]
    print(f"\ngoal >= {GOAL:.0f} hosts/s: wall {'met' if worst >= GOAL else 'NOT met'} "
          f"(slowest {worst:.0f} hosts/s), CPU {'met' if worst_cpu >= GOAL else 'NOT met'} "
          f"(slowest {worst_cpu:.0f} hosts/s of one core); {os.cpu_count()} CPUs, "
          f"load average {load1:.1f}")
    print("CPU hosts/s counts only this process's CPU time: it is what the wall rate is on "
          "an otherwise idle machine.")
    print("load s: parsing hosts.yml; peak RSS includes the parsed inventory; render heap is "
          "the Python heap peak while rendering every host (tracemalloc)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
