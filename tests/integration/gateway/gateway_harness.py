"""Helpers for the gateway's tests: the app in-process over the real Kafka and Redis, a
throwaway redis-server a test may kill and restart (never the shared one), and a stand-in
worker that answers a request topic through a given Redis."""

import asyncio
import shutil
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from pathlib import Path

import httpx
from aiokafka import AIOKafkaConsumer
from redis.asyncio import Redis

from common.topics import ensure_topics, partitions_of
from gateway.app import create_app
from gateway.client import FleetClient
from gateway.settings import GatewaySettings
from schemas.names import reply_stream, requests_topic
from schemas.wire import Request, Result, Status

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@asynccontextmanager
async def in_process(settings: GatewaySettings, client: FleetClient | None = None) -> AsyncIterator[httpx.AsyncClient]:
    """The gateway app with its lifespan run, reached through httpx without a socket."""
    app = create_app(settings, client=client)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway", timeout=30) as http:
            yield http


@contextmanager
def hung_broker() -> Iterator[str]:
    """host:port of a "broker" that accepts connections and never answers, as a stalled one does."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)  # the kernel completes handshakes; nothing ever reads or replies
        yield f"127.0.0.1:{listener.getsockname()[1]}"


class ThrowawayRedis:
    """A redis-server of this test's own on a free port, without persistence: stop() is an outage."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._workdir = workdir
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> float:
        """Start it and wait until it answers; returns the monotonic time it first answered."""
        self._process = subprocess.Popen([REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1",
                                          "--save", "", "--appendonly", "no", "--dir", str(self._workdir)],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        give_up = time.monotonic() + 10
        while time.monotonic() < give_up:
            with suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as conn:
                conn.sendall(b"PING\r\n")
                if conn.recv(16).startswith(b"+PONG"):
                    return time.monotonic()
            time.sleep(0.02)
        raise RuntimeError(f"redis-server on port {self.port} did not start")

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait(timeout=10)
        self._process = None


@asynccontextmanager
async def echo_worker(bootstrap: str, model: str, redis: Redis) -> AsyncIterator[None]:
    """Answers every request on the model's topic with an ok result through `redis`, as a worker
    would (Redis being away for longer than its few retries, that reply is lost)."""
    topic = requests_topic(model)
    await ensure_topics(bootstrap, [topic], 1)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, fetch_max_wait_ms=50)
    await consumer.start()
    partitions = await partitions_of(bootstrap, topic)
    consumer.assign(partitions)
    await consumer.seek_to_end(*partitions)
    for tp in partitions:
        await consumer.position(tp)

    async def answer() -> None:
        while True:
            for records in (await consumer.getmany(timeout_ms=100)).values():
                for record in records:
                    request = Request.decode(record.value or b"")
                    result = Result(id=request.id, model=model, status=Status.ok, outputs={"echo": request.text},
                                    timings={"inference_ms": 0.01}, worker="echo")
                    for _ in range(3):  # a connection broken by a restart fails once, then reconnects
                        try:
                            await redis.xadd(reply_stream(request.reply.redis or ""),
                                             {"id": request.id, "result": result.encode()})
                            break
                        except Exception:
                            await asyncio.sleep(0.05)

    task = asyncio.create_task(answer())
    try:
        yield
    finally:
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task
        await consumer.stop()
