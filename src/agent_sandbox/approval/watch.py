"""``sandbox watch``: the interactive approver, drawn so that what is approved was seen.

Two views, each built from a request's bound fields (``queue.shown.fields``: the tool,
the working folder and every parameter, the text that is hashed and run) through
``display.printable``:

- the list: one row per pending request, each field shown whole up to ``PREVIEW``
  characters, a longer one as its head and its tail around a marker that says how much
  is left out. ``rich.Live`` cuts whatever does not fit the terminal, so the list is
  measured before it is drawn: it shows a window of requests around the selected one
  that fits, and says when the selected one itself cannot be shown whole. ``a``/``A``
  approve the selected request from the list only when the frame on screen showed all
  of it (nothing clipped, nothing cut), or once its detail view was read to the end.
- the detail view (``v`` or Enter): a pager over every field of the selected request,
  each line numbered (a newline in a value starts a new numbered line; every other
  hiding character is an escape), with each field's length and line count. ``a``/``A``
  approve there once its last line has been on screen.

Every approval names the hash of the request as it was drawn (``Approver.approve``
refuses a request that changed since). The selection follows its request, and a
request new on screen as the selection (its predecessor went, or it changed) cannot be
approved from the list for ``SETTLE`` seconds. Keys are read one read at a time; nothing
here decides policy.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ..display import escaped_count, printable
from ..queue.shown import effect, fields, mismatch, size
from .approver import ApprovalError, Approver, age

PREVIEW = 400  # printable characters of one field the list shows whole
HEAD, TAIL = 240, 120  # what the list shows of a longer one
WHY = 240  # characters of the policy's reasons in the list (context, not what runs)
# seconds a request must have been on screen as the selection before a approves it from
# the list: a request that takes the place of another (the one above was cancelled, or
# changed) is never approved by a key meant for the one it replaced
SETTLE = 0.5
KEYS_LIST = ("keys: up/down or j/k select · v or Enter view all · a approve · A always allow "
             "· d deny · r refresh · q quit")
KEYS_DETAIL = ("keys: space/PgDn next page · b/PgUp back · j/k line · g/G top/end · a approve "
               "· A always allow · d deny · q/Esc list")


def _clip(text: str) -> tuple[str, str, str]:
    """A field's printable text for the list as (head, marker, tail): the marker, drawn
    in a style no agent text has, says what is left out between the two ("" if none)."""
    shown = printable(text)
    if len(shown) <= PREVIEW:
        return shown, "", ""
    left = len(shown) - HEAD - TAIL
    return (shown[:HEAD], f" [{left} more characters of {size(text)}: v shows all of it] ",
            shown[-TAIL:])


@dataclass
class Frame:
    """What is drawn, and whether it showed the selected request whole."""

    renderable: Any
    complete: bool = False
    why: str = ""


def _cell(req: dict[str, Any]) -> tuple[Any, bool]:
    from rich.text import Text

    cell = Text(overflow="fold")
    clipped = False
    for i, (name, value) in enumerate(fields(req)):
        head, marker, tail = _clip(value)
        clipped = clipped or bool(marker)
        if i:
            cell.append("\n")
        cell.append(printable(name), style="bold")
        cell.append(": ")
        cell.append(head)
        if marker:
            cell.append(marker, style="reverse italic")
            cell.append(tail)
    refused = mismatch(req)
    if refused:
        cell.append(f"\nWARNING: {refused}", style="bold red")
    return cell, clipped


def _list(approver: Approver, items: list[dict[str, Any]], selected: int, note: str,
          window: range, clipped: dict[int, bool]) -> Any:
    from rich.console import Group
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    table = Table(expand=True, show_lines=True,
                  title=Text(f"agent-sandbox: {printable(approver.repo)}"))
    table.add_column("#", width=3)
    table.add_column("id", no_wrap=True)
    table.add_column("age", width=5)
    table.add_column("agent", width=8)
    table.add_column("kind", width=6)
    table.add_column("risk", width=6)
    table.add_column("exact call (tool, cwd, every parameter)", ratio=3)
    table.add_column("why", ratio=2)
    colours = {"high": "bold red", "medium": "yellow", "low": "green"}
    for i in window:
        r = items[i]
        cell, clipped[i] = _cell(r)
        risk = str(r.get("risk", "?"))
        why = printable("; ".join(str(x) for x in (r.get("reasons") or [])))
        if len(why) > WHY:
            why = why[:WHY] + " ..."
        # every cell a Text (never parsed as markup) of printable() text: an agent wrote it
        table.add_row(str(i + 1), Text(printable(str(r.get("id", ""))[-12:])),
                      age(r.get("created")),
                      Text(printable(r.get("agent", ""))), Text(printable(r.get("kind", ""))),
                      Text(printable(risk), style=colours.get(risk, "")), cell,
                      Text(why, overflow="fold"),
                      style="reverse" if i == selected else "")
    c = approver.queue.counts()
    lines = [f"{c['pending']} pending, {c['running']} running, {c['done']} done."]
    if window and (window.start > 0 or window.stop < len(items)):
        lines.append(f"showing {window.start + 1}-{window.stop} of {len(items)} "
                     "(the terminal holds no more)")
    parts: list[Any] = [table, Text("   ".join(lines)), Text(KEYS_LIST)]
    if items:
        r = items[selected]
        state = (f"#{selected + 1}: {printable(effect(r))}; " +
                 ("part of it is left out above: v shows all of it (a is refused until then)"
                  if clipped.get(selected) else "shown whole"))
        parts.insert(1, Text(state, style="bold"))
    if note:
        parts.append(Panel(Text(printable(note))))
    return Group(*parts)


def list_frame(approver: Approver, items: list[dict[str, Any]], selected: int, note: str,
               console: Any = None, seen: frozenset[tuple[str, str]] = frozenset()) -> Frame:
    """The list as ``console`` would show it (measured against its height; unmeasured
    without a console), and whether the selected request is on it whole."""
    clipped: dict[int, bool] = {}
    full = range(len(items))
    view = _list(approver, items, selected, note, full, clipped)
    fits = True
    if console is not None and items:
        limit = console.height - 1

        def height(renderable: Any) -> int:
            return len(console.render_lines(renderable, console.options, pad=False))

        if height(view) > limit:
            lo, hi = selected, selected + 1
            view = _list(approver, items, selected, note, range(lo, hi), clipped)
            fits = height(view) <= limit
            while fits:
                grown = False
                for lo2, hi2 in ((lo, hi + 1), (lo - 1, hi)):
                    if 0 <= lo2 and hi2 <= len(items) and (lo2, hi2) != (lo, hi):
                        trial = _list(approver, items, selected, note, range(lo2, hi2), {})
                        if height(trial) <= limit:
                            lo, hi, view, grown = lo2, hi2, trial, True
                            break
                if not grown:
                    break
            view = _list(approver, items, selected, note, range(lo, hi), clipped)
    if not items:
        return Frame(view, False, "nothing is pending")
    r = items[selected]
    read = (str(r.get("id")), str(r.get("hash"))) in seen
    if not fits:
        from rich.console import Group
        from rich.text import Text

        why = ("the terminal is too small to show this request whole: press v to read it, "
               "then approve")
        compact = Group(Text(f"agent-sandbox: {printable(approver.repo)}"),
                        Text(f"#{selected + 1} of {len(items)}: {printable(effect(r))}"),
                        Text("read to its end in the detail view: a approves" if read
                             else why, style="bold"), Text(KEYS_LIST),
                        *([Text(printable(note))] if note else []))
        return Frame(compact, read, why)
    if read:
        return Frame(view, True)
    if clipped.get(selected):
        return Frame(view, False, "part of this request is not on screen: press v to read "
                                  "all of it before approving")
    return Frame(view, True)


@dataclass
class Detail:
    """The pager over one request: every bound field, whole, in numbered lines."""

    req: dict[str, Any]
    width: int
    lines: list[tuple[str, str]] = field(default_factory=list)  # (text, style)
    top: int = 0
    reached_end: bool = False

    def __post_init__(self) -> None:
        from rich.cells import cell_len, chop_cells

        r = self.req

        def add(line: tuple[str, str]) -> None:
            text, style = line
            for part in (chop_cells(text, self.width) if cell_len(text) > self.width
                         else [text]):
                self.lines.append((part, style))

        add((f"request {printable(r.get('id', ''))}  {printable(r.get('kind', ''))} "
             f"({printable(r.get('agent', ''))})  risk {printable(r.get('risk', '?'))}  "
             f"hash {printable(str(r.get('hash', ''))[:16])}", "bold"))
        add((f"approving: {printable(effect(r))}", "bold"))
        refused = mismatch(r)
        if refused:
            add((f"WARNING: {refused}", "bold red"))
        first, more = "{:>5} | ", "      + "
        room = max(10, self.width - max(cell_len(first.format(0)), cell_len(more)))
        for name, value in [*fields(r), ("why (the policy's reasons; not part of what runs)",
                                         "; ".join(str(x) for x in (r.get("reasons") or [])))]:
            esc = escaped_count(value)
            add((f"-- {printable(name)}: {size(value)}"
                 + (f", {esc} shown as escapes" if esc else "") + " --", "bold"))
            for n, raw in enumerate(value.split("\n"), start=1):
                shown = printable(raw)
                parts = chop_cells(shown, room) if cell_len(shown) > room else [shown]
                for k, part in enumerate(parts or [""]):
                    self.lines.append(((first.format(n) if k == 0 else more) + part, ""))
        add(("-- end of the request --", "bold"))

    def page(self, height: int) -> int:
        return max(1, height - 3)

    def scroll(self, delta: int, height: int) -> None:
        last = max(0, len(self.lines) - self.page(height))
        self.top = min(max(0, self.top + delta), last)

    def render(self, height: int, note: str) -> Any:
        from rich.console import Group
        from rich.text import Text

        page = self.page(height)
        shown = self.lines[self.top:self.top + page]
        if self.top + page >= len(self.lines):
            self.reached_end = True
        status = (f"lines {self.top + 1}-{self.top + len(shown)} of {len(self.lines)}; "
                  + ("all of it has been shown: a approves"
                     if self.reached_end else "more below: approve once the end is shown"))
        # lines are cut to the width above; were one wider, it folds (never cropped)
        out: list[Any] = [Text(t, style=s, overflow="fold") for t, s in shown]
        out.append(Text(status + ("   " + printable(note) if note else ""), style="reverse",
                        no_wrap=True, overflow="ellipsis"))
        out.append(Text(KEYS_DETAIL, no_wrap=True, overflow="ellipsis"))
        return Group(*out)


_DOWN, _UP = ("j", "\x1b[B"), ("k", "\x1b[A")
_PAGE_DOWN, _PAGE_UP = (" ", "f", "\x1b[6~"), ("b", "\x1b[5~")


@dataclass
class _Screen:
    """One ``sandbox watch`` between two keys: the pending requests as last read, the
    selection (which follows its request), the detail view if open, and what was read
    to its end there."""

    approver: Approver
    console: Any
    selected: int = 0
    note: str = ""
    chosen: str = ""
    chosen_drawn: tuple[str, str] = ("", "")
    chosen_since: float = field(default_factory=time.monotonic)
    items: list[dict[str, Any]] = field(default_factory=list)
    seen: set[tuple[str, str]] = field(default_factory=set)  # (id, hash) read to the end
    detail: Detail | None = None
    frame: Frame = field(default_factory=lambda: Frame(None))

    def redraw(self, live: Any) -> None:
        """Read the queue again and draw the view that is open."""
        console = self.console
        self.items = items = self.approver.pending()
        detail = self.detail
        if detail is not None:
            now = {str(r.get("id")): r for r in items}.get(str(detail.req.get("id")))
            if now is None or now.get("hash") != detail.req.get("hash"):
                self.note = (f"request {detail.req.get('id')} "
                             + ("changed" if now else "is no longer pending"))
                self.detail = None
            elif detail.width != console.width:
                self.detail = Detail(detail.req, console.width, top=detail.top,
                                     reached_end=detail.reached_end)
        ids = [str(r.get("id")) for r in items]
        # the selection follows its request; if that one went, the neighbour
        # taking its place is new on screen (SETTLE below)
        self.selected = (ids.index(self.chosen) if self.chosen in ids
                         else min(self.selected, max(0, len(items) - 1)))
        if items:
            sel = items[self.selected]
            now_chosen = (str(sel.get("id")), str(sel.get("hash")))
            if now_chosen != self.chosen_drawn:
                self.chosen_drawn, self.chosen_since = now_chosen, time.monotonic()
            self.chosen = now_chosen[0]
        if self.detail is not None:
            live.update(self.detail.render(console.height, self.note), refresh=True)
            if self.detail.reached_end:  # its last line is on screen now
                self.seen.add((str(self.detail.req.get("id")),
                               str(self.detail.req.get("hash"))))
        else:
            self.frame = list_frame(self.approver, items, self.selected, self.note, console,
                                    frozenset(self.seen))
            live.update(self.frame.renderable, refresh=True)

    def press(self, key: str) -> bool:
        """Act on one key; False for the keys that end the watch."""
        if not key or key in ("\x03", "\x04") or (key == "q" and self.detail is None):
            return False
        self.note = ""
        if self.detail is not None:
            self._detail_key(key, self.detail)
        else:
            self._list_key(key)
        return True

    def _detail_key(self, key: str, detail: Detail) -> None:
        h = self.console.height
        if key in ("q", "\x1b", "h"):
            self.detail = None
        elif key in _DOWN or key in _UP:
            detail.scroll(1 if key in _DOWN else -1, h)
        elif key in _PAGE_DOWN or key in _PAGE_UP:
            step = detail.page(h)
            detail.scroll(step if key in _PAGE_DOWN else -step, h)
        elif key in ("g", "G"):
            detail.scroll(-len(detail.lines) if key == "g" else len(detail.lines), h)
        elif key in ("a", "A", "d"):
            if key != "d" and not detail.reached_end:
                self.note = "the end of this request has not been shown yet: G or space"
            else:
                self.note = self._decide(key, detail.req)
                self.detail = None

    def _list_key(self, key: str) -> None:
        items = self.items
        if key in _DOWN or key in _UP:
            self.selected = (min(self.selected + 1, max(0, len(items) - 1)) if key in _DOWN
                             else max(self.selected - 1, 0))
            self.chosen = str(items[self.selected].get("id")) if items else ""
        elif key in ("v", "\r", "\n", "l") and items:
            self.detail = Detail(items[self.selected], self.console.width)
        elif key in ("a", "A") and items:
            if time.monotonic() - self.chosen_since < SETTLE:
                self.note = ("the selected request is new on screen: look at it, then "
                             "press a again")
            else:
                self.note = (self._decide(key, items[self.selected]) if self.frame.complete
                             else self.frame.why)
        elif key == "d" and items:
            self.note = self._decide(key, items[self.selected])

    def _decide(self, key: str, req: dict[str, Any]) -> str:
        rid = str(req.get("id"))
        try:
            if key == "d":
                self.approver.deny(rid, "denied in sandbox watch")
                return f"denied {rid}"
            self.approver.approve(rid, always=key == "A", seen_hash=str(req.get("hash")))
            return f"approved {rid}" + (" (always)" if key == "A" else "")
        except ApprovalError as exc:
            return str(exc)


def _observe(root: str, changed: threading.Event) -> Any:
    """A started watchdog observer that sets ``changed`` on every change under the
    queue's ``root``."""
    from watchdog.events import FileSystemEventHandler
    from watchdog.observers import Observer

    class Handler(FileSystemEventHandler):
        def on_any_event(self, event: Any) -> None:
            # our own reads of the queue (opened, closed unwritten) change nothing: a
            # redraw on them would read again, and redraw for ever
            if event.event_type not in ("opened", "closed_no_write"):
                changed.set()

    observer = Observer()
    # one recursive watch over the queue: renames between its folders are then
    # matched moves, which watchdog delivers at once (an unmatched move out of a
    # watched folder holds back every later event for half a second)
    observer.schedule(Handler(), root, recursive=True)
    observer.start()
    return observer


def watch(repo: str, *, stdin: Any = None) -> int:
    """``sandbox watch``: live list, a detail view, keys to approve, deny or always-allow."""
    import select
    import termios
    import tty

    from rich.console import Console
    from rich.live import Live

    approver = Approver(repo)
    approver.recover()
    changed = threading.Event()
    changed.set()
    observer = _observe(approver.queue.root, changed)
    inp = stdin or sys.stdin
    fd = inp.fileno()
    interactive = os.isatty(fd)
    old = termios.tcgetattr(fd) if interactive else None
    console = Console()
    screen = _Screen(approver, console)
    drawn_size = console.size
    last_recover = time.monotonic()
    try:
        if interactive:
            tty.setcbreak(fd)
        with Live(console=console, auto_refresh=False, screen=False) as live:
            while True:
                if console.size != drawn_size:
                    changed.set()
                if changed.is_set():
                    changed.clear()
                    drawn_size = console.size
                    screen.redraw(live)
                ready, _, _ = select.select([fd], [], [], 0.05)
                if time.monotonic() - last_recover > 5:
                    approver.recover()
                    last_recover = time.monotonic()
                if not ready:
                    continue
                if not screen.press(os.read(fd, 8).decode(errors="replace")):
                    break
                changed.set()
    finally:
        if old is not None:
            termios.tcsetattr(fd, termios.TCSADRAIN, old)
        observer.stop()
        observer.join(timeout=2)
    return 0
