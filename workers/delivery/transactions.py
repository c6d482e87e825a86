"""Exactly once for `read_committed` readers: a lane's results, dead letters and fallback forwards
go to Kafka in one transaction per input partition and batch, together with the offset they answer.

Without it (the default) delivery is at least once: a worker killed between producing a result and
committing its offset answers the record again, and a results-topic reader sees the result twice.
With `FLEET_EXACTLY_ONCE=bulk` (or `all`, or lane names), the records of those lanes' partitions are
delivered here instead:

- One transactional producer per owned input partition, with the transactional id
  `<group>.<topic>.<partition>`: whoever serves the partition next uses the same id, and starting
  its producer fences the previous one (aiokafka sends no group generation with its offsets, so a
  per-partition id is what fences a zombie: the worker that was SIGSTOPped past its session and
  wakes up after its partitions moved). A fenced producer's transaction is aborted by Kafka, and
  the worker ends its session and rejoins the group (workers/worker.py) to start again from the
  committed offsets.
- Right after a producer is started (the fence), the partition's committed offset is read again:
  what a zombie committed before the fence is then known, and records below it are skipped rather
  than answered twice. The same mark, moved by every commit, skips records answered twice in
  flight (read before a rebalance, and again from the committed offset after it).
- A partition a rebalance took away gets a new producer (a fence, and the offset read again) if it
  comes back: another worker may have served it meanwhile. Its old producer is stopped then, not
  at the rebalance, so a transaction in flight at the rebalance is not cut off.
- Redis (the waiting callers' answers) is written before the transaction, at least once as ever:
  it is keyed by request id, so a repeat writes the same value.
- Transactions of one partition commit in batch order (one delivery turn after another), those of
  different partitions of a batch at once. An outage aborts the transaction, replaces the producer
  (its successor fences it) and retries the whole transaction once Kafka answers (patience.py).
  A record Kafka refuses for good (a topic it will not take) ends the transaction too; that
  partition's batch is then delivered at least once through the ordinary sink, which turns the
  refused record into a dead letter, and its offset is committed by the settler as usual.

Readers must read with `isolation_level="read_committed"`; a `read_uncommitted` reader also sees
the records of aborted transactions. Workers read request topics `read_committed`, so a primary's
aborted forwards never reach its CPU fallback.
"""

import asyncio
import logging
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import KafkaConnectionError, ProducerFenced

from workers.delivery.batched_produce import Send, produce_batched, send_alone
from workers.delivery.patience import Patience, is_outage

log = logging.getLogger(__name__)

MAX_RECORD_BYTES = 1_000_000  # aiokafka's max_request_size is 1 MiB: a larger record would fail its transaction
# A transaction takes milliseconds; one still open after this is on a producer that will not finish it
# (its broker gone for good, or a state aiokafka does not leave): it is dropped and tried again.
TRANSACTION_TIMEOUT_S = 30.0


class Fenced(Exception):
    """Another producer took over one of this worker's partitions: the session must end, and the
    worker start again from the committed offsets."""


class Refused(Exception):
    """Kafka refused a record of the transaction for good; the transaction was aborted."""


@dataclass
class PartitionChunk:
    """What one input partition of a batch puts in its transaction."""

    partition: TopicPartition
    next_offset: int  # one past the last record of the partition in the batch: the offset committed
    sends: list[tuple[int, Send]] = field(default_factory=list)  # (source offset, what to produce)


def chunks_of(offsets: Iterable[tuple[str, int, int]], sends: Iterable[tuple[tuple[str, int, int], Send]],
              covered: Callable[[str], bool]) -> dict[TopicPartition, PartitionChunk]:
    """A batch's records (topic, partition, offset) of covered topics and what each produces, per partition."""
    chunks: dict[TopicPartition, PartitionChunk] = {}
    for topic, partition, offset in offsets:
        if covered(topic):
            tp = TopicPartition(topic, partition)
            chunk = chunks.setdefault(tp, PartitionChunk(tp, offset + 1))
            chunk.next_offset = max(chunk.next_offset, offset + 1)
    for (topic, partition, offset), send in sends:
        chunk = chunks.get(TopicPartition(topic, partition))
        if chunk is not None:
            chunk.sends.append((offset, send))
    return chunks


class PartitionTransactions:
    """The transactional producers of one worker's owned partitions, and the committed mark of each."""

    def __init__(self, group: str, topics: frozenset[str], make_producer: Callable[[str], AIOKafkaProducer],
                 consumer: Callable[[], AIOKafkaConsumer], patience: Patience,
                 counted: Callable[[str], None] = lambda outcome: None) -> None:
        """`topics` are the request topics delivered here; `make_producer(transactional_id)` builds
        an unstarted producer; `consumer` gives the group member of the moment (for committed
        offsets); `counted(outcome)` hears of each transaction (committed, skipped, fenced)."""
        self._group = group
        self._topics = topics
        self._make_producer = make_producer
        self._consumer = consumer
        self._patience = patience
        self._counted = counted
        self._producers: dict[TopicPartition, AIOKafkaProducer] = {}
        self._committed: dict[TopicPartition, int] = {}
        self._revoked: set[TopicPartition] = set()

    def listener(self) -> ConsumerRebalanceListener:
        """For the group consumer: hears which partitions a rebalance takes away."""
        return _Revocations(self._revoked)

    def covers(self, topic: str) -> bool:
        return topic in self._topics

    @property
    def enabled(self) -> bool:
        return bool(self._topics)

    def transactional_id(self, tp: TopicPartition) -> str:
        return f"{self._group}.{tp.topic}.{tp.partition}"

    async def commit(self, chunk: PartitionChunk) -> bool:
        """Produce the chunk's records and commit its offset in one transaction; False when there
        was nothing to do: every record of it was committed before, or the partition is not this
        worker's any more (its new owner answers; starting a producer here would fence the owner).
        Waits out outages; raises Fenced when another producer took the partition over, Refused
        when Kafka refuses a record for good."""
        async def attempt() -> bool:
            if chunk.partition not in self._consumer().assignment():
                return False
            producer, committed = await self._ready(chunk.partition)
            if chunk.next_offset <= committed:
                return False
            sends = [send for offset, send in chunk.sends if offset >= committed]
            try:
                async with asyncio.timeout(TRANSACTION_TIMEOUT_S):
                    await _watched(producer, self._transact(producer, chunk.partition, sends, chunk.next_offset))
            except ProducerFenced as exc:
                await self._discard(chunk.partition)
                self._counted("fenced")
                raise Fenced(f"{self.transactional_id(chunk.partition)} was fenced: another producer serves "
                             f"{chunk.partition.topic}[{chunk.partition.partition}] now") from exc
            except BaseException as exc:
                # Aborting after an outage may itself fail; the successor's start aborts what is left open.
                await self._discard(chunk.partition)
                if isinstance(exc, Exception) and not is_outage(exc):
                    raise Refused(f"{type(exc).__name__}: {str(exc)[:300]}") from exc
                raise
            self._committed[chunk.partition] = chunk.next_offset
            self._counted("committed")
            return True

        done = await self._patience.until_done("kafka", attempt)
        if not done:
            self._counted("skipped")
        return done

    async def _transact(self, producer: AIOKafkaProducer, tp: TopicPartition, sends: list[Send],
                        next_offset: int) -> None:
        async with producer.transaction():
            errors = await produce_batched(producer, sends, lambda alone: send_alone(producer, alone))
            failed = next((error for error in errors if error is not None), None)
            if failed is not None:
                raise failed
            await producer.send_offsets_to_transaction({tp: next_offset}, self._group)

    async def _ready(self, tp: TopicPartition) -> tuple[AIOKafkaProducer, int]:
        """The partition's producer, started (which fences any other with its id), and the offset
        committed for the partition as seen after the fence."""
        if tp in self._revoked:
            self._revoked.discard(tp)
            await self._discard(tp)
        producer = self._producers.get(tp)
        if producer is not None:
            return producer, self._committed[tp]
        producer = self._make_producer(self.transactional_id(tp))
        try:
            await producer.start()
            # The producer id comes with the first transaction; an empty one aborts without a round trip.
            await producer.begin_transaction()
            await producer.abort_transaction()
            committed = await self._consumer().committed(tp)
        except BaseException:
            await producer.stop()
            raise
        self._producers[tp] = producer
        self._committed[tp] = committed or 0
        log.info("transactions for %s[%d] as %s, from offset %d", tp.topic, tp.partition, self.transactional_id(tp),
                 self._committed[tp])
        return producer, self._committed[tp]

    async def _discard(self, tp: TopicPartition) -> None:
        producer = self._producers.pop(tp, None)
        self._committed.pop(tp, None)
        if producer is not None:
            try:
                await producer.stop()
            except Exception as exc:  # a fenced or broken producer: it is gone either way
                log.debug("stopping the producer of %s: %s", tp, exc)

    async def release(self) -> None:
        """Stop every producer (the worker left its group); idempotent."""
        await asyncio.gather(*(self._discard(tp) for tp in list(self._producers)))


class _Revocations(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, revoked: set[TopicPartition]) -> None:
        self._revoked = revoked

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self._revoked.update(revoked)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        return None


async def _watched(producer: AIOKafkaProducer, work: Coroutine[Any, Any, None]) -> None:
    """`work`, raced against the producer's sender. A fence ends aiokafka's sender loop with
    ProducerFenced, and a send_offsets_to_transaction or commit waiting on it then waits for good
    (aiokafka 0.14 fails only the pending record batches): the fence is raised here instead."""
    sender: asyncio.Task[None] | None = producer._sender.sender_task
    task = asyncio.ensure_future(work)
    try:
        await asyncio.wait({task, sender} if sender is not None else {task}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not task.done():  # the sender died, or this was cancelled: the transaction goes with it
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    if not task.cancelled():
        task.result()
        return
    assert sender is not None
    failure = None if sender.cancelled() else sender.exception()
    raise failure or KafkaConnectionError("the producer's sender stopped")
