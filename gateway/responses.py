"""How the gateway answers when a request does not end in a result: a 4xx naming the field for
bad input, 429 or 503 with Retry-After when the fleet cannot take it now, and, for a bug, a
logged 503 with an error id instead of a bare 500."""

import json
import logging
import math
import secrets
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from prometheus_client import Counter
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.errors import FleetUnavailable, Overloaded
from gateway.limits import send_json

log = logging.getLogger(__name__)


class SafeJSONResponse(JSONResponse):
    """JSON that always encodes. orjson first: an embedding's 384 floats cost the standard library
    about 0.5 ms, more than the rest of a request; what orjson refuses (a lone surrogate an
    answer echoes, a type it does not know) is escaped to ASCII by the standard library instead.
    A NaN or infinity is null, as orjson writes it: JSON has no such numbers."""

    def render(self, content: Any) -> bytes:
        try:
            return orjson.dumps(content)
        except TypeError:
            return json.dumps(_finite(content), ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode()


def _finite(content: Any) -> Any:
    if isinstance(content, float):
        return content if math.isfinite(content) else None
    if isinstance(content, dict):
        return {key: _finite(value) for key, value in content.items()}
    if isinstance(content, list | tuple):
        return [_finite(value) for value in content]
    return content


def _validation_detail(exc: RequestValidationError) -> list[dict[str, Any]]:
    # Never the input itself: it may be bytes or hold what JSON cannot carry, and the caller sent it anyway.
    return [{"loc": list(error.get("loc", ())), "msg": str(error.get("msg", "")), "type": str(error.get("type", ""))}
            for error in exc.errors()]


def install_error_handlers(app: FastAPI, unavailable: Counter, retry_after_s: int) -> None:
    retry_after = {"Retry-After": str(retry_after_s)}

    async def validation_failed(_: Request, exc: Exception) -> SafeJSONResponse:
        assert isinstance(exc, RequestValidationError)
        return SafeJSONResponse({"detail": _validation_detail(exc)}, status_code=422)

    async def http_error(_: Request, exc: Exception) -> SafeJSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        return SafeJSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)

    async def fleet_unavailable(_: Request, exc: Exception) -> SafeJSONResponse:
        assert isinstance(exc, FleetUnavailable)
        unavailable.labels(dependency=exc.dependency).inc()
        return SafeJSONResponse({"detail": str(exc), "dependency": exc.dependency}, status_code=503,
                                headers=retry_after)

    async def overloaded(_: Request, exc: Exception) -> SafeJSONResponse:
        return SafeJSONResponse({"detail": str(exc)}, status_code=429, headers=retry_after)

    app.add_exception_handler(RequestValidationError, validation_failed)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(FleetUnavailable, fleet_unavailable)
    app.add_exception_handler(Overloaded, overloaded)


class Outcomes:
    """Outermost middleware: counts every answer by route and code, and turns an exception no
    handler took (a bug) into a logged 503 "internal error, retry" with an error id."""

    def __init__(self, app: ASGIApp, requests: Counter, internal_errors: Counter, retry_after_s: int) -> None:
        self.app = app
        self.requests = requests
        self.internal_errors = internal_errors
        self.retry_after = str(retry_after_s).encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 0

        async def noting_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, noting_send)
        except Exception:
            error_id = secrets.token_hex(8)
            self.internal_errors.inc()
            log.exception("internal error answering %s %s", scope.get("method"), scope.get("path"),
                          extra={"request_id": error_id})
            if status == 0:
                status = 503
                await send_json(send, 503, {"detail": "internal error, retry", "error_id": error_id},
                                [(b"retry-after", self.retry_after)])
        route = scope.get("route")
        self.requests.labels(route=getattr(route, "path", "unmatched"), code=str(status)).inc()
