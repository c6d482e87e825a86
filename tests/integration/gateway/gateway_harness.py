"""Helpers for the gateway's tests: the app in-process over the real Kafka and Redis, API keys
made as `fleet keys create` makes them (or written to a keys file), a throwaway redis-server a
test may kill and restart (never the shared one), and a stand-in worker that answers a request
topic through a given Redis."""

import asyncio
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from pathlib import Path
from typing import Any

import httpx
from redis.asyncio import Redis

from common.auth_keys import create_key, key_digest, new_key
from common.clients import new_consumer, redis_client
from common.settings import FleetSettings
from common.topics import ensure_topics, partitions_of
from gateway.app import create_app
from fleet.ports import free_port
from gateway.client import FleetClient
from gateway.settings import GatewaySettings
from schemas.names import reply_stream
from schemas.wire import Request, Result, Status, now_ms

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"


TEST_TENANT = "gw-tests"
METRICS_TENANT = "metrics"


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def issue_key(redis_url: str, tenant: str, *, cluster: bool | None = None) -> str:
    """A key for `tenant` in that Redis, made by the function `fleet keys create` runs; `cluster`
    (default: FLEET_REDIS_CLUSTER) says whether that Redis is a cluster."""
    options = {} if cluster is None else {"redis_cluster": cluster}
    redis = redis_client(FleetSettings(redis_url=redis_url, **options))
    try:
        return (await create_key(redis, tenant, now_ms=now_ms())).key
    finally:
        await redis.aclose()


def cli_key(tenant: str, env: dict[str, str] | None = None) -> str:
    """A key made by `fleet keys create --tenant <tenant>` itself, read from its stdout."""
    made = subprocess.run([sys.executable, "-m", "fleet.cli", "keys", "create", "--tenant", tenant], env=env,
                          capture_output=True, text=True, timeout=60, check=True)
    return made.stdout.strip()


def write_keys_file(path: Path, *tenants: str) -> dict[str, str]:
    """A keys file (`<sha256> <tenant>` lines) with a new key per tenant; returns tenant -> key."""
    keys = {tenant: new_key()[0] for tenant in tenants}
    path.write_text("# test keys\n" + "".join(f"{key_digest(key)} {tenant}\n" for tenant, key in keys.items()))
    return keys


class GatewayHttp(httpx.AsyncClient):
    """httpx to the app, sending a tenant's key; `metrics()` scrapes with the metrics tenant's key."""

    def __init__(self, metrics_key: str | None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.metrics_key = metrics_key

    async def metrics(self) -> str:
        response = await self.get("/metrics", headers=bearer(self.metrics_key) if self.metrics_key else None)
        assert response.status_code == 200, response.text
        return response.text


@asynccontextmanager
async def in_process(settings: GatewaySettings, client: FleetClient | None = None, *, key: str | None = None,
                     metrics_key: str | None = None) -> AsyncIterator[GatewayHttp]:
    """The gateway app with its lifespan run, reached through httpx without a socket. With
    authentication on, requests carry `key` (default: a new key of TEST_TENANT in the gateway's Redis)."""
    app = create_app(settings, client=client)
    headers: dict[str, str] = {}
    if settings.auth_required:
        key = key or await issue_key(settings.redis_url, TEST_TENANT, cluster=settings.redis_cluster)
        metrics_key = metrics_key or await issue_key(settings.redis_url, METRICS_TENANT, cluster=settings.redis_cluster)
        headers = bearer(key)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with GatewayHttp(metrics_key, transport=transport, base_url="http://gateway", timeout=30,
                               headers=headers) as http:
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
async def echo_worker(settings: FleetSettings, model: str, redis: Redis) -> AsyncIterator[None]:
    """Answers every request on the model's topics (every lane) with an ok result through `redis`,
    as a worker would (Redis being away for longer than its few retries, that reply is lost)."""
    topics = settings.lane_plan.topics(model)
    await ensure_topics(settings, topics, 1)
    consumer = new_consumer(settings, enable_auto_commit=False, fetch_max_wait_ms=50)
    await consumer.start()
    partitions = [tp for topic in topics for tp in await partitions_of(settings, topic)]
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
                                    timings={"inference_ms": 0.01}, worker="echo", tenant=request.tenant)
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
