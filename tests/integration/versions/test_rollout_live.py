"""Staged rollouts driven by the controller against a real serving worker and live traffic."""

import asyncio
import gc
from collections.abc import AsyncIterator, Iterator

import pytest
from redis.asyncio import Redis

from gateway.client import FleetClient
from schemas.names import shadow_stats_key, version_stats_key, versions_key
from schemas.wire import ReplyTo
from tests.integration.conftest import MODEL
from tests.integration.versions.test_versions import send_in_order
from models.backends.base import Backend
from workers.worker import Worker
from models.registry import ModelRegistry
from workers.settings import WorkerSettings
from versions.pointers import VersionPointers
from versions.rollout import RolloutController
from versions.rollout_gates import RolloutPlan

# Short stages for a test; production defaults are minutes (RolloutPlan()).
# The p99 gate has its own tests (test_rollout_gates). Here it judges end-to-end latency on a busy
# machine: 100 requests a stage make p99 the second slowest, and 4x leaves room for CI's jitter.
PLAN = RolloutPlan(stages=(10, 50, 100), min_stage_s=1.0, shadow_min_s=0.0, shadow_min_compared=0,
                   min_stage_requests=100, max_p99_ratio=4.0)


@pytest.fixture(autouse=True)
def settled_heap() -> Iterator[None]:
    """Freeze the test process's heap, as `fleet-worker` does after start-up (common.heap): late in
    the suite this process holds a thousand tests' objects. A full collection stalls every request in
    flight (54 ms with this module's objects alone), and the p99 gate rightly reads a stall as a slow
    candidate: CI once rolled a clean one back for a 300 ms p99 at stage 100%."""
    gc.collect()
    gc.freeze()
    yield
    gc.unfreeze()


@pytest.fixture
async def versions(redis: Redis, backend: Backend) -> AsyncIterator[tuple[str, str]]:
    stable = backend.manifest.id
    candidate = ModelRegistry(WorkerSettings().registry_dir).resolve(MODEL, precision="int8").id
    keys = [versions_key(MODEL), shadow_stats_key(MODEL, candidate)]
    await redis.delete(*keys)
    await VersionPointers(redis, MODEL).set_stable(stable, "test@ci", "baseline for a rollout test")
    yield stable, candidate
    await redis.delete(*keys, version_stats_key(MODEL, stable), version_stats_key(MODEL, candidate))


async def steady_traffic(client: FleetClient, stop: asyncio.Event) -> int:
    sent = 0
    while not stop.is_set():
        batch = [client.build_request(MODEL, f"rollout traffic {sent + i}", timeout=30, reply=ReplyTo())
                 for i in range(20)]
        await send_in_order(client, batch)
        sent += len(batch)
        await asyncio.sleep(0.05)
    return sent


async def roll_out(client: FleetClient, redis: Redis, settings: WorkerSettings, backend: Backend,
                   candidate: str) -> tuple[str, str, str]:
    controller = RolloutController(redis, MODEL, PLAN, actor="test@ci")
    stop = asyncio.Event()
    async with Worker(settings, backend=backend) as worker:
        serving = asyncio.create_task(worker.run())
        traffic = asyncio.create_task(steady_traffic(client, stop))
        try:
            await controller.start(candidate, "test@ci")
            outcome = await asyncio.wait_for(controller.run(poll_s=0.1), 90)
        finally:
            # Each step bounded, so a stuck one fails here by name rather than at the suite's timeout.
            stop.set()
            await asyncio.wait_for(traffic, 30)
            worker.request_stop()
            await asyncio.wait_for(serving, 60)
    state = await controller.pointers.get()
    return outcome.result, outcome.reason, state.stable


async def test_a_candidate_that_breaches_the_error_gate_is_rolled_back_by_itself(
        client: FleetClient, redis: Redis, worker_settings: WorkerSettings, backend: Backend,
        versions: tuple[str, str]) -> None:
    stable, candidate = versions
    faulty = worker_settings.model_copy(update={"pointer_poll_s": 0.05, "fault_injection": True, "allow_fault_injection": True,
                                                "fault_inference_error_rate": 0.5, "fault_versions": [candidate]})
    result, reason, now_stable = await roll_out(client, redis, faulty, backend, candidate)
    print(f"\nrollout of a faulty candidate: {result}: {reason}")
    assert result == "rolled_back"
    assert reason.startswith("error_rate gate") and "at stage 10%" in reason
    assert now_stable == stable


async def test_a_clean_candidate_reaches_100_percent_and_becomes_stable(
        client: FleetClient, redis: Redis, worker_settings: WorkerSettings, backend: Backend,
        versions: tuple[str, str]) -> None:
    stable, candidate = versions
    settings = worker_settings.model_copy(update={"pointer_poll_s": 0.05})
    result, reason, now_stable = await roll_out(client, redis, settings, backend, candidate)
    print(f"\nrollout of a clean candidate: {result}: {reason}")
    assert result == "promoted", reason
    assert now_stable == candidate
    assert (await VersionPointers(redis, MODEL).get()).previous == stable
