"""Credential broker benchmark: issue plus revoke of a database credential
against a real OpenBao (``bao server -dev``) and a real PostgreSQL 15 started
for the run (the tests' own helpers), the way an action run pays for it: the
role written, the user created, the lease journalled, then revoked and the
user dropped.

Goal: median issue + revoke <= 200 ms. Prints the median, 90th percentile and
each half; exit status 1 when the median misses the goal.
Usage: .venv/bin/python bench/bench_broker.py [--runs N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import hvac

from agent_sandbox.actions.broker import Broker
from agent_sandbox.spec.actions import Action
from openbao_dev import ROOT_TOKEN, bao_dev_server
from postgres_dev import connect_openbao, postgres_server

GOAL = 0.200


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=30)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-broker-") as tmp, postgres_server() as pg, \
            bao_dev_server(Path(tmp)) as address:
        with pg.connect(autocommit=True) as conn:
            conn.execute("CREATE ROLE app_owner NOLOGIN")
            conn.execute("CREATE SCHEMA shop AUTHORIZATION app_owner")
        client = hvac.Client(url=address, token=ROOT_TOKEN, timeout=10)
        connect_openbao(client, pg, "app", "postgres")
        action = Action.model_validate({
            "description": "migrate", "tier": "write", "image": "img", "argv": ["psql"],
            "connect": [f"127.0.0.1:{pg.port}"],
            "credential": {"engine": "database", "connection": "app",
                           "database_schema": "shop", "owner": "app_owner", "ttl": "5m"}})
        broker = Broker(client, str(Path(tmp) / "leases"))
        broker.revoke(broker.issue("bench", action, "warm-up"))
        issue, revoke, total = [], [], []
        for i in range(args.runs):
            t0 = time.perf_counter()
            cred = broker.issue("bench", action, f"req-{i}")
            t1 = time.perf_counter()
            broker.revoke(cred)
            t2 = time.perf_counter()
            issue.append(t1 - t0)
            revoke.append(t2 - t1)
            total.append(t2 - t0)
    median = statistics.median(total)
    p90 = statistics.quantiles(total, n=10)[-1] if len(total) >= 2 else median
    ok = median <= GOAL
    print(f"database credential, {args.runs} runs (OpenBao + PostgreSQL 15 on loopback)")
    print(f"  issue   median {statistics.median(issue) * 1000:7.1f} ms")
    print(f"  revoke  median {statistics.median(revoke) * 1000:7.1f} ms")
    print(f"  total   median {median * 1000:7.1f} ms  p90 {p90 * 1000:7.1f} ms  "
          f"goal {GOAL * 1000:.0f} ms  {'ok' if ok else 'MISS'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
