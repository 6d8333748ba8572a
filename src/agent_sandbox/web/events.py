"""Queue changes as events: new requests, decisions, runs and completions, pushed to
every connected WebSocket (``/api/events``) and to the optional webhook.

A thread waits on the served queues' folders (``queue.notify.Watcher``: inotify, a
short poll where there is none), lists them again on each wake and compares the
listing with the one before (``changes``, pure): whatever is new is an event. The
listing is all it remembers, and it is read again from the folders each time, so a
restart loses nothing that is still in the queue. Events of one wake travel in one
message, ``{"events": [...]}``; a client that falls ``BACKLOG`` messages behind is
closed (it lists again when it reconnects) rather than held in memory.

It never writes to a queue and never decides anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agent_sandbox.queue import FolderQueue

BACKLOG = 256  # messages a client may fall behind before it is closed
WAKE = 0.5  # seconds between checks of the stop flag while nothing happens


@dataclass
class Listing:
    """The ids in one queue's folders at one moment."""

    pending: set[str] = field(default_factory=set)
    decided: set[str] = field(default_factory=set)
    claimed: set[str] = field(default_factory=set)
    done: set[str] = field(default_factory=set)


def list_queue(q: FolderQueue) -> Listing:
    return Listing(set(q.ids("pending")), set(q.ids("decided")), set(q.ids("claimed")),
                   set(q.ids("done")))


def changes(before: Listing, after: Listing) -> list[tuple[str, str]]:
    """(kind, id) for what is new in ``after`` (pure): ``request`` (a new pending
    request), ``decision``, ``running`` (claimed by its executor), ``done``."""
    out: list[tuple[str, str]] = []
    known = before.pending | before.decided | before.claimed | before.done
    out += [("request", r) for r in sorted(after.pending - known - after.done)]
    out += [("decision", r) for r in sorted(after.decided - before.decided)]
    out += [("running", r) for r in sorted(after.claimed - before.claimed - after.done)]
    out += [("done", r) for r in sorted(after.done - before.done)]
    return out


def describe(repo: str, q: FolderQueue, kind: str, rid: str) -> dict[str, Any] | None:
    """The event for one change, from the queue's files (None: it is gone already)."""
    event: dict[str, Any] = {"type": kind, "repo": repo, "id": rid}
    if kind == "request":
        from .sites import request_view, shown

        req = q.request(rid)
        if req is None:
            return None
        event["request"] = shown(request_view(repo, "pending", req, None, None))
    elif kind == "decision":
        dec = q.decision(rid) or {}
        event.update(decision=str(dec.get("decision", "")), by=str(dec.get("by", "")))
    elif kind == "done":
        res = q.result(rid) or {}
        code = res.get("exit_code")
        event.update(status=str(res.get("status", "")),
                     exit_code=code if isinstance(code, int) else None)
    return event


class Hub:
    """The connected clients, each a bounded queue of messages (the event loop's side)."""

    def __init__(self) -> None:
        self.clients: set[asyncio.Queue[dict[str, Any] | None]] = set()

    def join(self) -> asyncio.Queue[dict[str, Any] | None]:
        box: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue(BACKLOG)
        self.clients.add(box)
        return box

    def leave(self, box: asyncio.Queue[dict[str, Any] | None]) -> None:
        self.clients.discard(box)

    def publish(self, message: dict[str, Any]) -> None:
        for box in list(self.clients):
            try:
                box.put_nowait(message)
            except asyncio.QueueFull:  # too slow: closed, it lists again on reconnect
                self.clients.discard(box)
                with contextlib.suppress(asyncio.QueueEmpty):
                    box.get_nowait()
                box.put_nowait(None)


class QueueWatcher:
    """The thread that turns changes in the served queues into published events."""

    def __init__(self, queues: dict[str, FolderQueue],
                 deliver: Callable[[list[dict[str, Any]]], None]) -> None:
        self.queues = queues
        self.deliver = deliver
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="queue-events", daemon=True)
        self.listings = {repo: list_queue(q) for repo, q in queues.items()}

    def start(self) -> None:
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)

    def scan(self) -> list[dict[str, Any]]:
        """List every queue again; the events for what changed since the last scan."""
        events: list[dict[str, Any]] = []
        for repo, q in self.queues.items():
            now = list_queue(q)
            for kind, rid in changes(self.listings[repo], now):
                ev = describe(repo, q, kind, rid)
                if ev is not None:
                    events.append(ev)
            self.listings[repo] = now
        return events

    def _run(self) -> None:
        from agent_sandbox.queue.notify import Watcher

        dirs = [q.dir(s) for q in self.queues.values()
                for s in ("pending", "decided", "claimed", "done") if os.path.isdir(q.dir(s))]
        with Watcher(dirs) as watcher:
            while not self.stop.is_set():
                watcher.wait(WAKE)
                try:
                    events = self.scan()
                except Exception:  # noqa: S112 (a torn read: the next wake lists again)
                    continue
                if events:
                    self.deliver(events)


def to_loop(loop: asyncio.AbstractEventLoop, hub: Hub,
            also: Callable[[list[dict[str, Any]]], None] | None = None
            ) -> Callable[[list[dict[str, Any]]], None]:
    """A ``deliver`` for ``QueueWatcher`` that publishes on ``hub`` in ``loop``'s thread
    (and hands the events to ``also``, in the watcher's thread)."""

    def deliver(events: list[dict[str, Any]]) -> None:
        loop.call_soon_threadsafe(hub.publish, {"events": events})
        if also is not None:
            also(events)

    return deliver
