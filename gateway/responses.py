"""How the gateway answers when a request does not end in a result: a 4xx naming the field for
bad input, 429 or 503 with Retry-After when the fleet cannot take it now, and, for a bug, a
logged 503 with an error id instead of a bare 500."""

import json
import logging
import math
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from prometheus_client import Counter
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.answers import retry_after, send_json
from gateway.errors import FleetUnavailable, Overloaded
from gateway.refusals import Kind, Refusal
from schemas.wire import Result

log = logging.getLogger(__name__)

# The route label of answers given before any route matched: refusals of the admission checks.
UNMATCHED = "unmatched"


class SafeJSONResponse(JSONResponse):
    """JSON that always encodes. orjson first: an embedding's 384 floats cost the standard library
    about 0.5 ms, more than the rest of a request; what orjson refuses (a lone surrogate an
    answer echoes, a type it does not know) is escaped to ASCII by the standard library instead.
    A NaN or infinity is null, as orjson writes it: JSON has no such numbers."""

    def render(self, content: Any) -> bytes:
        return safe_json(content)


def safe_json(content: Any) -> bytes:
    """`SafeJSONResponse`'s bytes for `content`, for the answers the fast path writes itself."""
    try:
        return orjson.dumps(content)
    except TypeError:
        return json.dumps(_finite(content), ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode()


def result_json(result: Result, timings: dict[str, float]) -> bytes:
    """The JSON of `result.model_dump(mode="json")` with these timings, written by orjson from the
    result's own fields: dumping first copied every float of an embedding once more. Results
    holding what orjson does not take (bytes, integers beyond 64 bits) are dumped first after all."""
    result = result.as_floats()  # JSON carries an embedding as floats whatever encoding it came in
    fields = {**result.__dict__, "timings": timings}  # the fields in order: the status enum is a str
    if result.error is not None:
        fields["error"] = result.error.model_dump(mode="json")
    try:
        return orjson.dumps(fields)
    except TypeError:
        return safe_json({**result.model_dump(mode="json"), "timings": timings})


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


@dataclass(frozen=True, slots=True)
class ErrorAnswer:
    status: int
    content: dict[str, Any]
    headers: dict[str, str] | None = None


def error_answer(exc: Exception, unavailable: Callable[[str], Counter], retry_after_s: int) -> ErrorAnswer | None:
    """The answer to an exception a route raised on purpose: bad input (HTTPException,
    RequestValidationError), an outage (FleetUnavailable, counted), too many waits (Overloaded, the
    `busy` refusal of gateway/refusals.py);
    None for any other exception, which is a bug (see `Outcomes`). FastAPI's exception handlers and
    the fast path both answer through this, so a route gives the same answer on either path."""
    if isinstance(exc, RequestValidationError):
        return ErrorAnswer(422, {"detail": _validation_detail(exc)})
    if isinstance(exc, StarletteHTTPException):
        return ErrorAnswer(exc.status_code, {"detail": exc.detail}, exc.headers)
    if isinstance(exc, FleetUnavailable):
        unavailable(exc.dependency).inc()
        return ErrorAnswer(503, {"detail": str(exc), "dependency": exc.dependency},
                           {"Retry-After": str(retry_after_s)})
    if isinstance(exc, Overloaded):  # the reply waiter's bound: the process is as busy as admission's `busy`
        busy = Refusal(Kind.busy, str(exc), retry_after_s)
        return ErrorAnswer(busy.status, busy.content(), {name.decode(): value.decode()
                                                         for name, value in busy.http_headers()})
    return None


def install_error_handlers(app: FastAPI, unavailable: Callable[[str], Counter], retry_after_s: int) -> None:
    async def answer(_: Request, exc: Exception) -> SafeJSONResponse:
        found = error_answer(exc, unavailable, retry_after_s)
        assert found is not None, "registered only for the exceptions error_answer takes"
        return SafeJSONResponse(found.content, status_code=found.status, headers=found.headers)

    for kind in (RequestValidationError, StarletteHTTPException, FleetUnavailable, Overloaded):
        app.add_exception_handler(kind, answer)


class InternalErrors:
    """A bug's answer: logged with an error id, counted, and answered 503 "internal error, retry"
    with Retry-After, never a bare 500."""

    def __init__(self, counter: Counter, retry_after_s: int) -> None:
        self._counter = counter
        self._retry_after = retry_after(retry_after_s)

    async def answer(self, scope: Scope, send: Send, *, started: bool) -> None:
        """Call from an `except` block; `started` says whether a response is under way already."""
        error_id = secrets.token_hex(8)
        self._counter.inc()
        log.exception("internal error answering %s %s", scope.get("method"), scope.get("path"),
                      extra={"request_id": error_id})
        if not started:
            await send_json(send, 503, {"detail": "internal error, retry", "error_id": error_id}, list(self._retry_after))


class Outcomes:
    """Outermost middleware of the FastAPI routes: counts every answer by route and code, and turns
    an exception no handler took (a bug) into `InternalErrors`' answer."""

    def __init__(self, app: ASGIApp, requests: Callable[[str, str], Counter], internal_errors: InternalErrors) -> None:
        self.app = app
        self.requests = requests
        self.internal_errors = internal_errors

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
            await self.internal_errors.answer(scope, send, started=status != 0)
            status = status or 503
        route = scope.get("route")
        self.requests(getattr(route, "path", UNMATCHED), str(status)).inc()
