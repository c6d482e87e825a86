"""Answers the gateway writes straight onto the ASGI channel, without a framework in between.

The admission checks (gateway/auth.py, gateway/quotas.py, gateway/limits.py) refuse a request
with a `Refusal`, which both their ASGI middlewares and the fast path (gateway/fast_routes.py)
send; the same refusal is therefore the same bytes whichever path answered.
"""

import json
from dataclasses import dataclass

from starlette.types import Send

JSON_HEADER = (b"content-type", b"application/json")
Headers = tuple[tuple[bytes, bytes], ...]


async def send_body(send: Send, status: int, body: bytes, headers: Headers = ()) -> None:
    """A complete JSON response: status line and headers, then the body in one message."""
    await send({"type": "http.response.start", "status": status,
                "headers": [JSON_HEADER, (b"content-length", str(len(body)).encode()), *headers]})
    await send({"type": "http.response.body", "body": body})


async def send_json(send: Send, status: int, content: dict[str, object],
                    headers: list[tuple[bytes, bytes]] | None = None) -> None:
    await send_body(send, status, json.dumps(content, ensure_ascii=True).encode(), tuple(headers or ()))


@dataclass(frozen=True, slots=True)
class Refusal:
    """A request turned away before any route ran: 401, 403, 413, 429 or 503."""

    status: int
    content: dict[str, object]
    headers: Headers = ()

    async def send(self, send: Send) -> None:
        await send_json(send, self.status, self.content, list(self.headers))


def retry_after(seconds: int) -> Headers:
    return ((b"retry-after", str(seconds).encode()),)
