"""A flood of denied requests cannot fill the disk the audit lives on.

The real proxy (run as its service unit runs it) gets thousands of requests for
denied destinations, the same one again and again and then a new name each
time; its audit log must hold every denial (a record or a count in a summary),
grow by a bounded number of records, and still verify as a chain.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

from conftest import audit_records, free_port, write_settings

from agent_sandbox.runtime.proxy.denials import Denials

PY = sys.executable


def ask(port: int, host: str) -> bytes:
    with socket.create_connection(("127.0.0.1", port), 5) as s:
        s.sendall(f"GET http://{host}/ HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        return s.recv(64)


def test_a_flood_of_denials_is_counted_not_written_one_by_one(tmp_path: Path) -> None:
    audit = tmp_path / "audit"
    settings = write_settings(tmp_path / "s.json", {"network": {"allowedDomains":
                                                                ["allowed.example"]}})
    port = free_port()
    p = subprocess.Popen([PY, "-I", "-m", "agent_sandbox.runtime.proxy", "--settings",
                          str(settings), "--http", f"127.0.0.1:{port}", "--audit-dir",
                          str(audit)], stdout=subprocess.PIPE, text=True, cwd="/")
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        same, spread = 2000, 600
        for _ in range(same):
            assert ask(port, "denied.example").startswith(b"HTTP/1.1 403")
        for i in range(spread):
            assert ask(port, f"n{i}.denied.example").startswith(b"HTTP/1.1 403")
    finally:
        p.terminate()
        p.wait(timeout=60)
    recs = [x for x in audit_records(audit) if x.get("event") == "proxy.decision"]
    # every denial is in a record or a count
    counted = sum(x["repeats"] if x.get("summary") else 1 for x in recs)
    assert counted == same + spread, counted
    assert len(recs) <= 2 * 100 + 10, len(recs)  # bounded: not one record per request
    over = [x for x in recs if x.get("summary") == "over-burst"]
    assert over and over[0]["destinations"] > 0 and len(over[0]["names"]) <= 20
    verify = subprocess.run([PY, "-m", "agent_sandbox", "audit", "verify", str(audit)],
                            capture_output=True, text=True, timeout=120)
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_denials_are_summarised_per_window_and_nothing_is_lost() -> None:
    now = [1000.0]
    out: list[dict[str, object]] = []
    d = Denials(out.append, window=10, burst=2, clock=lambda: now[0])
    ev = {"host": "a", "port": 80, "reason": "r", "protocol": "http", "allowed": False}
    for _ in range(5):
        d.offer(ev)
    d.offer({**ev, "host": "b"})
    d.offer({**ev, "host": "c"})  # past the burst of 2
    d.offer({**ev, "host": "c"})
    assert [x.get("host") for x in out] == ["a", "b"]
    now[0] += 11  # the window ends: its summaries come with the next denial
    d.offer(ev)
    assert out[2] == {"protocol": "http", "host": "a", "port": 80, "reason": "r",
                      "outcome": None, "session": None, "allowed": False,
                      "summary": "repeats", "repeats": 4, "first": 1000.0, "last": 1000.0}
    assert out[3]["summary"] == "over-burst" and out[3]["repeats"] == 2
    assert out[3]["destinations"] == 1 and out[3]["names"] == ["c:80"]
    assert out[4] is ev
    d.flush()
    assert len(out) == 5  # nothing repeated in the new window: no summary
    assert json.dumps(out)  # plain JSON for the audit log
