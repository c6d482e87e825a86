"""`create_app`: the console's FastAPI app: login, pages, changes, vendored static files, and
failures said in words (never a stack trace)."""

from __future__ import annotations

import logging
from urllib.parse import quote
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
from fleet.console.access import COOKIE, Gate, Refused
from fleet.console.dead_letters import DeadLetterShelf
from fleet.console.lag_monitor import LagMonitor
from fleet.console.serving_history import ServingHistory
from fleet.console.settings import ConsoleSettings
from fleet.console.web import (HERE, Console, Forbidden, NotSignedIn, back, console_of, read_form, render,
                               same_origin)
from models import RegistryError
from versions import PointerError

log = logging.getLogger("fleet.console")
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
        console = Console(settings, redis, Gate(settings), LagMonitor(settings), DeadLetterShelf(settings),
                          ServingHistory(settings))
        app.state.console = console
        if sample_lag:
            console.monitor.start()
            console.serving.start(redis, console.throughput)
        try:
            yield
        finally:
            await console.monitor.stop()
            await console.serving.stop()
            await console.letters.close()
            await redis.aclose()

    app = FastAPI(title="fleet console", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")
    app.include_router(_sign_in_routes())
    app.include_router(pages.router)
    app.include_router(tracing_pages.router)
    app.include_router(actions.router)
    _install_handlers(app)

    app.add_middleware(SecurityHeaders)
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
    async def login_page(request: Request) -> HTMLResponse:
        return render(request, "login.html", None, why=request.query_params.get("why", "")[:300])

    @router.post("/login")
    async def login(request: Request) -> Response:
        console = console_of(request)
        same_origin(request)  # no other site's page signs this browser in with a key of its choosing
        key = (await read_form(request)).one("key")
        try:
            operator = await console.gate.admit(console.redis, key)
        except Refused as exc:
            return render(request, "login.html", None, status_code=401, why=str(exc))
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(COOKIE, key, httponly=True, samesite="strict", secure=console.settings.console_https,
                            path="/")
        log.info("console sign-in: tenant %s, key %s, role %s", operator.tenant, operator.key_id, operator.role)
        return response

    @router.post("/logout")
    async def logout(request: Request) -> Response:
        same_origin(request)
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(COOKIE, path="/")
        return response
    return router


def _install_handlers(app: FastAPI) -> None:
    @app.exception_handler(NotSignedIn)
    async def not_signed_in(request: Request, exc: NotSignedIn) -> Response:
        if request.headers.get("hx-request"):
            return Response(status_code=401, headers={"HX-Redirect": "/login"})
        if request.method != "GET":
            return render(request, "login.html", None, status_code=401, why=exc.why)
        return RedirectResponse(f"/login?why={quote(exc.why[:200])}", status_code=303)

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
