"""The ``sandbox serve`` application put together: the REST routes, the events
WebSocket, the dashboard's static files, and the headers every response carries.

``/api/events`` takes the bearer token in an ``Authorization`` header or, from a
browser (which cannot set one on a WebSocket), as the first message
``{"token": "..."}`` within ``AUTH_WAIT`` seconds: never in the URL, which lands in
logs and history. A socket from another origin is refused before it opens. The
dashboard (``static/``, package data) is the one thing served without the token: a
page with no data in it, whose script asks for the token and sends it with each call.
Every response forbids framing, sniffing and any script or connection to another
origin.

It holds no state beyond the sites it was given and the connected sockets.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from importlib import resources
from typing import Any

from fastapi import FastAPI, Request, Response, WebSocket, WebSocketDisconnect

from .auth import Bearer, from_header
from .events import Hub, QueueWatcher, to_loop
from .routes import router
from .sites import Sites

AUTH_WAIT = 5.0
STATIC = {"/": ("index.html", "text/html; charset=utf-8"),
          "/static/app.js": ("app.js", "text/javascript; charset=utf-8"),
          "/static/app.css": ("app.css", "text/css; charset=utf-8")}
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
                               "connect-src 'self'; img-src 'self'; base-uri 'none'; "
                               "form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
CLOSE_UNAUTHORISED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_BEHIND = 4408


def create_app(sites: Sites, bearer: Bearer, *, webhook: Any = None) -> FastAPI:
    """The application over ``sites``; ``bearer`` checks every token; ``webhook``
    (``webhook.Webhook``) is told of each new escalation."""
    hub = Hub()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        loop = asyncio.get_running_loop()
        also = webhook.on_events if webhook is not None else None
        watcher = QueueWatcher(sites.queues, to_loop(loop, hub, also))
        watcher.start()
        if webhook is not None:
            webhook.start()
        try:
            yield
        finally:
            watcher.close()
            if webhook is not None:
                webhook.close()

    app = FastAPI(title="agent-sandbox approvals", version="1", lifespan=lifespan,
                  docs_url=None, redoc_url=None, openapi_url=None,
                  description="Escalated agent tool calls from the folder queues of the "
                              "served repositories: list, inspect, approve, deny, audit.")
    app.state.sites = sites
    app.state.bearer = bearer
    app.state.hub = hub
    app.include_router(router)

    @app.middleware("http")
    async def headers(request: Request, call_next: Any) -> Response:
        response: Response = await call_next(request)
        for k, v in HEADERS.items():
            response.headers.setdefault(k, v)
        return response

    from .routes import require

    @app.get("/openapi.json", include_in_schema=False)
    def openapi(request: Request) -> dict[str, Any]:
        require(request)  # the API's description is behind the token like the API
        return app.openapi()

    for path, (name, media) in STATIC.items():
        body = resources.files("agent_sandbox.web").joinpath("static", name).read_bytes()

        def serve(body: bytes = body, media: str = media) -> Response:
            return Response(body, media_type=media)

        app.add_api_route(path, serve, methods=["GET"], include_in_schema=False)

    @app.websocket("/api/events")
    async def events(ws: WebSocket) -> None:
        origin = ws.headers.get("origin")
        host = ws.headers.get("host", "")
        if origin is not None and origin not in (f"http://{host}", f"https://{host}"):
            await ws.close(code=CLOSE_FORBIDDEN)
            return
        token = from_header(ws.headers.get("authorization"))
        await ws.accept()
        if token is None:
            try:
                first = await asyncio.wait_for(ws.receive_text(), AUTH_WAIT)
                msg = json.loads(first)
                token = str(msg.get("token", "")) if isinstance(msg, dict) else ""
            except (TimeoutError, ValueError, WebSocketDisconnect, KeyError):
                token = ""
        ident = bearer.identify(token) if token else None
        if ident is None:
            with contextlib.suppress(Exception):
                await ws.close(code=CLOSE_UNAUTHORISED, reason="a valid token is required")
            return
        box = hub.join()
        try:
            await ws.send_text(json.dumps({"hello": {"user": ident.user,
                                                     "repositories": sites.repos}}))
            await _pump(ws, box)
        finally:
            hub.leave(box)

    return app


async def _pump(ws: WebSocket, box: asyncio.Queue[dict[str, Any] | None]) -> None:
    """Send what the hub publishes until the client goes (or falls too far behind)."""

    async def listen() -> None:
        with contextlib.suppress(WebSocketDisconnect, RuntimeError):
            while True:
                await ws.receive_text()  # nothing is expected: it only says it is gone

    gone = asyncio.ensure_future(listen())
    try:
        while not gone.done():
            getter = asyncio.ensure_future(box.get())
            done, _ = await asyncio.wait({getter, gone}, return_when=asyncio.FIRST_COMPLETED)
            if getter not in done:
                getter.cancel()
                return
            message = getter.result()
            if message is None:
                with contextlib.suppress(Exception):
                    await ws.close(code=CLOSE_BEHIND, reason="too far behind: list again")
                return
            try:
                await ws.send_text(json.dumps(message))
            except (WebSocketDisconnect, RuntimeError, OSError):
                return
    finally:
        gone.cancel()
