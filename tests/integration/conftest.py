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
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer, TopicPartition
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff

from common.clients import new_consumer, new_producer, redis_client
from common.settings import FleetSettings
from fleet_dev.stack.cli import wait_for_kafka, wait_for_redis
from common.topics import partitions_of
from gateway.client import FleetClient
from gateway.settings import ClientSettings
from models.backends.base import Backend
from models.loading import ModelLoader
from workers.worker import Worker
from workers.settings import WorkerSettings
from tests.paths import REPO_ROOT as ROOT

MODEL = "minilm-embed"
# A CUDA worker that this install can serve, on a machine where no GPU is usable: the torch backend
# (torch is PyPI's CUDA build) with no device visible, even on a GPU machine. It loads, finds no
# device and reports `failed`. On ONNX Runtime's CPU wheel a CUDA worker never gets that far: it is
# refused at start, before Kafka and Redis (models/backends/flavour.py).
NO_GPU_WORKER = {"FLEET_DEVICE": "cuda", "FLEET_BACKEND": "torch", "CUDA_VISIBLE_DEVICES": ""}


def _await_chain(task: "asyncio.Task[Any]") -> str:
    """Where a task is suspended, down its chain of awaits (Task.get_stack shows only the top)."""
    lines = [f"task {task.get_name()}:"]
    awaiting: Any = task.get_coro()
    while awaiting is not None:
        frame = getattr(awaiting, "cr_frame", None) or getattr(awaiting, "gi_frame", None)
        if frame is not None:
            lines.append(f"  {frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}")
        awaiting = getattr(awaiting, "cr_await", None) or getattr(awaiting, "gi_yieldfrom", None)
    return "\n".join(lines)


def print_tasks(why: str) -> None:
    """Where every asyncio task waits, to stderr (pytest shows it with the failure)."""
    print(f"=== asyncio tasks: {why} ===", file=sys.stderr)
    for task in asyncio.all_tasks():
        if not task.done():
            print(_await_chain(task), file=sys.stderr)
    sys.stderr.flush()


@pytest.fixture(autouse=True)
async def hung_tasks_shown(request: pytest.FixtureRequest) -> AsyncIterator[None]:
    """pytest-timeout prints the threads of a hung test; for an async test that is the event loop
    idling in select(), which says nothing (CI has timed out a rollout test, then two workers
    joining one group, that way). Shortly before the timeout fires, print where each asyncio task
    waits instead."""
    marker = request.node.get_closest_marker("timeout")
    limit = float(marker.args[0]) if marker and marker.args else float(request.config.getini("timeout") or 0)
    if limit <= 0:
        yield
        return
    handle = asyncio.get_running_loop().call_later(max(limit - 15, limit * 0.8), print_tasks,
                                                   f"{request.node.nodeid} is about to time out")
    yield
    handle.cancel()


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
    # Some tests restart the stack's Redis: a command that meets a pooled connection the server
    # closed is sent again on a new one, so the tests after them do not fail on a dead socket.
    client = redis_client(stack, retry=Retry(ExponentialBackoff(cap=1.0, base=0.1), 3))
    yield client
    await client.aclose()


@pytest.fixture(scope="session")
async def client(stack: FleetSettings) -> AsyncIterator[FleetClient]:
    async with FleetClient(ClientSettings(default_timeout_s=30)) as fleet_client:
        yield fleet_client


class Served:
    """A worker running in the background of the test's event loop."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.task = asyncio.create_task(worker.run())

    async def stop(self, within_s: float = 60.0) -> None:
        """Stop it, bounded: a worker that will not stop fails its test with its stack, and is
        cancelled rather than left consuming the next tests' records."""
        self.worker.request_stop()
        try:
            await asyncio.wait_for(asyncio.shield(self.task), within_s)
        except TimeoutError:
            stacks = "\n".join(_await_chain(task) for task in asyncio.all_tasks() if not task.done())
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
            raise AssertionError(f"worker {self.worker.worker_id} did not stop within {within_s:g} s "
                                 f"of request_stop(); the loop's tasks were at:\n{stacks}") from None
        finally:
            await self.worker.stop()


@asynccontextmanager
async def serving(settings: WorkerSettings, backend: Backend,
                  running: list[Served] | None = None) -> AsyncIterator[Worker]:
    """A worker serving in the background of the test's event loop; stopped cleanly on exit.
    `running` lists it while it serves, so a fixture can stop what a timed-out test left behind."""
    worker = Worker(settings, backend=backend)
    try:
        await worker.start()
    except BaseException:
        await worker.stop()
        raise
    served = Served(worker)
    if running is not None:
        running.append(served)
    try:
        yield worker
    finally:
        if running is not None:
            running.remove(served)
        await served.stop()


@pytest.fixture
async def serve(worker_settings: WorkerSettings, backend: Backend) -> AsyncIterator[Callable[..., Any]]:
    running: list[Served] = []

    def start(settings: WorkerSettings | None = None):  # type: ignore[no-untyped-def]
        return serving(settings or worker_settings, backend, running)
    yield start
    # Only a test that pytest-timeout interrupted leaves workers here (its `async with` never exited).
    for served in list(running):
        await served.stop()


class Process:
    """A fleet process (worker or gateway) started as a real subprocess."""

    def __init__(self, args: list[str], env: dict[str, str], ready_marker: str, log_path: Path) -> None:
        self.log_path = log_path
        self._log = log_path.open("wb")
        self.popen = subprocess.Popen([sys.executable, *args], cwd=ROOT, env={**os.environ, **env},
                                      stdout=self._log, stderr=subprocess.STDOUT)
        self.wait_for(ready_marker)

    def wait_for(self, marker: str, timeout_s: float = 60) -> None:
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
