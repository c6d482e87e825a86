"""Answers the gateway writes straight onto the ASGI channel, without a framework in between.

`send_refusal` is how /v1 says an admission refusal (gateway/refusals.py), on the fast path
(gateway/fast_routes.py) and on the routes FastAPI serves (gateway/http_admission.py) alike:
the same refusal is the same bytes whichever path answered.
"""

import json

from starlette.types import Send

from gateway.refusals import Refusal

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


async def send_refusal(send: Send, refusal: Refusal) -> None:
    """/v1's form of a refusal: its status, {"detail", "refusal": kind, facts...}, and its headers."""
    await send_json(send, refusal.status, refusal.content(), refusal.http_headers())


def retry_after(seconds: int) -> Headers:
    return ((b"retry-after", str(seconds).encode()),)
