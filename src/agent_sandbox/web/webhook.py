"""The optional notice of each new escalation: Slack-compatible JSON posted to a webhook.

The message names the repository, the agent, the kind, the risk and the request id,
and links to the request on the dashboard. It never carries the call's parameters, a
reason quoted from them, any output or any token: a chat channel is no place for
what an agent may have put in a command. The URL itself is a secret (Slack's carry
one), so it is read from a file, never from the command line.

``message`` is pure; ``Webhook`` posts from its own thread and never blocks or fails
the server: a post that fails is reported on stderr once and dropped.
"""

from __future__ import annotations

import json
import os
import queue
import sys
import threading
import urllib.request
from typing import Any

from agent_sandbox.errors import SandboxError

TIMEOUT = 5.0
BACKLOG = 100


class WebhookError(SandboxError):
    """The webhook is not usable; the message says why."""


def check_url(url: str) -> str:
    """An https URL, or http to a loopback address (a receiver on this host)."""
    from urllib.parse import urlsplit

    parts = urlsplit(url.strip())
    host = parts.hostname or ""
    if parts.scheme == "https" and host:
        return url.strip()
    if parts.scheme == "http" and (host in ("localhost", "::1") or host.startswith("127.")):
        return url.strip()
    raise WebhookError(f"the webhook must be an https URL (or http on loopback), not "
                       f"{parts.scheme or 'no scheme'}://{host}")


def read_url(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read(4096)
    except OSError as exc:
        raise WebhookError(f"cannot read the webhook URL from {path}: {exc.strerror}") from None
    return check_url(text)


def _plain(value: Any, limit: int = 80) -> str:
    """A label from the queue (agent, kind, risk), as plain text that no chat markup
    or mention can come out of."""
    text = "".join(c for c in str(value or "?") if c.isalnum() or c in " ._-:/")
    return text[:limit] or "?"


def message(event: dict[str, Any], dashboard: str) -> dict[str, Any]:
    """The Slack-compatible body for a ``request`` event (pure)."""
    req = event.get("request") or {}
    rid = _plain(event.get("id"), 40)
    repo = _plain(os.path.basename(str(event.get("repo", ""))), 60)
    link = f"{dashboard.rstrip('/')}/#request={rid}"
    text = (f"agent-sandbox: {_plain(req.get('agent'))} asks to run a "
            f"{_plain(req.get('kind'))} call in {repo} (risk {_plain(req.get('risk'))}): "
            f"request {rid} waits for an approver. <{link}|Review it on the dashboard>")
    return {"text": text,
            "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": text}}]}


class Webhook:
    """Posts each new escalation's message, in order, from one thread."""

    def __init__(self, url: str, dashboard: str) -> None:
        self.url = check_url(url)
        self.dashboard = dashboard
        self.outbox: queue.Queue[dict[str, Any] | None] = queue.Queue(BACKLOG)
        self.thread = threading.Thread(target=self._run, name="webhook", daemon=True)
        self.failed = False

    def start(self) -> None:
        self.thread.start()

    def close(self) -> None:
        try:
            self.outbox.put_nowait(None)
        except queue.Full:
            pass
        self.thread.join(TIMEOUT + 1)

    def on_events(self, events: list[dict[str, Any]]) -> None:
        for ev in events:
            if ev.get("type") == "request":
                try:
                    self.outbox.put_nowait(message(ev, self.dashboard))
                except queue.Full:
                    pass  # the dashboard lists it; a flood of notices helps nobody

    def _run(self) -> None:
        while True:
            body = self.outbox.get()
            if body is None:
                return
            data = json.dumps(body).encode()
            req = urllib.request.Request(self.url, data=data, method="POST",  # noqa: S310
                                         headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=TIMEOUT) as resp:  # noqa: S310
                    resp.read(1024)
            except Exception as exc:
                if not self.failed:
                    sys.stderr.write(f"sandbox serve: webhook post failed: "
                                     f"{type(exc).__name__}\n")
                self.failed = True
