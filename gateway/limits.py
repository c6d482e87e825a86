"""What keeps the gateway within its limits: request bodies over a byte limit are 413 before
anything parses them, and requests beyond the in-flight cap are 429.

`InFlight` and `read_body` are the checks themselves; `InFlightLimit` and `BodyLimit` are the
ASGI middlewares that run them for the FastAPI routes. The fast path (gateway/fast_routes.py)
runs the same checks on the same `InFlight`, so one cap counts every /v1 request."""

from prometheus_client import Gauge
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.answers import Refusal, retry_after

PREFIX = "/v1/"


class InFlight:
    """At most `max_in_flight` requests at once; more are refused with 429 and Retry-After."""

    def __init__(self, max_in_flight: int, retry_after_s: int, gauge: Gauge | None = None) -> None:
        self.max_in_flight = max_in_flight
        self.count = 0
        self._gauge = gauge
        self._full = Refusal(429, {"detail": f"over {max_in_flight} requests in flight; retry later"},
                             retry_after(retry_after_s))

    def enter(self) -> Refusal | None:
        """None when the request may go on (call `leave()` once it is answered), else the refusal."""
        if self.count >= self.max_in_flight:
            return self._full
        self._change(+1)
        return None

    def leave(self) -> None:
        self._change(-1)

    def _change(self, change: int) -> None:
        self.count += change
        if self._gauge is not None:
            self._gauge.set(self.count)


def declared_length(headers: list[tuple[bytes, bytes]]) -> bytes | None:
    """The Content-Length header's value as sent (the last one, if a client repeated it)."""
    found = None
    for name, value in headers:
        if name == b"content-length":
            found = value
    return found


def over_limit(max_bytes: int, size: int | None = None) -> Refusal:
    what = "request body" if size is None else f"request body of {size} bytes"
    return Refusal(413, {"detail": f"{what} is over the limit of {max_bytes} bytes"})


async def read_body(receive: Receive, declared: bytes | None, max_bytes: int) -> bytes | Refusal | None:
    """The whole body (it is small by definition), the 413 refusal once it is too large, declared
    or counted (a chunked body has no Content-Length), or None when the client went away first."""
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        return over_limit(max_bytes, int(declared))
    message = await receive()
    if message["type"] != "http.request":
        return None
    body: bytes = message.get("body", b"")
    if not message.get("more_body", False) and len(body) <= max_bytes:
        return body  # the usual case: one message holds all of it
    gathered = bytearray(body)
    while len(gathered) <= max_bytes and message.get("more_body", False):
        message = await receive()
        if message["type"] != "http.request":
            return None
        gathered += message.get("body", b"")
    return over_limit(max_bytes) if len(gathered) > max_bytes else bytes(gathered)


class BodyLimit:
    """Reads the whole body before the app sees it, so a chunked body without Content-Length is
    refused with the same 413 as a declared one."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        body = await read_body(receive, declared_length(scope["headers"]), self.max_bytes)
        if body is None:
            return  # the client went away before sending its body
        if isinstance(body, Refusal):
            await body.send(send)
            return
        await self.app(scope, _replay(body, receive), send)


def _replay(body: bytes, receive: Receive) -> Receive:
    delivered = False

    async def replay() -> Message:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # after the body: wait for the disconnect as the app expects

    return replay


class InFlightLimit:
    """Runs `InFlight` for every request under `prefix`."""

    def __init__(self, app: ASGIApp, in_flight: InFlight, prefix: str = PREFIX) -> None:
        self.app = app
        self.in_flight = in_flight
        self.prefix = prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(self.prefix):
            await self.app(scope, receive, send)
            return
        if (refusal := self.in_flight.enter()) is not None:
            await refusal.send(send)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight.leave()
