"""A closed-loop HTTP/1.1 load generator light enough to measure a gateway on the same two cores.

Each caller keeps one keep-alive connection and sends prepared request bytes, reading the status
line, the headers and a Content-Length body with asyncio streams: a few tens of microseconds of
CPU a request, where an HTTP client library costs more than the gateway it measures.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from fleet.bench.load import mark_window_edges


@dataclass
class HttpSamples:
    window_s: float
    latencies_ms: list[float] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)

    @property
    def completed(self) -> int:
        return len(self.latencies_ms)


def post_bytes(host: str, path: str, body: dict[str, object], headers: dict[str, str]) -> bytes:
    payload = json.dumps(body).encode()
    lines = [f"POST {path} HTTP/1.1", f"Host: {host}", "Content-Type: application/json",
             f"Content-Length: {len(payload)}", *(f"{name}: {value}" for name, value in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + payload


async def _exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes) -> int:
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length = 0
    for line in head.split(b"\r\n")[1:]:
        if line[:15].lower() == b"content-length:":
            length = int(line[15:])
    if length:
        await reader.readexactly(length)
    return status


async def closed_loop_http(host: str, port: int, requests: Sequence[bytes], *, callers: int, warmup_s: float,
                           duration_s: float, at_window_edges: Callable[[], None] = lambda: None) -> HttpSamples:
    """`callers` connections sending `requests` round-robin back to back; replies inside the window count."""
    samples = HttpSamples(window_s=duration_s)
    window_start = time.perf_counter() + warmup_s
    window_end = window_start + duration_s

    async def caller(index: int) -> None:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            sent = index
            while (sent_at := time.perf_counter()) < window_end:
                status = await _exchange(reader, writer, requests[sent % len(requests)])
                sent += callers
                done_at = time.perf_counter()
                if window_start <= done_at <= window_end:
                    samples.latencies_ms.append((done_at - sent_at) * 1000)
                    samples.statuses[status] = samples.statuses.get(status, 0) + 1
        finally:
            writer.close()

    await asyncio.gather(mark_window_edges(window_start, window_end, at_window_edges),
                         *(caller(index) for index in range(callers)))
    return samples
