"""The ``sandbox serve`` application put together: the REST routes, the events
WebSocket, the dashboard's static files, the guard in front of them all (``guard``:
credentials before any body is read, bounded bodies, the headers every response
carries), the 422 that never echoes its input, and the queues' crash recovery.

``/api/events`` takes the bearer token in an ``Authorization`` header or, from the
dashboard (a browser cannot set one on a WebSocket), a session id of ``login`` as the
first message ``{"session": "..."}`` within ``AUTH_WAIT`` seconds: never the token
itself, never in the URL. A socket from another origin is refused before it opens.
The dashboard (``static/``, package data) and the login's two steps are the only
things served without credentials: a page with no data in it, whose script logs in by
challenge and answer. Every response forbids framing, sniffing and any script or
connection to another origin.

It holds no state beyond the sites it was given, the login's challenges and sessions
(memory only) and the connected sockets.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from importlib import resources
from typing import Any

from fastapi import FastAPI, Request, Response, WebSocket, WebSocketDisconnect
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from .auth import Bearer, from_header
from .events import Hub, QueueWatcher, to_loop
from .guard import Guard
from .login import Login
from .recovery import Recovery
from .routes import identify, problems, router
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


PUBLIC = frozenset({*STATIC, "/api/login/challenge", "/api/login"})


def create_app(sites: Sites, bearer: Bearer, *, login: Login | None = None,
               webhook: Any = None, recover: bool = True) -> FastAPI:
    """The application over ``sites``; ``bearer`` checks every token, ``login`` the
    dashboard's sessions; ``webhook`` (``webhook.Webhook``) is told of each new
    escalation; ``recover`` runs the queues' crash recovery while it serves."""
    hub = Hub()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        loop = asyncio.get_running_loop()
        also = webhook.on_events if webhook is not None else None
        watcher = QueueWatcher(sites.queues, to_loop(loop, hub, also))
        watcher.start()
        recovery = Recovery(sites.repos) if recover else None
        if recovery is not None:
            recovery.start()
        if webhook is not None:
            webhook.start()
        try:
            yield
        finally:
            watcher.close()
            if recovery is not None:
                recovery.close()
            if webhook is not None:
                webhook.close()

    app = FastAPI(title="agent-sandbox approvals", version="1", lifespan=lifespan,
                  docs_url=None, redoc_url=None, openapi_url=None,
                  description="Escalated agent tool calls from the folder queues of the "
                              "served repositories: list, inspect, approve, deny, audit.")
    app.state.sites = sites
    app.state.bearer = bearer
    app.state.login = login
    app.state.hub = hub
    app.include_router(router)

    def authorised(value: str | None) -> bool:
        return identify(value, bearer, login) is not None

    app.add_middleware(Guard, public=PUBLIC, authorised=authorised, headers=HEADERS)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": problems(exc.errors())}, status_code=422)

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
        ident = bearer.identify(token) if token else None
        if token is None and login is not None:  # the dashboard: a session, never a token
            try:
                first = await asyncio.wait_for(ws.receive_text(), AUTH_WAIT)
                msg = json.loads(first)
                sid = msg.get("session") if isinstance(msg, dict) else None
            except (TimeoutError, ValueError, WebSocketDisconnect, KeyError):
                sid = None
            ident = login.identify(sid) if isinstance(sid, str) else None
        if ident is None:
            with contextlib.suppress(Exception):
                await ws.close(code=CLOSE_UNAUTHORISED,
                               reason="a valid token header or session is required")
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
