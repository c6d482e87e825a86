"""A worker process's HTTP port: /livez, /healthz, /readyz and /metrics, served from its event loop.

One port (FLEET_METRICS_PORT, bound to FLEET_METRICS_HOST) answers the orchestrator's probes
and Prometheus' scrapes. It is a small asyncio server rather than prometheus_client's
threaded one because a probe answered by the event loop is itself the proof that the loop
runs: a thread would keep answering 200 while the loop that serves Kafka is wedged.

    GET /livez    200 while the event loop and the run loop live; 503 once the run loop died
    GET /healthz  the same as /livez
    GET /readyz   200 when the worker may take work now; 503 with the reason otherwise
    GET /metrics  the worker's Prometheus registry, text format

Probe answers are JSON (see workers/health/probes.py for what they mean). HEAD is answered
like GET without a body. Each connection carries one request and is closed. At most
MAX_CONNECTIONS are served at once: probes and scrapes come one or two at a time, and a flood of
idle sockets must not take the file descriptors the worker's Kafka and Redis connections need.
"""

from __future__ import annotations

import asyncio
import json
import logging
from contextlib import AbstractAsyncContextManager, nullcontext
from http import HTTPStatus
from typing import Self

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from common.logs import LogThrottle
from workers.health.probes import ProcessProbes, Verdict

log = logging.getLogger(__name__)

LIVENESS_PATHS = ("/livez", "/healthz")
READINESS_PATH = "/readyz"
METRICS_PATH = "/metrics"
PATHS = (*LIVENESS_PATHS, READINESS_PATH, METRICS_PATH)
READ_TIMEOUT_S = 5.0
MAX_CONNECTIONS = 64
BUSY_BODY = json.dumps({"error": "too many connections"}).encode()
MAX_HEADER_LINES = 100
JSON = "application/json"

Response = tuple[HTTPStatus, str, bytes]


class HealthServer:
    """The endpoints above on host:port for as long as the `async with` block runs (port 0: any free one)."""

    def __init__(self, probes: ProcessProbes, registry: CollectorRegistry, *, host: str, port: int) -> None:
        self._probes = probes
        self._registry = registry
        self._host = host
        self._port = port
        self._server: asyncio.Server | None = None
        self._open = 0
        self.refused = 0
        self._refusals = LogThrottle(log)

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("health server not started")
        return int(self._server.sockets[0].getsockname()[1])

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._handle, self._host, self._port)
        log.info("health and metrics on http://%s:%d (%s)", self._host, self.port, " ".join(PATHS))
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._server is not None:
            server, self._server = self._server, None
            server.close()
            await server.wait_closed()

    def respond(self, method: str, target: str) -> Response:
        """The answer to one request line's method and target."""
        path = target.split("?", 1)[0]
        if path not in PATHS:
            return _json(Verdict(False, {"error": f"no such path; try {', '.join(PATHS)}"}), HTTPStatus.NOT_FOUND)
        if method not in ("GET", "HEAD"):
            return _json(Verdict(False, {"error": "only GET and HEAD"}), HTTPStatus.METHOD_NOT_ALLOWED)
        if path == METRICS_PATH:
            return HTTPStatus.OK, CONTENT_TYPE_LATEST, generate_latest(self._registry)
        verdict = self._probes.ready() if path == READINESS_PATH else self._probes.live()
        return _json(verdict, HTTPStatus.OK if verdict.ok else HTTPStatus.SERVICE_UNAVAILABLE)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._open >= MAX_CONNECTIONS:
            self._refuse(writer)
            return
        self._open += 1
        try:
            await self._serve(reader, writer)
        finally:
            self._open -= 1

    def _refuse(self, writer: asyncio.StreamWriter) -> None:
        """Answered without reading and closed at once: a flood holds no socket longer than this."""
        self.refused += 1
        writer.write(_http_response(HTTPStatus.SERVICE_UNAVAILABLE, JSON, BUSY_BODY))
        writer.close()
        self._refusals.log(logging.WARNING, "busy", "health port: %d connections open, the most it serves; "
                           "%d refused so far", MAX_CONNECTIONS, self.refused)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(READ_TIMEOUT_S):
                method, target = await _request_line(reader)
            status, content_type, body = self.respond(method, target)
            writer.write(_http_response(status, content_type, body, head_only=method == "HEAD"))
            await writer.drain()
        except (TimeoutError, ValueError, ConnectionError) as exc:  # a bad or slow client, not our fault
            log.debug("health request dropped: %r", exc)
        finally:
            writer.close()
            try:
                await writer.wait_closed()
            except ConnectionError:
                pass


async def _request_line(reader: asyncio.StreamReader) -> tuple[str, str]:
    """Method and target of one HTTP/1.x request; its headers are read and ignored."""
    method, target, _version = (await reader.readline()).decode("latin-1").split()
    for _ in range(MAX_HEADER_LINES):
        if (await reader.readline()).strip() == b"":
            return method.upper(), target
    raise ValueError("too many header lines")


def _http_response(status: HTTPStatus, content_type: str, body: bytes, *, head_only: bool = False) -> bytes:
    head = (f"HTTP/1.1 {status.value} {status.phrase}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n")
    return head.encode("latin-1") + (b"" if head_only else body)


def _json(verdict: Verdict, status: HTTPStatus) -> Response:
    return status, JSON, json.dumps(verdict.detail).encode()


def health_endpoints(probes: ProcessProbes, registry: CollectorRegistry, *, host: str,
                     port: int | None) -> AbstractAsyncContextManager[object]:
    """The health server on `port`, or nothing where the process serves no port (port None)."""
    return HealthServer(probes, registry, host=host, port=port) if port is not None else nullcontext()
