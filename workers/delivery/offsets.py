"""Kafka offsets of a worker's partitions: committing delivered batches, seeing a drained backlog."""

import logging

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.errors import CommitFailedError, IllegalStateError

log = logging.getLogger(__name__)


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


async def commit_records(consumer: AIOKafkaConsumer, records: list[ConsumerRecord]) -> None:
    offsets: dict[TopicPartition, int] = {}
    for record in records:
        tp = TopicPartition(record.topic, record.partition)
        offsets[tp] = max(offsets.get(tp, 0), record.offset + 1)
    try:
        await consumer.commit(offsets)
    except (CommitFailedError, IllegalStateError) as exc:
        # The partitions moved during a rebalance: the new owner redelivers these
        # records, and results keyed by request id make that harmless.
        log.warning("commit after rebalance refused (%s); %d records will be redelivered", exc, len(records))
