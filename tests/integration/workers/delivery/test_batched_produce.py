"""Results produced as record batches, against the stack's Kafka: placement, order, refusals."""

import asyncio
import secrets
from collections.abc import AsyncIterator

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.partitioner import DefaultPartitioner

from common.clients import new_consumer, new_producer
from common.settings import FleetSettings
from common.topics import ensure_topics, partitions_of
from workers.delivery.batched_produce import Errors, Send, produce_batched, send_alone
from workers.delivery.patience import is_permanent
from workers.delivery.turns import Turn, Turns

PARTITIONS = 4


@pytest.fixture
async def worker_like_producer(stack: FleetSettings) -> AsyncIterator[AIOKafkaProducer]:
    """Configured as a worker's: acks=all, idempotent, 512 KiB batches."""
    producer = new_producer(stack, linger_ms=1)
    await producer.start()
    yield producer
    await producer.stop()


async def read_all(settings: FleetSettings, topic: str, count: int) -> list[tuple[int, bytes | None, bytes]]:
    consumer = new_consumer(settings, enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    try:
        consumer.assign(await partitions_of(settings, topic))
        records: list[tuple[int, bytes | None, bytes]] = []
        for _ in range(100):
            for part in (await consumer.getmany(timeout_ms=200)).values():
                records += [(record.partition, record.key, record.value or b"") for record in part]
            if len(records) >= count:
                break
        return records
    finally:
        await consumer.stop()


async def test_records_land_on_their_keys_partitions_in_order(stack: FleetSettings,
                                                              worker_like_producer: AIOKafkaProducer) -> None:
    topic = f"fleet.results.batched-{secrets.token_hex(4)}"
    await ensure_topics(stack, [topic], PARTITIONS)
    sends: list[Send] = [(topic, f"value-{i}".encode(), secrets.token_hex(16).encode()) for i in range(300)]

    errors = await produce_batched(worker_like_producer, sends, lambda s: send_alone(worker_like_producer, s))

    assert errors == [None] * len(sends)
    records = await read_all(stack, topic, len(sends))
    assert sorted(value for _, _, value in records) == sorted(value for _, value, _ in sends)
    partitioner = DefaultPartitioner()
    where = {key: partition for partition, key, _ in records}
    for _, _, key in sends:  # the partition a per-record send would have picked
        assert where[key] == partitioner(key, list(range(PARTITIONS)), list(range(PARTITIONS)))
    for partition in range(PARTITIONS):
        sent_order = [value for _, value, key in sends if where[key] == partition]
        assert [value for p, _, value in records if p == partition] == sent_order


async def test_a_record_over_the_request_size_fails_alone(stack: FleetSettings,
                                                         worker_like_producer: AIOKafkaProducer) -> None:
    """A 2 MB result among small ones: refused before it reaches the broker (over the producer's
    1 MiB request size), for good; its batch-mates and the records after it are delivered."""
    topic = f"fleet.results.refusing-{secrets.token_hex(4)}"
    await ensure_topics(stack, [topic], 1)
    sends: list[Send] = [(topic, f"small-{i}".encode(), f"key-{i}".encode()) for i in range(40)]
    sends.insert(20, (topic, b"x" * 2_000_000, b"big"))

    errors = await produce_batched(worker_like_producer, sends, lambda s: send_alone(worker_like_producer, s))
    later = await produce_batched(worker_like_producer, [(topic, b"after", b"k")],
                                  lambda s: send_alone(worker_like_producer, s))

    assert [index for index, exc in enumerate(errors) if exc is not None] == [20]
    assert is_permanent(errors[20])  # type: ignore[arg-type]
    assert later == [None]
    values = [value for _, _, value in await read_all(stack, topic, 41)]
    assert values == [value for _, value, _ in sends if len(value) < 1000] + [b"after"]


async def test_a_topic_without_metadata_fails_as_an_outage_not_for_good(stack: FleetSettings) -> None:
    """No partitions known (the topic does not exist and may not be created): every record of it fails
    with an error delivery waits out, never a permanent refusal that would dead-letter it."""
    producer = new_producer(stack, linger_ms=1, request_timeout_ms=1500)
    await producer.start()
    try:
        sends: list[Send] = [(f"fleet.results.absent-{secrets.token_hex(4)}", b"v", b"k")]
        errors = await produce_batched(producer, sends, lambda s: send_alone(producer, s))
    finally:
        await producer.stop()
    assert errors[0] is not None and not is_permanent(errors[0])


async def test_overlapping_deliveries_keep_the_order_they_began_in(stack: FleetSettings,
                                                                   worker_like_producer: AIOKafkaProducer) -> None:
    """The later delivery asks to hand over first; its records still follow the earlier one's."""
    topic = f"fleet.results.turns-{secrets.token_hex(4)}"
    await ensure_topics(stack, [topic], 1)
    turns = Turns()
    earlier, later = turns.take(), turns.take()
    first: list[Send] = [(topic, f"first-{i}".encode(), f"a-{i}".encode()) for i in range(50)]
    second: list[Send] = [(topic, f"second-{i}".encode(), f"b-{i}".encode()) for i in range(50)]

    async def deliver(sends: list[Send], turn: Turn, delay_s: float) -> Errors:
        await asyncio.sleep(delay_s)
        return await produce_batched(worker_like_producer, sends, lambda s: send_alone(worker_like_producer, s),
                                     turn)

    errors = await asyncio.gather(deliver(second, later, 0.0), deliver(first, earlier, 0.05))

    assert errors == [[None] * 50, [None] * 50]
    values = [value for _, _, value in await read_all(stack, topic, 100)]
    assert values == [value for _, value, _ in first + second]
