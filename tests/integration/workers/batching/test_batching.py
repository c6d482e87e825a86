import asyncio
import statistics

from gateway.client import FleetClient
from schemas.names import requests_topic
from schemas.wire import ReplyTo, Status, now_ms
from tests.integration.conftest import MODEL
from models.backends.base import Backend
from workers.worker import Worker
from workers.settings import WorkerSettings


async def test_a_backlog_is_served_in_nearly_full_batches(client: FleetClient, worker_settings: WorkerSettings,
                                                          backend: Backend) -> None:
    settings = worker_settings.model_copy(update={"max_batch_size": 32, "max_queue_delay_ms": 20})
    async with Worker(settings, backend=backend) as worker:
        await worker.run(burst=True)  # start from an empty backlog
        requests = [client.build_request(MODEL, f"backlog question {i} about invoice {i % 17}", timeout=300,
                                         reply=ReplyTo()) for i in range(2000)]
        futures = [await client.producer.send(requests_topic(MODEL), r.encode(), key=r.id.encode()) for r in requests]
        await asyncio.gather(*futures)
        await worker.run(burst=True)
    results = [await client.result(r.id) for r in requests]
    assert all(r is not None and r.status is Status.ok for r in results)
    sizes = [r.batch_size for r in results if r is not None]
    # Each result reports the size of the batch it was in; weight per batch, not per request.
    batches = sum(1 / s for s in sizes)
    mean_batch = len(sizes) / batches
    print(f"\n2000 under backlog: {batches:.0f} batches, mean batch {mean_batch:.1f} of max 32")
    assert mean_batch >= 0.8 * 32


async def test_one_at_a_time_goes_alone_and_never_waits_past_max_delay(client: FleetClient, serve,  # type: ignore[no-untyped-def]
                                                                       worker_settings: WorkerSettings) -> None:
    settings = worker_settings.model_copy(update={"max_batch_size": 32, "max_queue_delay_ms": 20})
    results = []
    async with serve(settings):
        await client.infer(MODEL, "warm the path up", timeout=30)
        for i in range(40):
            results.append(await client.infer(MODEL, f"a lone question {i}", timeout=30))
            await asyncio.sleep(0.01)
    sizes = [r.batch_size for r in results]
    queue = [r.timings["queue_ms"] for r in results]
    print(f"\none at a time: median batch {statistics.median(sizes)}, max queue wait {max(queue):.1f} ms")
    assert statistics.median(sizes) == 1
    assert max(queue) <= settings.max_queue_delay_ms + 20


async def test_expired_requests_never_reach_the_model(client: FleetClient, producer,  # type: ignore[no-untyped-def]
                                                      worker_settings: WorkerSettings, backend: Backend) -> None:
    async with Worker(worker_settings, backend=backend) as worker:
        await worker.run(burst=True)
        computed_before = worker.computed
        stale = [client.build_request(MODEL, f"stale {i}", timeout=30, reply=ReplyTo()) for i in range(5)]
        stale = [r.model_copy(update={"deadline_ms": now_ms() - 1}) for r in stale]
        fresh = client.build_request(MODEL, "fresh", timeout=30, reply=ReplyTo())
        for request in [*stale, fresh]:
            await producer.send_and_wait(requests_topic(MODEL), request.encode(), key=request.id.encode())
        await worker.run(burst=True)
        assert worker.computed - computed_before == 1, "only the fresh request may be computed"
        assert worker.expired >= 5
        labels = {"model": MODEL, "version": backend.manifest.id, "role": "primary", "device": "cpu"}
        exported = worker.metrics.registry.get_sample_value("fleet_expired_total", labels)
    assert exported is not None and exported >= 5
    for request in stale:
        result = await client.result(request.id)
        assert result is not None and result.status is Status.expired and result.batch_size == 0
