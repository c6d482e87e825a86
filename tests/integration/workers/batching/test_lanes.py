"""Priority lanes against the real Kafka: a request's priority picks its lane's topic, workers
drain the interactive lane ahead of a bulk backlog without starving it, and partitions paused for
a lane survive a rebalance with nothing lost."""

import asyncio

from aiokafka import TopicPartition

from common.settings import FleetSettings
from gateway.client import FleetClient, RequestOptions
from schemas.wire import ReplyTo, Request, Result, Status
from tests.integration.conftest import MODEL, end_offsets
from models.backends.base import Backend
from workers.worker import Worker
from workers.settings import WorkerSettings

INTERACTIVE, BULK = FleetSettings().lane_plan.topics(MODEL)


async def produce(client: FleetClient, topic: str, requests: list[Request]) -> None:
    futures = [await client.producer.send(topic, r.encode(), key=r.id.encode()) for r in requests]
    await asyncio.gather(*futures)


async def results_of(client: FleetClient, requests: list[Request], within_s: float = 120) -> list[Result]:
    """Every request's result, read from Redis as the workers deliver them."""
    found: dict[str, Result] = {}
    give_up = asyncio.get_running_loop().time() + within_s
    while len(found) < len(requests) and asyncio.get_running_loop().time() < give_up:
        for request in requests:
            if request.id not in found and (result := await client.result(request.id)) is not None:
                found[request.id] = result
        await asyncio.sleep(0.2)
    assert len(found) == len(requests), f"{len(requests) - len(found)} of {len(requests)} requests got no result"
    return [found[r.id] for r in requests]


def added(before: dict[TopicPartition, int], after: dict[TopicPartition, int]) -> int:
    return sum(after[tp] - before.get(tp, 0) for tp in after)


async def test_priority_picks_the_lane_topic_and_both_lanes_are_served(client: FleetClient, stack: FleetSettings,
                                                                        serve) -> None:  # type: ignore[no-untyped-def]
    async with serve():
        await client.infer(MODEL, "create the topics and warm up", timeout=30)
        before = {topic: await end_offsets(stack, topic) for topic in (INTERACTIVE, BULK)}
        urgent = await client.infer(MODEL, "an interactive question", timeout=30,
                                    options=RequestOptions(priority=9))
        overnight = await client.infer(MODEL, "a bulk question", timeout=30, options=RequestOptions(priority=4))
        after = {topic: await end_offsets(stack, topic) for topic in (INTERACTIVE, BULK)}
    assert urgent.status is Status.ok and overnight.status is Status.ok
    assert added(before[INTERACTIVE], after[INTERACTIVE]) == 1 and added(before[BULK], after[BULK]) == 1


async def test_interactive_requests_overtake_a_bulk_backlog_and_bulk_keeps_its_share(
        client: FleetClient, worker_settings: WorkerSettings, backend: Backend) -> None:
    settings = worker_settings.model_copy(update={"max_batch_size": 8, "bulk_min_share": 0.1})
    async with Worker(settings, backend=backend) as worker:
        await worker.run(burst=True)  # start from empty lanes
        bulk = [client.build_request(MODEL, f"bulk record {i} of the nightly export", timeout=600, reply=ReplyTo())
                for i in range(800)]
        interactive = [client.build_request(MODEL, f"an urgent question {i}", timeout=600, reply=ReplyTo(),
                                            options=RequestOptions(priority=9)) for i in range(80)]
        await produce(client, BULK, bulk)
        await produce(client, INTERACTIVE, interactive)
        await worker.run(burst=True)
        counts = worker._lanes.counts
    finished_bulk = sorted(r.finished_ms for r in await results_of(client, bulk))
    finished_interactive = [r.finished_ms for r in await results_of(client, interactive)]
    ahead = [sum(f < i for f in finished_bulk) for i in (min(finished_interactive), max(finished_interactive))]
    print(f"\nbatches per lane {counts.batches}, share turns {counts.share_turns}; bulk records finished before "
          f"the first and the last interactive one: {ahead}")
    # 80 interactive records are 10 batches of 8: they all finish while most of the backlog still waits.
    # Not at once: while bulk records are buffered, aiokafka fetches again (and learns of the
    # interactive ones) only after its prefetch back-off of 100 ms, a few bulk batches.
    assert max(finished_interactive) <= finished_bulk[len(bulk) // 2]
    # While interactive records waited, bulk still had its turns (1 batch in 10).
    assert counts.share_turns >= 1
    assert counts.batches["bulk"] >= len(bulk) // 8


async def test_a_rebalance_mid_backlog_loses_nothing_and_leaves_no_lane_paused(
        client: FleetClient, worker_settings: WorkerSettings, backend: Backend, serve) -> None:  # type: ignore[no-untyped-def]
    settings = worker_settings.model_copy(update={"max_batch_size": 8})
    bulk = [client.build_request(MODEL, f"rebalanced bulk {i}", timeout=600, reply=ReplyTo()) for i in range(300)]
    interactive = [client.build_request(MODEL, f"rebalanced urgent {i}", timeout=600, reply=ReplyTo(),
                                        options=RequestOptions(priority=9)) for i in range(60)]
    async with serve(settings.model_copy(update={"worker_id": "lanes-first"})) as first:
        await produce(client, BULK, bulk)
        await produce(client, INTERACTIVE, interactive[:30])
        # A second worker joins mid-backlog (a rebalance) and leaves again (another).
        async with serve(settings.model_copy(update={"worker_id": "lanes-second"})) as second:
            await produce(client, INTERACTIVE, interactive[30:])
            while not second.assignment():
                await asyncio.sleep(0.1)
            await asyncio.sleep(1.0)
        results = await results_of(client, [*bulk, *interactive])
        consumer = first._require_consumer()
        for _ in range(50):  # the next collection, a few hundred ms away, decides afresh
            if not consumer.paused():
                break
            await asyncio.sleep(0.1)
        assert consumer.paused() == set(), "nothing is left paused once the lanes are empty"
    assert all(r.status is Status.ok for r in results)
