"""The gateway's bounds on itself, as two steps of gateway/admission.py: requests in flight in the
process (`InFlight`, refused `busy`: 429) and the size of a request's body (`read_body`, refused
`too_large`: 413 before anything parses it). One `InFlight` counts every admitted request of the
process, whichever entry point it came through."""

from prometheus_client import Gauge
from starlette.types import Message, Receive

from gateway.refusals import Kind, Refusal


class InFlight:
    """At most `max_in_flight` requests at once; more are refused `busy` with Retry-After."""

    def __init__(self, max_in_flight: int, retry_after_s: int, gauge: Gauge | None = None) -> None:
        self.max_in_flight = max_in_flight
        self.count = 0
        self._gauge = gauge
        self._full = Refusal(Kind.busy, f"over {max_in_flight} requests in flight; retry later", retry_after_s)

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
    return Refusal(Kind.too_large, f"{what} is over the limit of {max_bytes} bytes")


async def read_body(receive: Receive, declared: bytes | None, max_bytes: int) -> bytes | Refusal | None:
    """The whole body (it is small by definition), the refusal once it is too large, declared
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


def replayed(body: bytes, receive: Receive) -> Receive:
    """`receive` for the app behind admission, which has read the whole body already: the body once,
    then the channel itself (the app waits there for the client's disconnect)."""
    delivered = False

    async def replay() -> Message:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
