"""ASGI middleware that keeps the gateway within its limits: request bodies over a byte limit
are 413 before anything parses them, and requests beyond the in-flight cap are 429."""

import json

from prometheus_client import Gauge
from starlette.types import ASGIApp, Message, Receive, Scope, Send


async def send_json(send: Send, status: int, content: dict[str, object],
                    headers: list[tuple[bytes, bytes]] | None = None) -> None:
    body = json.dumps(content, ensure_ascii=True).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *(headers or [])]})
    await send({"type": "http.response.body", "body": body})


class BodyLimit:
    """Reads the whole body (it is small by definition) before the app sees it, so a chunked
    body without Content-Length is refused with the same 413 as a declared one."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(send, int(declared))
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away before sending its body
            body += message.get("body", b"")
            if len(body) > self.max_bytes:
                await self._refuse(send, len(body), counted=True)
                return
            if not message.get("more_body", False):
                break
        await self.app(scope, _replay(bytes(body), receive), send)

    async def _refuse(self, send: Send, size: int, *, counted: bool = False) -> None:
        what = "request body" if counted else f"request body of {size} bytes"
        await send_json(send, 413, {"detail": f"{what} is over the limit of {self.max_bytes} bytes"})


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
    """At most `max_in_flight` requests under `prefix` at once; more are 429 with Retry-After."""

    def __init__(self, app: ASGIApp, max_in_flight: int, retry_after_s: int, gauge: Gauge | None = None,
                 prefix: str = "/v1/") -> None:
        self.app = app
        self.gauge = gauge
        self.max_in_flight = max_in_flight
        self.retry_after = str(retry_after_s).encode()
        self.prefix = prefix
        self.in_flight = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(self.prefix):
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.max_in_flight:
            await send_json(send, 429, {"detail": f"over {self.max_in_flight} requests in flight; retry later"},
                            [(b"retry-after", self.retry_after)])
            return
        self._count(+1)
        try:
            await self.app(scope, receive, send)
        finally:
            self._count(-1)

    def _count(self, change: int) -> None:
        self.in_flight += change
        if self.gauge is not None:
            self.gauge.set(self.in_flight)
