"""Producing a delivery's results as record batches: one per partition, not one send per record.

`AIOKafkaProducer.send` costs a coroutine, a size estimate, a pure-Python murmur2, a future and
a message append per record, which was the largest single cost of delivering a computed result.
Here each record is appended to its partition's `BatchBuilder` and each batch is handed over with
`send_batch`: one future per batch. Records go to the partition the producer's default
partitioner would pick for their key (common/partitioning.py computes it for all keys at once)
and keep their order within it, so where a result lands and in which order is what per-record
sends gave.

Records over `ALONE_BYTES` go through `one_by_one` from the start: `send` refuses a record over the
producer's request size before it reaches the broker, which a batch would not. That matters beyond
the one record: once the broker has refused a record of an idempotent producer's partition, aiokafka
does not rewind the partition's sequence numbers, and every later record there fails with
OutOfOrderSequenceNumber. A batch the broker refuses for good all the same (a topic it will not
take) is sent again record by record through `one_by_one`, so only the records it refuses fail; an
outage fails the batch's records with the outage, for the caller to wait out and retry.
"""

import asyncio
import contextlib
import random
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager

from aiokafka import AIOKafkaProducer
from aiokafka.errors import UnknownTopicOrPartitionError

from common.partitioning import default_partitions
from workers.delivery.patience import is_outage

Send = tuple[str, bytes, bytes | None]  # topic, value, key
Errors = list[BaseException | None]
Handed = list[tuple["asyncio.Future[object]", list[int]]]

ALONE_BYTES = 256 * 1024  # a record this large is rare, and costs its send far less than its size


async def produce_batched(producer: AIOKafkaProducer, sends: Sequence[Send],
                          one_by_one: Callable[[list[Send]], Awaitable[Errors]],
                          turn: AbstractAsyncContextManager[None] | None = None) -> Errors:
    """Each send's error, or None once the broker acknowledged it; returns when every batch is settled.
    Records are handed to the producer inside `turn` (workers/delivery/turns.py), so overlapping
    deliveries' records keep the order the deliveries began; acknowledgements are awaited outside it."""
    async with turn or contextlib.nullcontext():
        errors, alone, batches = await _hand_over_all(producer, sends)
    if batches:
        await asyncio.wait([ack for ack, _ in batches])
    refused = alone
    for ack, members in batches:
        exc = asyncio.CancelledError("the producer dropped the batch") if ack.cancelled() else ack.exception()
        if exc is None:
            continue
        if is_outage(exc):
            for index in members:
                errors[index] = exc
        else:
            refused += members
    if refused:
        refused.sort()
        for index, exc in zip(refused, await one_by_one([sends[i] for i in refused]), strict=True):
            errors[index] = exc
    return errors


async def send_alone(producer: AIOKafkaProducer, sends: Sequence[Send]) -> Errors:
    """Each send in a batch of its own, acknowledged before the next: after a refused batch, the
    verdict on every record alone (the producer would gather concurrent sends into one batch)."""
    errors: Errors = []
    for topic, value, key in sends:
        try:
            await (await producer.send(topic, value, key=key))
            errors.append(None)
        except Exception as exc:
            errors.append(exc)
    return errors


async def _hand_over_all(producer: AIOKafkaProducer, sends: Sequence[Send]) -> tuple[Errors, list[int], Handed]:
    """Every send that may go batched, handed to the producer: the errors so far, the sends to
    send alone, and each batch's acknowledgement with the sends it holds."""
    errors: Errors = [None] * len(sends)
    alone: list[int] = []
    by_topic: dict[str, list[int]] = {}
    for index, (topic, value, key) in enumerate(sends):
        if len(value) + len(key or b"") > ALONE_BYTES:
            alone.append(index)
        else:
            by_topic.setdefault(topic, []).append(index)
    by_partition: dict[tuple[str, int], list[int]] = {}
    for topic, members in by_topic.items():
        try:
            partitions = sorted(await producer.partitions_for(topic))
        except Exception as exc:  # no metadata: every record of the topic fails alike
            for index in members:
                errors[index] = exc
            continue
        if not partitions:
            for index in members:
                errors[index] = UnknownTopicOrPartitionError(f"no partitions known for {topic}")
            continue
        for index, partition in zip(members, _partitions(sends, members, partitions), strict=True):
            by_partition.setdefault((topic, partition), []).append(index)
    batches = [batch for (topic, partition), members in by_partition.items()
               for batch in await _hand_over(producer, sends, topic, partition, members, errors)]
    return errors, alone, batches


async def _hand_over(producer: AIOKafkaProducer, sends: Sequence[Send], topic: str, partition: int,
                     members: list[int], errors: Errors) -> Handed:
    """The records of one partition as batches handed to the producer, each with the sends it holds."""
    handed: Handed = []
    batch, held = producer.create_batch(), []
    for index in members:
        _, value, key = sends[index]
        if batch.append(key=key, value=value, timestamp=None) is None:  # full: hand it over, start the next
            handed += await _send(producer, batch, topic, partition, held, errors)
            batch, held = producer.create_batch(), []
            batch.append(key=key, value=value, timestamp=None)  # an empty batch takes any one record
        held.append(index)
    if held:
        handed += await _send(producer, batch, topic, partition, held, errors)
    return handed


async def _send(producer: AIOKafkaProducer, batch: object, topic: str, partition: int, held: list[int],
                errors: Errors) -> Handed:
    try:
        ack: asyncio.Future[object] = await producer.send_batch(batch, topic, partition=partition)  # type: ignore[arg-type]
    except Exception as exc:  # the producer would not take it (closed, timed out waiting for room)
        for index in held:
            errors[index] = exc
        return []
    return [(ack, held)]


def _partitions(sends: Sequence[Send], members: list[int], partitions: list[int]) -> list[int]:
    """Where the default partitioner puts each record: by its key's murmur2, or anywhere without a key."""
    keys = [key for _, _, key in (sends[index] for index in members) if key is not None]
    keyed = iter(default_partitions(keys, partitions))
    return [next(keyed) if sends[index][2] is not None else random.choice(partitions) for index in members]
