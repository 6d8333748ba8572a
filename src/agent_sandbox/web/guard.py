"""What every HTTP request passes before the application sees it: credentials first,
then a bounded body; and the security headers on every answer.

FastAPI reads and parses a body (and checks the query) before a route's dependencies
run, so a token checked in a dependency is checked after the memory is spent. This
pure ASGI layer sits in front of the routing: a request without valid credentials is
a 401 before a byte of its body is read (only the dashboard's files and the login's
two steps are public), and a body over ``MAX_BODY`` is a 413, from its
``Content-Length`` or, without one, while it streams in. The body it read (at most
``MAX_BODY`` bytes) is handed on to the application whole.

Never passes a request on without credentials unless its path is public, and never
holds more than ``MAX_BODY`` bytes and one chunk of a body.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

MAX_BODY = 64 * 1024

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

UNAUTHORISED = ("valid credentials are required: Authorization: Bearer TOKEN (the token "
                "file `sandbox serve` printed), or the dashboard's session")


class Guard:
    """``app`` behind the credentials check and the body bound."""

    def __init__(self, app: ASGIApp, *, public: frozenset[str],
                 authorised: Callable[[str | None], bool], headers: dict[str, str],
                 max_body: int = MAX_BODY) -> None:
        self.app = app
        self.public = public
        self.authorised = authorised
        self.headers = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        send = self._with_headers(send)
        if scope["path"] not in self.public and not self.authorised(
                _header(scope, b"authorization")):
            await _problem(send, 401, UNAUTHORISED, [(b"www-authenticate", b"Bearer")])
            return
        declared = _header(scope, b"content-length")
        if declared is not None:
            if not declared.isdigit():
                await _problem(send, 400, "Content-Length is not a number")
                return
            if int(declared) > self.max_body:
                await _problem(send, 413, self._too_large())
                return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body = message.get("body", b"")
            size += len(body)
            if size > self.max_body:
                await _problem(send, 413, self._too_large())
                return
            chunks.append(body)
            more = bool(message.get("more_body", False))
        handed = False

        async def replay() -> Message:
            nonlocal handed
            if not handed:
                handed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    def _too_large(self) -> str:
        return f"the body is larger than {self.max_body} bytes"

    def _with_headers(self, send: Send) -> Send:
        extra = self.headers

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                have = {k.lower() for k, _ in message.get("headers", [])}
                message["headers"] = [*message.get("headers", []),
                                      *[(k, v) for k, v in extra if k not in have]]
            await send(message)

        return sending


def _header(scope: Scope, name: bytes) -> str | None:
    """The first ``name`` header of a request (latin-1, as HTTP carries it), or None."""
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


async def _problem(send: Send, status: int, detail: str,
                   headers: list[tuple[bytes, bytes]] | None = None) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()), *(headers or [])]})
    await send({"type": "http.response.body", "body": body})
