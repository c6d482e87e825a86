"""Hot swap, rollback and canary routing in a serving worker, driven by the Redis pointers."""

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from common.settings import FleetSettings
from gateway.client import FleetClient, RequestOptions
from schemas.names import requests_topic, versions_key
from schemas.wire import ReplyTo, Request, Result, Status
from tests.integration.conftest import MODEL
from models.backends.base import Backend
from workers.worker import Worker
from models.registry import ModelRegistry
from workers.settings import WorkerSettings
from versions.routing import version_for


@pytest.fixture
async def pointers(redis: Redis) -> AsyncIterator[str]:
    """The pointer hash of the test model, removed afterwards so other tests serve their own version."""
    await redis.delete(versions_key(MODEL))
    yield versions_key(MODEL)
    await redis.delete(versions_key(MODEL))


@pytest.fixture(scope="module")
def int8_id(stack: FleetSettings) -> str:
    return ModelRegistry(WorkerSettings().registry_dir).resolve(MODEL, precision="int8").id


async def until(condition, timeout_s: float = 30) -> None:  # type: ignore[no-untyped-def]
    give_up = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < give_up, "condition not reached in time"
        await asyncio.sleep(0.02)


async def send_in_order(client: FleetClient, requests: list[Request]) -> None:
    """One partition, so the worker sees them in exactly this order."""
    for start in range(0, len(requests), 50):
        futures = [await client.producer.send(requests_topic(MODEL), r.encode(), key=r.id.encode(), partition=0)
                   for r in requests[start:start + 50]]
        await asyncio.gather(*futures)
        await asyncio.sleep(0.01)


async def results_of(client: FleetClient, requests: list[Request], timeout_s: float = 120) -> list[Result]:
    give_up = time.monotonic() + timeout_s
    found: dict[str, Result] = {}
    while len(found) < len(requests) and time.monotonic() < give_up:
        for request in requests:
            if request.id not in found and (result := await client.result(request.id)) is not None:
                found[request.id] = result
        await asyncio.sleep(0.1)
    assert len(found) == len(requests), f"{len(requests) - len(found)} of {len(requests)} never answered"
    return [found[r.id] for r in requests]


def served_settings(worker_settings: WorkerSettings) -> WorkerSettings:
    return worker_settings.model_copy(update={"pointer_poll_s": 0.05})


async def serving_worker(settings: WorkerSettings, backend: Backend) -> tuple[Worker, "asyncio.Task[int]"]:
    worker = Worker(settings, backend=backend)
    await worker.start()
    return worker, asyncio.create_task(worker.run())


async def stop(worker: Worker, task: "asyncio.Task[int]") -> None:
    worker.request_stop()
    await task
    await worker.stop()


async def test_a_swap_under_load_answers_everything_and_never_goes_back(
        client: FleetClient, redis: Redis, pointers: str, worker_settings: WorkerSettings, backend: Backend,
        int8_id: str) -> None:
    fp32_id = backend.manifest.id
    await redis.hset(pointers, mapping={"stable": fp32_id})
    worker, task = await serving_worker(served_settings(worker_settings), backend)
    try:
        requests = [client.build_request(MODEL, f"swap under load {i}", timeout=120, reply=ReplyTo())
                    for i in range(2000)]
        sending = asyncio.create_task(send_in_order(client, requests))
        await until(lambda: sending.done() or worker.processed >= 400)
        await redis.hset(pointers, mapping={"stable": int8_id})
        await sending
        results = await results_of(client, requests)
    finally:
        await stop(worker, task)
    assert all(r.status is Status.ok for r in results), {r.error for r in results if r.error}
    versions = [r.version for r in results]
    assert set(versions) == {fp32_id, int8_id}
    first_new = versions.index(int8_id)
    assert all(v == int8_id for v in versions[first_new:]), "a request after the switch was computed by the old version"
    print(f"\nswap under load: {first_new} answered by {fp32_id}, {len(versions) - first_new} by {int8_id}")
    assert worker.models.loads == 1
    assert fp32_id in worker.models.resident, "the replaced version must stay resident for an instant rollback"


async def test_rollback_is_a_pointer_switch_without_a_load(
        client: FleetClient, redis: Redis, pointers: str, worker_settings: WorkerSettings, backend: Backend,
        int8_id: str) -> None:
    fp32_id = backend.manifest.id
    await redis.hset(pointers, mapping={"stable": int8_id})
    worker, task = await serving_worker(served_settings(worker_settings), backend)
    try:
        assert worker.backend.manifest.id == int8_id
        loads = worker.models.loads
        background = [client.build_request(MODEL, f"rollback load {i}", timeout=60, reply=ReplyTo()) for i in range(300)]
        sending = asyncio.create_task(send_in_order(client, background))
        switched = time.perf_counter()
        await redis.hset(pointers, mapping={"stable": fp32_id})
        await until(lambda: worker.backend.manifest.id == fp32_id, timeout_s=5)
        switch_s = time.perf_counter() - switched
        after = await client.infer(MODEL, "the first request after a rollback", timeout=30)
        await sending
        await results_of(client, background)
    finally:
        await stop(worker, task)
    print(f"\nrollback took effect {switch_s * 1000:.0f} ms after the pointer changed")
    assert after.version == fp32_id and after.status is Status.ok
    assert worker.models.loads == loads, "a rollback must not load anything"
    assert switch_s < 1.0


async def test_canary_routes_by_request_id_and_honours_pins(
        client: FleetClient, redis: Redis, pointers: str, worker_settings: WorkerSettings, backend: Backend,
        int8_id: str) -> None:
    fp32_id = backend.manifest.id
    await redis.hset(pointers, mapping={"stable": fp32_id, "candidate": int8_id, "percent": "20"})
    worker, task = await serving_worker(served_settings(worker_settings), backend)
    try:
        requests = [client.build_request(MODEL, f"canary {i}", timeout=60, reply=ReplyTo()) for i in range(300)]
        pinned = client.build_request(MODEL, "pinned to stable", timeout=60, reply=ReplyTo(),
                                      options=RequestOptions(version=fp32_id))
        await send_in_order(client, [*requests, pinned])
        results = await results_of(client, [*requests, pinned])
    finally:
        await stop(worker, task)
    for request, result in zip(requests, results[:-1], strict=True):
        expected = int8_id if version_for(request.id, 20) == "candidate" else fp32_id
        assert result.version == expected
    share = sum(r.version == int8_id for r in results[:-1]) / len(requests)
    assert 0.1 < share < 0.3
    assert results[-1].version == fp32_id
