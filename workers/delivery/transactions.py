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
  wakes up after its partitions moved). A fenced producer's transaction is aborted by Kafka. A
  worker fenced on a partition it no longer serves drops the batch (the new owner answers). One
  fenced on a partition it still serves cannot tell whether it is the zombie or the zombie fenced
  it (a woken worker that has not heard of its lost partitions yet starts a producer, and fences
  the rightful owner): it waits FENCE_RETRY_S (the zombie's overdue heartbeat tells it first) and
  tries again with a new producer, and only after FENCES_BEFORE_LEAVING fences in a row ends its
  session and rejoins the group (workers/worker.py) to start again from the committed offsets.
  Ending sessions at the first fence let one woken zombie make the rightful owner leave too, and
  every leave moved partitions again (a chaos run lost the interactive traffic of a minute).
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

from schemas.names import FALLBACK_SUFFIX
from workers.delivery.batched_produce import Errors, Send, produce_batched
from workers.delivery.patience import Patience, is_outage

log = logging.getLogger(__name__)

MAX_RECORD_BYTES = 1_000_000  # aiokafka's max_request_size is 1 MiB: a larger record would fail its transaction
# A transaction takes milliseconds; one still open after this is on a producer that will not finish it
# (its broker gone for good, or a state aiokafka does not leave): it is dropped and tried again.
TRANSACTION_TIMEOUT_S = 15.0  # below the producers' transaction_timeout_ms (20 s, workers/assembly.py)
ABORT_WAIT_S = 5.0  # what a timed-out transaction's abort may take before it is left to the broker's timeout
STOP_TIMEOUT_S = 10.0
READY_TIMEOUT_S = 15.0  # a producer's start (fencing its predecessor) and the committed offset read after it
FENCE_RETRY_S = 2.0  # under the 3 s heartbeat interval, and a woken zombie's heartbeat is overdue: it goes first
FENCES_BEFORE_LEAVING = 3


class Fenced(Exception):
    """Another producer took over one of this worker's partitions: the session must end, and the
    worker start again from the committed offsets."""


class Refused(Exception):
    """Kafka refused a record of the transaction for good; the transaction was aborted."""


class _FencedWhileServing(Exception):
    """A producer of a partition this worker still serves was fenced."""


@dataclass
class PartitionChunk:
    """What one input partition of a batch puts in its transaction."""

    partition: TopicPartition
    next_offset: int  # one past the last record of the partition in the batch: the offset committed
    sends: list[tuple[int, Send]] = field(default_factory=list)  # (source offset, what to produce)
    first_offset: int | None = None  # the partition's first record in the batch (None: an offset-only commit)


def chunks_of(offsets: Iterable[tuple[str, int, int]], sends: Iterable[tuple[tuple[str, int, int], Send]],
              covered: Callable[[str], bool]) -> dict[TopicPartition, PartitionChunk]:
    """A batch's records (topic, partition, offset) of covered topics and what each produces, per partition."""
    chunks: dict[TopicPartition, PartitionChunk] = {}
    for topic, partition, offset in offsets:
        if covered(topic):
            tp = TopicPartition(topic, partition)
            chunk = chunks.setdefault(tp, PartitionChunk(tp, offset + 1, first_offset=offset))
            chunk.next_offset = max(chunk.next_offset, offset + 1)
            chunk.first_offset = min(offset, chunk.first_offset if chunk.first_offset is not None else offset)
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
        self._unconfirmed: set[TopicPartition] = set()  # revoked, and not assigned again (yet)
        self._replace: set[TopicPartition] = set()  # revoked, then assigned again: another may have served it

    def listener(self) -> ConsumerRebalanceListener:
        """For the group consumer: hears which partitions a rebalance takes away and gives back."""
        return _Rebalances(self)

    def revoked(self, partitions: set[TopicPartition]) -> None:
        self._unconfirmed |= partitions

    def assigned(self, partitions: set[TopicPartition]) -> None:
        self._replace |= self._unconfirmed & partitions
        self._unconfirmed -= partitions

    def _serving(self, tp: TopicPartition) -> bool:
        """Whether this worker may commit for `tp` now: assigned, and not in the middle of a rebalance
        that revoked it (a woken zombie's consumer still lists what it lost until it rejoins)."""
        return tp in self._consumer().assignment() and tp not in self._unconfirmed

    async def prune(self) -> None:
        """Stop the producers of partitions this worker no longer serves. Called between transactions
        (inside a delivery turn), so none of them is in the middle of one."""
        gone = [tp for tp in self._producers if tp not in self._consumer().assignment()]
        await asyncio.gather(*(self._discard(tp) for tp in gone))

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
        Waits out outages; raises Fenced when other producers took the partition over
        FENCES_BEFORE_LEAVING times in a row while this worker still served it, Refused when Kafka
        refuses a record for good."""
        async def attempt() -> bool:
            if not self._serving(chunk.partition):
                return False
            producer, committed = await self._ready(chunk.partition)
            if chunk.next_offset <= committed:
                return False
            if await self._after_a_gap(chunk, committed):
                return False
            sends = [send for offset, send in chunk.sends if offset >= committed]
            try:
                async with asyncio.timeout(TRANSACTION_TIMEOUT_S):
                    await _watched(producer, self._transact(producer, chunk.partition, sends, chunk.next_offset))
            except ProducerFenced as exc:
                await self._discard(chunk.partition)
                self._counted("fenced")
                if not self._serving(chunk.partition):
                    return False  # it moved while this transaction was under way: the new owner answers
                raise _FencedWhileServing(f"{self.transactional_id(chunk.partition)} was fenced: another producer "
                                          f"took {chunk.partition.topic}[{chunk.partition.partition}]") from exc
            except BaseException as exc:
                # Aborting after an outage may itself fail; the successor's start aborts what is left open.
                await self._discard(chunk.partition)
                if isinstance(exc, Exception) and not is_outage(exc):
                    raise Refused(f"{type(exc).__name__}: {str(exc)[:300]}") from exc
                raise
            self._committed[chunk.partition] = chunk.next_offset
            self._counted("committed")
            return True

        for fences in range(1, FENCES_BEFORE_LEAVING + 1):
            try:
                done = await self._patience.until_done("kafka", attempt)
                break
            except _FencedWhileServing as fenced:
                if fences == FENCES_BEFORE_LEAVING:
                    raise Fenced(f"{fenced} {fences} times in a row") from fenced
                log.warning("%s while this worker still serves it (a woken worker that has not learnt yet that it "
                            "lost the partition?): trying again with a new producer in %g s", fenced, FENCE_RETRY_S)
                await asyncio.sleep(FENCE_RETRY_S)
        if not done:
            self._counted("skipped")
        return done

    async def _after_a_gap(self, chunk: PartitionChunk, committed: int) -> bool:
        """Whether the chunk starts past the committed offset, with records between that nobody answered:
        a batch read before a rebalance gave the partition back (its predecessor was skipped while the
        partition was away, and the consumer reads again from the committed offset). Committing it
        would skip the records between; the consumer is sent back to the committed offset instead.
        Not on fallback topics, whose offsets have gaps of their own (transaction markers), nor when
        the records between are gone (retention): then nothing can answer them."""
        tp = chunk.partition
        if chunk.first_offset is None or chunk.first_offset <= committed or tp.topic.endswith(FALLBACK_SUFFIX):
            return False
        consumer = self._consumer()
        if committed < (await consumer.beginning_offsets([tp]))[tp]:
            return False
        log.warning("%s[%d]: a batch from offset %d came after the committed %d; reading again from %d",
                    tp.topic, tp.partition, chunk.first_offset, committed, committed)
        consumer.seek(tp, committed)
        self._counted("gap")
        return True

    async def _transact(self, producer: AIOKafkaProducer, tp: TopicPartition, sends: list[Send],
                        next_offset: int) -> None:
        async with producer.transaction():
            # A batch the broker refused is not sent again record by record here: the producer does not
            # rewind its sequence numbers, so those sends would fail as out of order, and look like an outage.
            errors = await produce_batched(producer, sends, _refused_in_transaction)
            failures = [error for error in errors if error is not None]
            if failures:
                raise next((error for error in failures if not is_outage(error)), failures[0])
            await producer.send_offsets_to_transaction({tp: next_offset}, self._group)

    async def _ready(self, tp: TopicPartition) -> tuple[AIOKafkaProducer, int]:
        """The partition's producer, started (which fences any other with its id), and the offset
        committed for the partition as seen after the fence."""
        if tp in self._replace:
            self._replace.discard(tp)
            began = asyncio.get_running_loop().time()
            await self._discard(tp)
            if (spent := asyncio.get_running_loop().time() - began) >= 5.0:
                log.warning("stopping the old producer of %s[%d] (the partition came back) took %.1f s",
                            tp.topic, tp.partition, spent)
        producer = self._producers.get(tp)
        if producer is not None:
            return producer, self._committed[tp]
        producer = self._make_producer(self.transactional_id(tp))
        try:
            # Bounded: a start that never ends (seen in a chaos run after a broker restart: one partition's
            # producer started, its neighbour's never did) held every later delivery of the worker, silently.
            # A TimeoutError is an outage: the attempt is retried with a new producer, and said so.
            async with asyncio.timeout(READY_TIMEOUT_S):
                await producer.start()
                # The producer id comes with the first transaction; an empty one aborts without a round trip.
                await producer.begin_transaction()
                await producer.abort_transaction()
                committed = await self._consumer().committed(tp)
        except BaseException as exc:
            if isinstance(exc, TimeoutError):
                log.warning("the transactional producer %s was not ready within %g s; trying a new one",
                            self.transactional_id(tp), READY_TIMEOUT_S)
            await _stop_within(producer, STOP_TIMEOUT_S)
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
            await _stop_within(producer, STOP_TIMEOUT_S)

    async def release(self) -> None:
        """Stop every producer (the worker left its group); idempotent."""
        await asyncio.gather(*(self._discard(tp) for tp in list(self._producers)))


class _Rebalances(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, transactions: PartitionTransactions) -> None:
        self._transactions = transactions

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self._transactions.revoked(set(revoked))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self._transactions.assigned(set(assigned))


async def _refused_in_transaction(sends: list[Send]) -> Errors:
    return [RecordRefused("the broker refused this record's batch in a transaction") for _ in sends]


class RecordRefused(Exception):
    """A record of a batch the broker refused for good inside a transaction."""


async def _stop_within(producer: AIOKafkaProducer, timeout_s: float) -> None:
    """`producer.stop()`, bounded: it waits for every pending batch, and a transactional one never
    expires (aiokafka expires batches only without a transaction manager). Past the bound the
    sender and the connections are closed without the flush."""
    try:
        async with asyncio.timeout(timeout_s):
            await producer.stop()
        return
    except TimeoutError:
        log.warning("a transactional producer did not stop within %g s; closing it without a flush", timeout_s)
    except Exception as exc:  # a fenced or broken producer: it is gone either way
        log.debug("stopping a transactional producer: %s", exc)
        return
    sender = producer._sender.sender_task
    if sender is not None:
        sender.cancel()
        await asyncio.gather(sender, return_exceptions=True)
    await producer.client.close()


async def _watched(producer: AIOKafkaProducer, work: Coroutine[Any, Any, None]) -> None:
    """`work`, raced against the producer's sender: when the sender's loop ends (a fence ends it with
    ProducerFenced), the transaction ends with it, with the sender's error, whatever aiokafka still
    has pending (a chaos run once held a worker two minutes on a fenced transaction)."""
    sender: asyncio.Task[None] | None = producer._sender.sender_task
    task = asyncio.ensure_future(work)
    try:
        await asyncio.wait({task, sender} if sender is not None else {task}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        # The sender died, or this was cancelled (the timeout): the transaction goes with it. Its abort
        # waits on the same sender, so it gets a bound too.
        for _ in range(2):
            if task.done():
                break
            task.cancel()
            await asyncio.wait({task}, timeout=ABORT_WAIT_S)
    if task.done() and not task.cancelled():
        task.result()
        return
    assert sender is not None
    failure = None if sender.cancelled() else sender.exception()
    raise failure or KafkaConnectionError("the producer's sender stopped")
