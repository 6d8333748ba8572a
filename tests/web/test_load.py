"""Load: 200 WebSocket clients connected while 1,000 queued requests are decided through
the API by concurrent approvers (a tenth of them raced by a second, conflicting
decision). No decision is lost or applied twice: exactly one decision file and one
audit record per request, one 200 per request, and every client hears every decision
exactly once."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import requests

from agent_sandbox.queue import FolderQueue

from .conftest import Server, make_repo, start_server

CLIENTS = 200
REQUESTS = 1000
RACED = 100
APPROVERS = 12


def queue_requests(repo: Path) -> list[dict[str, Any]]:
    """1,000 requests as the hook queues them, their requester this (live) process. In
    ``grant`` mode: the requester uses an approval itself, so the server's crash recovery
    leaves the approved ones to it (as it leaves a waiting hook's) instead of running
    them; only the denials finish."""
    q = FolderQueue(str(repo / ".sandbox" / "escalations"))
    return [q.submit({"tool": "Bash", "params": {"command": f"make job-{i}"},
                      "cwd": str(repo), "kind": "bash", "agent": "claude", "risk": "low",
                      "reasons": ["escalate: a load test"], "mode": "grant"})
            for i in range(REQUESTS)]


class Listeners:
    """``CLIENTS`` WebSocket clients on one event loop in a thread, each counting the
    decision events it hears per request."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.heard: list[Counter[str]] = [Counter() for _ in range(CLIENTS)]
        self.ready = threading.Event()
        self.stop = threading.Event()
        self.errors: list[str] = []
        self.thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)
        self.thread.start()

    async def _client(self, i: int, connected: list[int]) -> None:
        from websockets.asyncio.client import connect

        async with connect(self.server.ws_url, additional_headers=self.server.headers,
                           max_queue=None) as ws:
            json.loads(await ws.recv())  # hello
            connected.append(i)
            if len(connected) == CLIENTS:
                self.ready.set()
            while not self.stop.is_set():
                try:
                    raw = await asyncio.wait_for(ws.recv(), 0.5)
                except TimeoutError:
                    continue
                for ev in json.loads(raw)["events"]:
                    if ev["type"] == "decision":
                        self.heard[i][ev["id"]] += 1

    async def _main(self) -> None:
        connected: list[int] = []
        results = await asyncio.gather(*(self._client(i, connected) for i in range(CLIENTS)),
                                       return_exceptions=True)
        self.errors = [repr(r) for r in results if isinstance(r, BaseException)]
        self.ready.set()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)


def test_many_clients_and_a_thousand_decisions(tmp_path: Path) -> None:
    started = time.monotonic()
    repo = make_repo(tmp_path / "repo")
    reqs = queue_requests(repo)
    server = start_server(repo)
    listeners = Listeners(server)
    try:
        assert listeners.ready.wait(60) and not listeners.errors, listeners.errors
        session = requests.Session()
        session.headers.update(server.headers)
        session.mount("http://", requests.adapters.HTTPAdapter(pool_maxsize=APPROVERS))

        def decide(job: tuple[int, str]) -> tuple[str, int]:
            i, verb = job
            req = reqs[i]
            body: dict[str, Any] = {"hash": req["hash"]}
            if verb == "deny":
                body["reason"] = "load"
            r = session.post(f"{server.url}api/requests/{req['id']}/{verb}", json=body,
                             timeout=60)
            assert r.status_code in (200, 409), (r.status_code, r.text)
            return req["id"], r.status_code

        jobs = [(i, "approve" if i % 2 else "deny") for i in range(REQUESTS)]
        # a tenth raced by a second decision (the other verb) sent at the same time
        jobs += [(i, "deny" if i % 2 else "approve") for i in range(0, REQUESTS, 10)]
        jobs.sort(key=lambda j: (j[0], j[1]))
        t0 = time.monotonic()
        with ThreadPoolExecutor(APPROVERS) as pool:
            outcomes = list(pool.map(decide, jobs))
        decide_s = time.monotonic() - t0
        wins = Counter(rid for rid, code in outcomes if code == 200)
        assert set(wins) == {r["id"] for r in reqs} and set(wins.values()) == {1}
        assert sum(1 for _, code in outcomes if code == 409) == RACED

        # on disk: one decision per request, one audit record of it, the denials finished
        esc = repo / ".sandbox" / "escalations"
        assert len(list((esc / "decided").glob("*.json"))) == REQUESTS
        records = [json.loads(line) for line in
                   (repo / ".sandbox/audit/audit.jsonl").read_text().splitlines()]
        decided_records = Counter(r["request_id"] for r in records
                                  if r["event"] in ("approval", "denial"))
        assert set(decided_records) == set(wins) and set(decided_records.values()) == {1}
        assert all(r.get("via") == "web" for r in records if r["event"] in ("approval",
                                                                            "denial"))
        by_file = Counter(json.loads(p.read_text())["decision"]
                          for p in (esc / "decided").glob("*.json"))
        assert sum(by_file.values()) == REQUESTS
        assert len(list((esc / "done").glob("*.json"))) == by_file["deny"]

        # every client heard every decision, once
        end = time.monotonic() + 30
        while time.monotonic() < end and not all(
                len(h) == REQUESTS for h in listeners.heard):
            time.sleep(0.1)
        for heard in listeners.heard:
            assert len(heard) == REQUESTS and set(heard.values()) == {1}
        print(f"{REQUESTS} decisions (+{RACED} raced) in {decide_s:.1f} s through the API; "
              f"{CLIENTS} clients heard each once; whole test {time.monotonic() - started:.1f} s")
    finally:
        listeners.close()
        server.stop()
