"""Kafka offsets of a worker's partitions: committing delivered batches, seeing a drained backlog."""

import asyncio
import logging
from typing import TypeVar

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.errors import CommitFailedError, IllegalStateError, KafkaError

from common.logs import LogThrottle

log = logging.getLogger(__name__)
_log = LogThrottle(log)
T = TypeVar("T")


async def backlog_drained(consumer: AIOKafkaConsumer) -> bool:
    """Whether every assigned partition has been read to its end (burst mode's exit test)."""
    assigned = consumer.assignment()
    if not assigned:
        return False
    ends = await consumer.end_offsets(list(assigned))
    for tp in assigned:
        if await consumer.position(tp) < ends[tp]:
            return False
    return True


def owned_partitions(consumer: AIOKafkaConsumer) -> frozenset[tuple[str, int]]:
    """(topic, partition) of every partition the consumer owns right now."""
    return frozenset((tp.topic, tp.partition) for tp in consumer.assignment())


async def commit_records(consumer: AIOKafkaConsumer, records: list[ConsumerRecord]) -> None:
    """Commit past `records`, naming only partitions still owned: a commit that names a revoked
    partition is refused whole, and would take the owned partitions' offsets down with it."""
    owned = consumer.assignment()
    offsets: dict[TopicPartition, int] = {}
    for record in records:
        tp = TopicPartition(record.topic, record.partition)
        if tp in owned:
            offsets[tp] = max(offsets.get(tp, 0), record.offset + 1)
    if not offsets:
        return
    try:
        await consumer.commit(offsets)
    except (CommitFailedError, IllegalStateError) as exc:
        # The partitions moved during a rebalance: the new owner redelivers these
        # records, and results keyed by request id make that harmless.
        _log.log(logging.WARNING, "rebalance", "commit after rebalance refused (%s); %d records will be redelivered",
                 exc, len(records))
    except KafkaError as exc:
        # The broker is away: a later batch's commit covers these offsets too (commits are
        # cumulative per partition); at worst they are redelivered, never lost.
        _log.log(logging.WARNING, "kafka", "commit failed (%s: %s); the next commit covers these offsets",
                 type(exc).__name__, exc)


async def hand_on(consumer: AIOKafkaConsumer, queue: "asyncio.Queue[T]", item: T, *, patience_s: float = 1.0) -> None:
    """Put `item` on the next stage's queue. While the stages behind it are held up (delivery
    waiting out an outage), pause every partition and keep polling: the consumer stays in its
    group (max.poll.interval.ms) without fetching records it could not hold. Partitions paused
    before (a lower lane, workers/batching/lanes.py) are left as they were."""
    paused: set[TopicPartition] = set()
    try:
        while True:
            try:
                # asyncio.timeout, not wait_for: on Python 3.11 wait_for drops a cancellation that
                # arrives as the put completes, and a cancelled session's collector then waited here for good.
                async with asyncio.timeout(patience_s):
                    await queue.put(item)
                return
            except TimeoutError:
                newly = consumer.assignment() - consumer.paused()
                if newly:
                    consumer.pause(*newly)
                    paused |= newly
                await consumer.getmany(timeout_ms=0)
    finally:
        still_owned = paused & consumer.assignment()
        if still_owned:
            consumer.resume(*still_owned)
