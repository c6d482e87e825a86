"""The operator commands against the real stack: consistency, scale under load, lag."""

import asyncio
import math
import time
from collections import Counter
from pathlib import Path

import pytest

from fleet.commands import consistency
from fleet.commands.consistency import ConsistencySettings, check_consistency, format_report
from fleet.commands.lag import collect_lag, lag_table
from fleet.commands.scale import LocalWorkers, ScaleRefused, ScaleSettings, scale
from common.topics import ensure_topics, partitions_of
from gateway.client import FleetClient
from schemas.names import requests_topic
from schemas.wire import ReplyTo, Request, Result, Status, new_request_id
from tests.integration.conftest import MODEL, end_offsets, read_from
from models.backends.base import Backend
from workers.worker import Worker
from models.registry import ModelRegistry
from workers.settings import WorkerSettings

CONSISTENCY_SAMPLE = 60
SCALE_PUBLISH_PER_S = 80  # below what one worker serves on two cores, so the backlog stays small
LAG_BURST = 200
# Like tests/integration/conftest.start_worker: fast failover, short batching waits.
WORKER_ENV = {"FLEET_SESSION_TIMEOUT_MS": "6000", "FLEET_MAX_QUEUE_DELAY_MS": "10"}


async def drain(settings: WorkerSettings, backend: Backend) -> int:
    """Serve the model's backlog with an in-process burst worker; returns how many records it took."""
    async with Worker(settings, backend=backend) as worker:
        return await worker.run(burst=True)


async def publish_all(client: FleetClient, requests: list[Request]) -> None:
    for request in requests:
        await client.publish(request)


async def test_consistency_agrees_with_the_serving_version_and_not_with_int8(
        client: FleetClient, worker_settings: WorkerSettings, backend: Backend) -> None:
    requests = [client.build_request(MODEL, f"consistency probe {i}: where is order {i * 37}, it was due on day {i % 28}?",
                                     timeout=300, reply=ReplyTo()) for i in range(CONSISTENCY_SAMPLE)]
    await publish_all(client, requests)
    await drain(worker_settings, backend)
    served = {r.version for r in [await client.result(req.id) for req in requests] if r is not None}
    assert served == {backend.manifest.id}

    settings = ConsistencySettings()
    live = await check_consistency(settings, MODEL, sample_size=CONSISTENCY_SAMPLE)
    print(f"\nlive version ({backend.manifest.id}):\n{format_report(live)}")
    assert live.compared == CONSISTENCY_SAMPLE and not live.skipped
    assert live.agreement is not None and live.agreement >= 0.99
    assert live.exit_code == 0

    int8 = ModelRegistry(settings.registry_dir).resolve(MODEL, precision="int8").id
    assert int8 != backend.manifest.id
    other = await check_consistency(settings, MODEL, sample_size=CONSISTENCY_SAMPLE, version=int8)
    print(f"\nother version ({int8}):\n{format_report(other)}")
    assert other.agreement is not None and other.agreement < 0.99
    # The command line says the same through its exit status (main runs its own event loop).
    assert await asyncio.to_thread(consistency.main, [MODEL, "--sample", str(CONSISTENCY_SAMPLE), "--version", int8]) == 1


async def publish_paced_until(client: FleetClient, results_topic: str, stop: asyncio.Event,
                              produced: list[Request]) -> None:
    started = time.monotonic()
    while not stop.is_set():
        n = len(produced)
        request = client.build_request(MODEL, f"scale item {n} about invoice {n * 11}", timeout=300,
                                       reply=ReplyTo(topic=results_topic))
        await client.publish(request)
        produced.append(request)
        ahead = (n + 1) / SCALE_PUBLISH_PER_S - (time.monotonic() - started)
        if ahead > 0:
            await asyncio.sleep(ahead)


async def test_scaling_one_two_one_under_load_loses_no_request(client: FleetClient, tmp_path: Path) -> None:
    base = ScaleSettings()
    # Workers of this test live under tmp_path; the model registry stays the shared one.
    settings = base.model_copy(update={"home": tmp_path, "model_dir": base.registry_dir.resolve()})
    kafka = settings
    results_topic = f"fleet.results.test-{new_request_id()[:12]}"
    await ensure_topics(kafka, [results_topic], 4)
    start = await end_offsets(kafka, results_topic)
    local = LocalWorkers(settings, MODEL)
    produced: list[Request] = []
    stop_publishing = asyncio.Event()
    try:
        partitions = len(await partitions_of(kafka, requests_topic(MODEL)))
        with pytest.raises(ScaleRefused, match="partitions"):
            await scale(settings, MODEL, partitions + 1)
        await scale(settings, MODEL, 1, extra_env=WORKER_ENV)
        publishing = asyncio.create_task(publish_paced_until(client, results_topic, stop_publishing, produced))
        await read_from(kafka, start, until=lambda v: len(v) >= 100, timeout_s=60)
        await scale(settings, MODEL, 2, extra_env=WORKER_ENV)
        assert [(w.worker_id, w.alive) for w in local.status()] == [(f"{MODEL}-w1", True), (f"{MODEL}-w2", True)]
        assert (await scale(settings, MODEL, 2)).changes_nothing, "scaling to the current count is a no-op"
        # Let the second worker take partitions and serve under load before it leaves again.
        await read_from(kafka, start, until=lambda v: sum(Result.decode(x).worker == f"{MODEL}-w2"
                                                                for x in v) >= 50, timeout_s=90)
        await scale(settings, MODEL, 1)
        await asyncio.sleep(2)  # requests keep arriving after the scale-down, for the remaining worker
        stop_publishing.set()
        await publishing
        expected = {r.id for r in produced}

        def all_answered(values: list[bytes]) -> bool:
            return len(values) >= len(expected) and expected <= {Result.decode(v).id for v in values}

        results = [Result.decode(v) for v in await read_from(kafka, start, until=all_answered, timeout_s=180)]
    finally:
        stop_publishing.set()
        await scale(settings, MODEL, 0)
    counts = Counter(r.id for r in results)
    missing = expected - set(counts)
    duplicates = sum(n - 1 for n in counts.values() if n > 1)
    by_worker = Counter(r.worker for r in results)
    print(f"\nscale 1 -> 2 -> 1 under load: produced {len(expected)}, results {len(results)}, distinct {len(counts)}, "
          f"duplicates {duplicates}, missing {len(missing)}, by worker {dict(by_worker)}")
    assert not missing, f"{len(missing)} requests lost"
    assert by_worker[f"{MODEL}-w2"] > 0 and by_worker[f"{MODEL}-w1"] > 0
    assert all(r.status is Status.ok for r in results)
    assert not local.running(), "scaling to 0 stops every local worker"


async def test_lag_drops_to_zero_once_a_burst_worker_drains(client: FleetClient, worker_settings: WorkerSettings,
                                                             backend: Backend) -> None:
    kafka = client.settings
    await drain(worker_settings, backend)  # start from a caught-up group with committed offsets
    await publish_all(client, [client.build_request(MODEL, f"lag probe {i}", timeout=300, reply=ReplyTo())
                               for i in range(LAG_BURST)])

    [behind] = await collect_lag(kafka, [MODEL], interval_s=0.5)
    print(f"\nbefore draining:\n{lag_table([behind])}")
    assert behind.group == MODEL and behind.lag == LAG_BURST
    assert behind.rate_per_s == 0 and math.isinf(behind.drain_s), "nobody consumes: stalled"

    draining = asyncio.create_task(drain(worker_settings, backend))
    during = await collect_lag(kafka, [MODEL], interval_s=1.0)
    print(f"while a burst worker drains:\n{lag_table(during)}")
    assert await draining >= LAG_BURST

    every = await collect_lag(kafka, None, interval_s=0.5)
    print(f"after draining (every fleet group):\n{lag_table(every)}")
    [after] = [group for group in every if group.group == MODEL]
    assert after.lag == 0 and after.drain_s == 0
    assert all(p.committed == p.end for p in after.partitions if p.committed is not None)
