"""Exactly-once lanes against the stack's Kafka: results and offsets in one transaction per partition,
a fenced zombie, and a worker that rejoins after being fenced (workers/delivery/transactions.py)."""

import asyncio
import secrets
import time
from collections.abc import AsyncIterator

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from prometheus_client import CollectorRegistry, Gauge

from common.clients import new_consumer, new_producer
from common.settings import FleetSettings
from common.topics import ensure_topics, partitions_of
from gateway.client import FleetClient
from models.backends.base import Backend
from schemas.names import consumer_group
from schemas.wire import Result
from tests.integration.conftest import MODEL, serving
from workers.delivery.patience import Patience
from workers.delivery.transactions import PartitionChunk, PartitionTransactions
from workers.settings import WorkerSettings
from workers.worker import Worker


async def read_results(settings: FleetSettings, topic: str, *, expect: int, committed_only: bool = True,
                       timeout_s: float = 60) -> list[str]:
    """Request ids of every result on `topic`, read from the start until `expect` came (or time ran out)."""
    consumer = new_consumer(settings, enable_auto_commit=False, auto_offset_reset="earliest",
                            isolation_level="read_committed" if committed_only else "read_uncommitted")
    await consumer.start()
    ids: list[str] = []
    try:
        consumer.assign(await partitions_of(settings, topic))
        give_up = time.monotonic() + timeout_s
        while len(ids) < expect and time.monotonic() < give_up:
            for records in (await consumer.getmany(timeout_ms=300)).values():
                ids += [Result.decode(record.value).id for record in records if record.value is not None]
        for records in (await consumer.getmany(timeout_ms=1000)).values():  # anything past `expect` is a duplicate
            ids += [Result.decode(record.value).id for record in records if record.value is not None]
    finally:
        await consumer.stop()
    return ids


@pytest.fixture
async def group_member(stack: FleetSettings) -> AsyncIterator[AIOKafkaConsumer]:
    """A consumer of a fresh group that only reads the group's committed offsets."""
    consumer = new_consumer(stack, group_id=f"eo-test-{secrets.token_hex(4)}", enable_auto_commit=False)
    await consumer.start()
    yield consumer
    await consumer.stop()


def transactions(stack: FleetSettings, consumer: AIOKafkaConsumer, topic: str) -> PartitionTransactions:
    waiting = Gauge("waiting", "delivery waits", ["dependency"], registry=CollectorRegistry())
    assert consumer._group_id is not None
    return PartitionTransactions(consumer._group_id, frozenset({topic}), consumer=lambda: consumer,
                                 patience=Patience(waiting, max_backoff_s=0.5),
                                 make_producer=lambda tid: new_producer(stack, linger_ms=1, transactional_id=tid))


def result_id(offset: int) -> str:
    return f"{offset:032x}"


def chunk(tp: TopicPartition, results_topic: str, offsets: range) -> PartitionChunk:
    sends = [(offset, (results_topic, Result(id=result_id(offset), status="ok", model=MODEL).encode(), None))
             for offset in offsets]
    return PartitionChunk(tp, offsets[-1] + 1, sends, first_offset=offsets[0])


async def test_a_fenced_zombie_commits_nothing_and_what_it_committed_first_is_not_answered_again(
        stack: FleetSettings, group_member: AIOKafkaConsumer) -> None:
    name = secrets.token_hex(4)
    source, results = f"fleet.test.eo-in-{name}", f"fleet.results.eo-{name}"
    await ensure_topics(stack, [source, results], 1)
    tp = TopicPartition(source, 0)
    group_member.assign([tp])  # both "own" it: the zombie has not heard of the rebalance yet
    zombie, successor = transactions(stack, group_member, source), transactions(stack, group_member, source)
    try:
        assert await zombie.commit(chunk(tp, results, range(0, 10)))
        # The successor read the partition from offset 0 before the zombie's commit, and answered the same records:
        # starting its producer fences the zombie, and the offset read after the fence says they were answered.
        assert not await successor.commit(chunk(tp, results, range(0, 10)))
        # The zombie is fenced, waits before trying again (it still lists the partition), and hears meanwhile
        # from its rebalance listener that the partition is gone: it drops the batch, fencing nobody.
        asyncio.get_running_loop().call_later(0.2, zombie.revoked, {tp})
        assert not await zombie.commit(chunk(tp, results, range(10, 20)))
        assert await successor.commit(chunk(tp, results, range(5, 20)))  # 5-9 are skipped, 10-19 produced
    finally:
        await asyncio.gather(zombie.release(), successor.release())
    ids = await read_results(stack, results, expect=20)
    assert sorted(ids) == [result_id(i) for i in range(20)]
    assert (await group_member.committed(tp)) == 20
    # The zombie's last transaction was aborted: a read_uncommitted reader may see it, a read_committed one never.
    assert len(await read_results(stack, results, expect=20, committed_only=False)) >= 20


async def test_a_batch_past_a_gap_is_not_committed_and_the_partition_is_read_again_from_the_committed_offset(
        stack: FleetSettings, group_member: AIOKafkaConsumer) -> None:
    name = secrets.token_hex(4)
    source, results = f"fleet.test.eo-in-{name}", f"fleet.results.eo-{name}"
    await ensure_topics(stack, [source, results], 1)
    tp = TopicPartition(source, 0)
    group_member.assign([tp])
    worker = transactions(stack, group_member, source)
    try:
        assert await worker.commit(chunk(tp, results, range(0, 10)))
        # Records 10-19 were skipped while the partition was away; a batch of 20-29 read before that must
        # not commit past them.
        assert not await worker.commit(chunk(tp, results, range(20, 30)))
        assert await group_member.position(tp) == 10
        assert await worker.commit(chunk(tp, results, range(10, 30)))
    finally:
        await worker.release()
    assert sorted(await read_results(stack, results, expect=30)) == [result_id(i) for i in range(30)]
    assert (await group_member.committed(tp)) == 30


async def test_an_exactly_once_lane_delivers_each_result_once_and_commits_its_offsets_with_them(
        client: FleetClient, worker_settings: WorkerSettings, backend: Backend) -> None:
    results = f"fleet.results.eo-{secrets.token_hex(4)}"
    settings = worker_settings.model_copy(update={"exactly_once": "bulk"})
    ids = [await client.submit(MODEL, f"exactly once {i}", results_topic=results) for i in range(40)]  # priority 0: bulk
    async with Worker(settings, backend=backend) as worker:
        await worker.run(burst=True)
        committed = worker.metrics.transactions.labels(model=MODEL, outcome="committed")._value.get()
    assert committed >= 1
    assert sorted(await read_results(worker_settings, results, expect=40)) == sorted(ids)
    bulk = settings.lane_plan.topics(MODEL)[-1]
    member = new_consumer(worker_settings, group_id=consumer_group(MODEL), enable_auto_commit=False)
    await member.start()
    try:
        partitions = await partitions_of(worker_settings, bulk)
        ends = await member.end_offsets(partitions)
        assert {tp: await member.committed(tp) for tp in partitions} == {tp: ends[tp] or None for tp in partitions}
    finally:
        await member.stop()


async def test_a_fenced_worker_rejoins_its_group_and_answers_every_request_once(
        client: FleetClient, worker_settings: WorkerSettings, backend: Backend) -> None:
    results = f"fleet.results.eo-{secrets.token_hex(4)}"
    await ensure_topics(worker_settings, [results], worker_settings.partitions)  # read before the first result
    settings = worker_settings.model_copy(update={"exactly_once": "bulk"})
    async with serving(settings, backend) as worker:
        first = [await client.submit(MODEL, f"before the fence {i}", results_topic=results) for i in range(10)]
        assert sorted(await read_results(worker_settings, results, expect=10)) == sorted(first)
        # Another producer takes every bulk partition's transactional id, as a new owner would.
        bulk = settings.lane_plan.topics(MODEL)[-1]
        for tp in await partitions_of(worker_settings, bulk):
            usurper = new_producer(worker_settings, linger_ms=1,
                                   transactional_id=worker.parts.transactions.transactional_id(tp))
            await usurper.start()
            await usurper.begin_transaction()
            await usurper.abort_transaction()
            await usurper.stop()
        then = [await client.submit(MODEL, f"after the fence {i}", results_topic=results) for i in range(20)]
        ids = await read_results(worker_settings, results, expect=30, timeout_s=90)
        fenced = worker.metrics.transactions.labels(model=MODEL, outcome="fenced")._value.get()
    assert sorted(ids) == sorted(first + then)
    assert fenced >= 1
