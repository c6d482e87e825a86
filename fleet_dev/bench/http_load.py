"""A closed-loop HTTP/1.1 load generator light enough to measure a gateway on the same two cores.

Each caller is one keep-alive connection driven from its protocol's callbacks: the reply's
bytes arrive in `data_received`, which parses the status line and Content-Length, records the
exchange and writes the next prepared request at once. No task, future or stream reader per
request: ~30 us of CPU a request (on uvloop), where asyncio streams cost twice that and an HTTP
client library more than the gateway it measures.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import cast

from fleet_dev.bench.load import mark_window_edges

HEAD_END = b"\r\n\r\n"
REPLY_GRACE_S = 60.0  # the last replies may come this long after the window, at most


@dataclass
class HttpSamples:
    window_s: float
    latencies_ms: list[float] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)

    @property
    def completed(self) -> int:
        return len(self.latencies_ms)


def post_bytes(host: str, path: str, body: dict[str, object], headers: dict[str, str]) -> bytes:
    return post_raw(host, path, json.dumps(body).encode(), {"Content-Type": "application/json", **headers})


def post_raw(host: str, path: str, payload: bytes, headers: dict[str, str]) -> bytes:
    """A POST of `payload` as is, with these headers (no Content-Type unless given, as tritonclient sends)."""
    lines = [f"POST {path} HTTP/1.1", f"Host: {host}", f"Content-Length: {len(payload)}",
             *(f"{name}: {value}" for name, value in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + payload


def parse_head(head: bytes) -> tuple[int, int]:
    """(status, Content-Length) of a response head, without its blank line; a missing length is 0."""
    length = 0
    for line in head.split(b"\r\n")[1:]:
        if line[:15].lower() == b"content-length:":
            length = int(line[15:])
    return int(head[9:12]), length


class _Window:
    """When replies count: those that arrive between `start` and `end` (perf_counter seconds)."""

    def __init__(self, warmup_s: float, duration_s: float) -> None:
        self.start = time.perf_counter() + warmup_s
        self.end = self.start + duration_s


class _Caller(asyncio.Protocol):
    """One connection sending `requests[first], requests[first + stride], ...` back to back until
    the window closes; `finished` resolves with the connection's end or its error."""

    def __init__(self, requests: Sequence[bytes], first: int, stride: int, window: _Window, samples: HttpSamples,
                 finished: asyncio.Future[None]) -> None:
        self._requests = requests
        self._next = first
        self._stride = stride
        self._window = window
        self._samples = samples
        self._finished = finished
        self._transport: asyncio.Transport | None = None
        self._buffer = b""
        self._sent_at = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's are no asyncio.Transport subclass
        self._send()

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer + data
        head_end = buffer.find(HEAD_END)
        if head_end < 0:
            self._buffer = buffer
            return
        status, length = parse_head(buffer[:head_end])
        end = head_end + len(HEAD_END) + length
        if len(buffer) < end:
            self._buffer = buffer
            return
        self._buffer = buffer[end:]  # a closed loop never has a second reply waiting; kept for correctness
        done_at = time.perf_counter()
        if self._window.start <= done_at <= self._window.end:
            self._samples.latencies_ms.append((done_at - self._sent_at) * 1000)
            self._samples.statuses[status] = self._samples.statuses.get(status, 0) + 1
        if done_at < self._window.end:
            self._send()
        else:
            self._close()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._finished.done():
            if exc is None and time.perf_counter() < self._window.end:
                exc = ConnectionError("the gateway closed the connection before the window ended")
            if exc is None:
                self._finished.set_result(None)
            else:
                self._finished.set_exception(exc)

    def _send(self) -> None:
        assert self._transport is not None
        request = self._requests[self._next % len(self._requests)]
        self._next += self._stride
        self._sent_at = time.perf_counter()
        self._transport.write(request)

    def _close(self) -> None:
        assert self._transport is not None
        self._transport.close()


async def closed_loop_http(host: str, port: int, requests: Sequence[bytes], *, callers: int, warmup_s: float,
                           duration_s: float, at_window_edges: Callable[[], None] = lambda: None) -> HttpSamples:
    """`callers` connections sending `requests` round-robin back to back; replies inside the window count."""
    loop = asyncio.get_running_loop()
    samples = HttpSamples(window_s=duration_s)
    window = _Window(warmup_s, duration_s)
    endings: list[asyncio.Future[None]] = []
    for index in range(callers):
        finished: asyncio.Future[None] = loop.create_future()
        endings.append(finished)
        await loop.create_connection(
            lambda index=index, finished=finished: _Caller(requests, index, callers, window, samples, finished),  # type: ignore[misc]
            host, port)
    # A caller whose reply never comes (a gateway that hangs, a callback that failed) ends the run
    # with an error rather than holding the bench forever.
    give_up_s = max(window.end - time.perf_counter(), 0) + REPLY_GRACE_S
    await asyncio.wait_for(asyncio.gather(mark_window_edges(window.start, window.end, at_window_edges), *endings),
                           give_up_s)
    return samples
