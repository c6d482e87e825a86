"""The collector against a consumer that answers like aiokafka's: what it hands over, and when."""

import asyncio
import time
from typing import Any

from aiokafka import ConsumerRecord, TopicPartition

from workers.batching.collector import BatchCollector, FetchedBatch
from workers.batching.policy import BatchPolicy
from workers.settings import BatchPolicyName

PARTITION = TopicPartition("fleet.requests.m", 0)


def records(count: int) -> list[ConsumerRecord[bytes, bytes]]:
    now = int(time.time() * 1000)
    return [ConsumerRecord(PARTITION.topic, 0, offset, now, 0, None, b"r", None, 0, 1, []) for offset in range(count)]


class Consumer:
    """getmany hands over what `arrivals` holds, and refuses max_records < 1 as aiokafka does."""

    def __init__(self, *arrivals: int) -> None:
        self.arrivals = list(arrivals)
        self.asked: list[int] = []

    def assignment(self) -> set[TopicPartition]:
        return set()

    async def getmany(self, *, timeout_ms: int, max_records: int) -> dict[TopicPartition, Any]:
        if max_records < 1:
            raise ValueError("`max_records` must be a positive Integer")
        self.asked.append(max_records)
        count = min(self.arrivals.pop(0), max_records) if self.arrivals else 0
        return {PARTITION: records(count)} if count else {}


async def test_a_cap_cut_while_waiting_for_the_model_hands_over_what_is_in_hand() -> None:
    policy = BatchPolicy(32, 1000, BatchPolicyName.adaptive)
    model_has_room = asyncio.Event()  # the model is busy
    consumer = Consumer(20)
    collector = BatchCollector(consumer, policy, model_has_room=model_has_room)  # type: ignore[arg-type]
    collecting = asyncio.ensure_future(collector.next_batch())
    await asyncio.sleep(0.05)
    assert not collecting.done()  # 20 in hand, waiting for the model to take a bigger batch
    policy.resize(16)  # an out-of-memory back-off, while the collector waits
    model_has_room.set()
    batch = await asyncio.wait_for(collecting, 5)
    assert len(batch.records) == 20 and consumer.asked == [32]


async def test_the_batch_takes_no_more_than_the_cap() -> None:
    consumer = Consumer(10, 10, 10, 10)
    collector = BatchCollector(consumer, BatchPolicy(25, 1000, BatchPolicyName.fixed))  # type: ignore[arg-type]
    batch = await asyncio.wait_for(collector.next_batch(), 5)
    assert len(batch.records) == 25 and consumer.asked == [25, 15, 5]


def test_a_fetched_batch_keeps_its_size_and_oldest_record_as_records_arrive() -> None:
    def record(offset: int, timestamp: int, value: bytes | None) -> ConsumerRecord[bytes, bytes]:
        return ConsumerRecord(PARTITION.topic, 0, offset, timestamp, 0, None, value, None, 0, 1, [])

    batch = FetchedBatch()
    batch.add([], 1.0)
    assert batch.oldest_ms is None and batch.size_bytes == 0
    batch.add([record(0, 500, b"abc"), record(1, 300, None)], 10.0)
    batch.add([record(2, 400, b"de")], 20.0)
    assert batch.size_bytes == 5 and batch.oldest_ms == 300
    assert [r.offset for r in batch.records] == [0, 1, 2] and batch.fetched_ms == [10.0, 10.0, 20.0]


class TwoLaneConsumer:
    """Bulk records are plenty; interactive ones arrive while a full bulk batch waits for the model."""

    def __init__(self) -> None:
        self.interactive_waiting = 0
        self.asked: list[tuple[tuple[TopicPartition, ...], int]] = []

    def assignment(self) -> set[TopicPartition]:
        return {PARTITION, TOP}

    def highwater(self, tp: TopicPartition) -> int | None:
        return None

    async def getmany(self, *partitions: TopicPartition, timeout_ms: int, max_records: int) -> dict[TopicPartition, Any]:
        self.asked.append((partitions, max_records))
        if partitions == (TOP,):
            count = min(self.interactive_waiting, max_records)
            self.interactive_waiting -= count
            return {TOP: [ConsumerRecord(TOP.topic, 0, n, int(time.time() * 1000), 0, None, b"i", None, 0, 1, [])
                          for n in range(count)]} if count else {}
        return {PARTITION: records(max_records)}


TOP = TopicPartition("fleet.requests.m-top", 0)


async def test_a_full_bulk_batch_waits_for_the_model_and_takes_the_interactive_records_that_came_meanwhile() -> None:
    policy = BatchPolicy(32, 1000, BatchPolicyName.adaptive)
    model_has_room = asyncio.Event()  # the model is busy with the batches before
    consumer = TwoLaneConsumer()
    collector = BatchCollector(consumer, policy, model_has_room=model_has_room)  # type: ignore[arg-type]
    collecting = asyncio.ensure_future(collector.next_batch(limit=10, top_up=[TOP]))
    await asyncio.sleep(0.05)
    assert not collecting.done()  # full at its limit of 10, but nothing more may queue ahead of the model
    consumer.interactive_waiting = 3
    model_has_room.set()
    batch = await asyncio.wait_for(collecting, 5)
    assert [r.value for r in batch.records] == [b"r"] * 10 + [b"i"] * 3
    assert consumer.asked[-1] == ((TOP,), 22)  # topped up to the policy's cap, from the higher lane only
