"""Fixtures for tests against the real Kafka and Redis that `scripts/stack up` starts.

Nothing here fakes a server: when the stack does not answer, the tests fail and say how to
start it.
"""

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer, TopicPartition
from redis.asyncio import Redis

from common.clients import new_consumer, new_producer, redis_client
from common.settings import FleetSettings
from fleet.stack.cli import wait_for_kafka, wait_for_redis
from common.topics import partitions_of
from gateway.client import FleetClient
from gateway.settings import ClientSettings
from models.backends.base import Backend
from models.loading import ModelLoader
from workers.worker import Worker
from workers.settings import WorkerSettings
from tests.paths import REPO_ROOT as ROOT

MODEL = "minilm-embed"


@pytest.fixture(scope="session")
async def stack() -> FleetSettings:
    settings = FleetSettings()
    try:
        await wait_for_kafka(settings, 20)
        await wait_for_redis(settings, 10)
    except Exception as exc:
        pytest.fail(f"the local stack does not answer ({exc}); start it with `scripts/stack up`")
    return settings


@pytest.fixture(scope="session")
def worker_settings(stack: FleetSettings) -> WorkerSettings:
    # Caches off: these tests count what the model computes; tests of the caches switch them on.
    return WorkerSettings(model=MODEL, max_batch_size=32, max_queue_delay_ms=10, session_timeout_ms=6000,
                          exact_cache=False)


@pytest.fixture(scope="session")
def backend(worker_settings: WorkerSettings) -> Backend:
    return ModelLoader(worker_settings.runtime()).load()


@pytest.fixture(scope="session")
async def redis(stack: FleetSettings) -> AsyncIterator[Redis]:
    client = redis_client(stack)
    yield client
    await client.aclose()


@pytest.fixture(scope="session")
async def client(stack: FleetSettings) -> AsyncIterator[FleetClient]:
    async with FleetClient(ClientSettings(default_timeout_s=30)) as fleet_client:
        yield fleet_client


@asynccontextmanager
async def serving(settings: WorkerSettings, backend: Backend) -> AsyncIterator[Worker]:
    """A worker serving in the background of the test's event loop; stopped cleanly on exit."""
    async with Worker(settings, backend=backend) as worker:
        task = asyncio.create_task(worker.run())
        try:
            yield worker
        finally:
            worker.request_stop()
            await task


@pytest.fixture
def serve(worker_settings: WorkerSettings, backend: Backend):  # type: ignore[no-untyped-def]
    def start(settings: WorkerSettings | None = None):  # type: ignore[no-untyped-def]
        return serving(settings or worker_settings, backend)
    return start


class Process:
    """A fleet process (worker or gateway) started as a real subprocess."""

    def __init__(self, args: list[str], env: dict[str, str], ready_marker: str, log_path: Path) -> None:
        self.log_path = log_path
        self._log = log_path.open("wb")
        self.popen = subprocess.Popen([sys.executable, *args], cwd=ROOT, env={**os.environ, **env},
                                      stdout=self._log, stderr=subprocess.STDOUT)
        self._wait_for(ready_marker)

    def _wait_for(self, marker: str, timeout_s: float = 60) -> None:
        give_up = time.monotonic() + timeout_s
        while time.monotonic() < give_up:
            if marker in self.log_path.read_text(errors="replace"):
                return
            if self.popen.poll() is not None:
                break
            time.sleep(0.1)
        raise RuntimeError(f"{self.popen.args} did not get ready:\n{self.log_path.read_text(errors='replace')[-3000:]}")

    def stop(self, sig: int | None = None) -> int:
        if self.popen.poll() is None:
            if sig is None:
                self.popen.terminate()
            else:
                self.popen.send_signal(sig)
        try:
            return self.popen.wait(timeout=30)
        finally:
            self._log.close()


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[list[Process]]:
    started: list[Process] = []
    yield started
    for process in started:
        process.stop(signal.SIGKILL)


def start_worker(processes: list[Process], tmp_path: Path, name: str, **env: str) -> Process:
    settings = {"FLEET_MODEL": MODEL, "FLEET_WORKER_ID": name, "FLEET_SESSION_TIMEOUT_MS": "6000",
                "FLEET_MAX_QUEUE_DELAY_MS": "10"} | env
    process = Process(["-m", "workers.main"], settings, "ready:", tmp_path / f"{name}.log")
    processes.append(process)
    return process


async def end_offsets(settings: FleetSettings, topic: str) -> dict[TopicPartition, int]:
    consumer = new_consumer(settings)
    await consumer.start()
    try:
        partitions = await partitions_of(settings, topic)
        return await consumer.end_offsets(partitions) if partitions else {}
    finally:
        await consumer.stop()


async def read_from(settings: FleetSettings, offsets: dict[TopicPartition, int], *, until: Callable[[list[bytes]], bool],
                    timeout_s: float = 30) -> list[bytes]:
    """Values on the given partitions after `offsets`, until `until(values)` holds or time runs out."""
    consumer = new_consumer(settings, enable_auto_commit=False)
    await consumer.start()
    values: list[bytes] = []
    try:
        consumer.assign(list(offsets))
        for tp, offset in offsets.items():
            consumer.seek(tp, offset)
        give_up = time.monotonic() + timeout_s
        while not until(values) and time.monotonic() < give_up:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                values += [r.value for r in records if r.value is not None]
    finally:
        await consumer.stop()
    return values


@pytest.fixture(scope="session")
async def producer(stack: FleetSettings) -> AsyncIterator[AIOKafkaProducer]:
    raw = new_producer(stack, linger_ms=0, enable_idempotence=False)
    await raw.start()
    yield raw
    await raw.stop()
