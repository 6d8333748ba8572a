"""Denied requests, recorded at a bounded rate.

A sandboxed command may ask for a denied destination as fast as it likes; were
each denial a record of its own, the audit log would grow by gigabytes an hour
and fill the disk it lives on. So within each window (10 s):

- the first denial of a destination (host, port, reason) is recorded whole;
- its repeats are counted, and one summary record says how many there were,
  with the first and last time (``repeats``, ``first``, ``last``), when the
  window ends;
- past ``burst`` destinations in one window (a command trying a new name each
  time), the rest are counted together into one summary of their own
  (``destinations``, ``repeats``), with the first few names.

Nothing is lost: every denial is in a record or a count, and summaries of a
window are written when the next denial arrives after it or when the proxy
closes (``flush``). Allowed decisions are never held back.
"""

from __future__ import annotations

import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

WINDOW = 10.0
BURST = 100
NAMES_KEPT = 20


class Denials:
    """The denials of one proxy, written through ``write`` at a bounded rate."""

    def __init__(self, write: Callable[[dict[str, Any]], None], window: float = WINDOW,
                 burst: int = BURST, clock: Callable[[], float] = time.time) -> None:
        self.write, self.window, self.burst, self.clock = write, window, burst, clock
        self.start = 0.0
        self.seen: dict[tuple[Any, ...], list[Any]] = {}  # key -> [event, repeats, last]
        self.over: dict[str, Any] = {}  # past the burst: counts and the first names

    def offer(self, event: dict[str, Any]) -> None:
        """One denial: written now (the first of its destination in this window) or
        counted into its window's summary."""
        now = self.clock()
        if now - self.start >= self.window:
            self.flush()
            self.start = now
        key = (event.get("host"), event.get("port"), event.get("reason"),
               event.get("protocol"))
        held = self.seen.get(key)
        if held is not None:
            held[1] += 1
            held[2] = now
            return
        if len(self.seen) >= self.burst:
            over = self.over
            if not over:
                over.update(first=now, repeats=0, destinations=set(), names=[])
            over["repeats"] += 1
            over["last"] = now
            name = f"{event.get('host')}:{event.get('port')}"
            if name not in over["destinations"]:
                over["destinations"].add(name)
                if len(over["names"]) < NAMES_KEPT:
                    over["names"].append(name)
            return
        self.seen[key] = [event, 0, now]
        self.write(event)

    def flush(self) -> None:
        """The summaries of the window that ended (or of everything, at close)."""
        for event, repeats, last in self.seen.values():
            if repeats:
                self.write({**{k: event.get(k) for k in ("protocol", "host", "port", "reason",
                                                          "outcome", "session")},
                            "allowed": False, "summary": "repeats", "repeats": repeats,
                            "first": _stamp(self.start), "last": _stamp(last)})
        if self.over:
            o = self.over
            self.write({"allowed": False, "outcome": "denied", "summary": "over-burst",
                        "reason": f"more than {self.burst} denied destinations in "
                                  f"{self.window:g} s", "repeats": o["repeats"],
                        "destinations": len(o["destinations"]), "names": o["names"],
                        "first": _stamp(o["first"]), "last": _stamp(o["last"])})
        self.seen, self.over = {}, {}


def _stamp(t: float) -> float:
    return round(t, 3)
