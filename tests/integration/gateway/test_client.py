import asyncio

from redis.asyncio import Redis

from gateway.client import FleetClient
from schemas.names import DEFAULT_RESULTS_TOPIC
from schemas.wire import Status
from tests.integration.conftest import MODEL


async def test_infer_returns_an_embedding(client: FleetClient, serve) -> None:  # type: ignore[no-untyped-def]
    async with serve():
        result = await client.infer(MODEL, "track my order", timeout=30)
    assert result.status is Status.ok and result.outputs is not None
    assert len(result.outputs["embedding"]) == 384


async def test_submit_then_result(client: FleetClient, serve) -> None:  # type: ignore[no-untyped-def]
    request_id = await client.submit(MODEL, "cancel my subscription", timeout=30)
    assert await client.result(request_id) is None  # nothing serves yet
    async with serve():
        for _ in range(200):
            if (result := await client.result(request_id)) is not None:
                break
            await asyncio.sleep(0.05)
    assert result is not None and result.id == request_id and result.status is Status.ok


async def test_pipeline_of_500_through_a_results_topic(client: FleetClient, serve) -> None:  # type: ignore[no-untyped-def]
    texts = [f"pipeline item {i}: where is parcel {i * 7}?" for i in range(500)]
    async with serve():
        outcome = await client.run_pipeline(MODEL, texts, results_topic=DEFAULT_RESULTS_TOPIC, timeout=120)
    print(f"pipeline: {len(outcome.results)} results, {outcome.duplicates} duplicates, {len(outcome.missing)} missing")
    assert not outcome.missing
    assert len(outcome.results) == 500
    assert all(r.status is Status.ok for r in outcome.results.values())


async def test_two_thousand_concurrent_waits_share_few_redis_connections(client: FleetClient, serve,  # type: ignore[no-untyped-def]
                                                                         redis: Redis) -> None:
    connections_before = (await redis.info("clients"))["connected_clients"]
    peak = 0

    async def watch() -> None:
        nonlocal peak
        while True:
            peak = max(peak, client.waiter.pending)
            await asyncio.sleep(0.01)

    watcher = asyncio.create_task(watch())
    waits = [asyncio.create_task(client.infer(MODEL, f"concurrent question {i}", timeout=120)) for i in range(2000)]
    await asyncio.sleep(0.5)  # every wait is registered and published before any worker serves
    connections_during = (await redis.info("clients"))["connected_clients"]
    async with serve():
        results = await asyncio.gather(*waits)
    watcher.cancel()
    print(f"peak concurrent waits {peak}; redis clients before {connections_before}, during {connections_during}")
    assert peak >= 1900
    assert all(r.status is Status.ok for r in results)
    assert connections_during - connections_before <= 10


async def test_reply_reader_survives_a_redis_timeout_after_long_healthy_operation(stack) -> None:  # type: ignore[no-untyped-def]
    import time

    from gateway.waiter import ReplyWaiter

    redis = Redis.from_url(stack.redis_url, socket_timeout=1.5)  # longer than the reader's 1 s block
    waiter = ReplyWaiter(redis, max_backoff_s=0.5)
    waiter.start()
    try:
        await asyncio.sleep(1.5)
        time.sleep(2.0)  # a stalled event loop makes the in-flight blocking read time out
        await asyncio.sleep(1.5)
        future = waiter.expect("ab" * 16)  # raises if the reader died
        assert not future.done()
    finally:
        await waiter.stop()
        await redis.aclose()
