"""`create_app`: the console's FastAPI app: sign-in, pages, changes, vendored static files, and
failures said in words (never a stack trace). Every request but sign-in, sign-out and the static
files meets admission first (fleet/console/admission.py)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiokafka.errors import KafkaError
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from redis.exceptions import RedisError
from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from common.clients import redis_client
from fleet.console import actions, pages, tracing_pages
from fleet.console.access import COOKIE, ConsoleAccess
from fleet.console.admission import AdmitConsole, login_page, not_signed_in, refusal_page
from fleet.console.dead_letters import DeadLetterShelf
from fleet.console.lag_monitor import LagMonitor
from fleet.console.serving_history import ServingHistory
from fleet.console.settings import ConsoleSettings
from fleet.console.web import (HERE, Console, Forbidden, NotSignedIn, back, console_of, read_form, render,
                               same_origin)
from gateway import Refusal
from models import RegistryError
from versions import PointerError

log = logging.getLogger("fleet.console")
CLOSE_S = 5.0  # the most a stop waits for the dead-letter reader to close
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
                               "frame-ancestors 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff", "Referrer-Policy": "same-origin", "X-Frame-Options": "DENY",
}


def create_app(settings: ConsoleSettings | None = None, *, sample_lag: bool = True) -> FastAPI:
    settings = settings or ConsoleSettings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        redis = redis_client(settings, socket_connect_timeout=1, socket_timeout=2)
        console = Console(settings, redis, ConsoleAccess(settings, redis), LagMonitor(settings),
                          DeadLetterShelf(settings), ServingHistory(settings))
        app.state.console = console
        if sample_lag:
            console.monitor.start()
            console.serving.start(redis, console.throughput)
        try:
            yield
        finally:
            await console.monitor.stop()
            await console.serving.stop()
            with contextlib.suppress(TimeoutError):  # a consumer closing on a dead Kafka must not hold the stop
                async with asyncio.timeout(CLOSE_S):
                    await console.letters.close()
            await redis.aclose()

    app = FastAPI(title="fleet console", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")
    app.include_router(_sign_in_routes())
    app.include_router(pages.router)
    app.include_router(tracing_pages.router)
    app.include_router(actions.router)
    _install_handlers(app)

    app.add_middleware(AdmitConsole)
    app.add_middleware(SecurityHeaders)  # outermost: admission's refusal pages get the headers too
    return app


class SecurityHeaders:
    """Adds SECURITY_HEADERS to every answer (plain ASGI, so the error handlers' pages get them too)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message).update(SECURITY_HEADERS)
            await send(message)

        await self.app(scope, receive, with_headers)


def _sign_in_routes() -> APIRouter:
    router = APIRouter()

    @router.get("/login", response_class=HTMLResponse)
    async def sign_in_page(request: Request) -> HTMLResponse:
        return login_page(request, request.query_params.get("why", "")[:300])

    @router.post("/login")
    async def login(request: Request) -> Response:
        console = console_of(request)
        same_origin(request)  # no other site's page signs this browser in with a key of its choosing
        key = (await read_form(request)).one("key")
        signed_in = await console.access.sign_in(key)
        if isinstance(signed_in, Refusal):
            return refusal_page(request, signed_in)
        token, tenant, key_id = signed_in
        response = RedirectResponse("/", status_code=303)
        # The session ends on the server; the cookie's age only spares the browser a token that cannot be good.
        response.set_cookie(COOKIE, token, max_age=int(console.settings.console_session_max_s), httponly=True,
                            samesite="strict", secure=console.settings.console_https, path="/")
        log.info("console sign-in: tenant %s, key %s, role %s", tenant, key_id, console.access.roles[tenant])
        return response

    @router.post("/logout")
    async def logout(request: Request) -> Response:
        same_origin(request)
        token = request.cookies.get(COOKIE)
        if token:
            await console_of(request).access.sessions.end(token)  # this browser's session only
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(COOKIE, path="/")
        return response
    return router


def _install_handlers(app: FastAPI) -> None:
    @app.exception_handler(NotSignedIn)
    async def no_operator(request: Request, exc: NotSignedIn) -> Response:
        return not_signed_in(request, exc.why)

    @app.exception_handler(Forbidden)
    async def forbidden(request: Request, exc: Forbidden) -> Response:
        return render(request, "refused.html", None, status_code=403, why=exc.why)

    @app.exception_handler(PointerError)
    @app.exception_handler(RegistryError)
    @app.exception_handler(ValueError)
    async def refused_change(request: Request, exc: Exception) -> Response:
        if request.method != "POST":  # a page that fails must not redirect to itself
            return await unexpected(request, exc)
        return back(_page_of(request.url.path), f"refused: {exc}")

    @app.exception_handler(RedisError)
    @app.exception_handler(KafkaError)
    @app.exception_handler(OSError)
    @app.exception_handler(TimeoutError)
    async def outage(request: Request, exc: Exception) -> Response:
        server = "Redis" if isinstance(exc, RedisError) else "Kafka or Redis"
        words = f"{server} does not answer ({type(exc).__name__})"
        if request.method != "POST":
            return render(request, "refused.html", None, status_code=503, why=words + "; try again when it is back")
        return back(_page_of(request.url.path), f"not done: {words}; nothing was changed that was not said")

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> Response:
        return render(request, "refused.html", None, status_code=exc.status_code, why=str(exc.detail))

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> Response:
        log.exception("console: %s %s failed", request.method, request.url.path)
        return render(request, "refused.html", None, status_code=500,
                      why=f"this page failed ({type(exc).__name__}); the console's log has the details")


def _page_of(path: str) -> str:
    first = path.strip("/").split("/", 1)[0]
    return f"/{first}" if first in {"versions", "workers", "dlq", "tenants", "debug"} else "/"
