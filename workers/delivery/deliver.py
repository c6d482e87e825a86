"""Where a computed batch's answers go: at least once through the sink (the default), or, for the
partitions of exactly-once lanes, in one Kafka transaction per partition (transactions.py).

The pipeline's deliver stage (workers/pipeline.py) decides what a batch answers, dead-letters and
forwards; this decides how it gets there, and tells the settler which partitions' offsets were
committed with their transaction.
"""

import asyncio
import logging
import time
from collections.abc import Callable

from aiokafka import ConsumerRecord
from aiokafka.errors import MessageSizeTooLargeError

from schemas.wire import DeadLetter
from workers.delivery.batched_produce import Send
from workers.delivery.patience import Patience
from workers.delivery.sink import Outcome, ResultSink, undeliverable
from workers.delivery.transactions import MAX_RECORD_BYTES, PartitionChunk, PartitionTransactions, Refused, chunks_of
from workers.delivery.turns import Turn, Turns

log = logging.getLogger(__name__)

Source = tuple[str, int, int]  # the topic, partition and offset a request was read from
Partitions = frozenset[tuple[str, int]]


class Phases:
    """Where a slow delivery spent its time: a stall is reported with the step that held it."""

    SLOW_S = 5.0

    def __init__(self) -> None:
        self._last = self._start = time.monotonic()
        self._spent: list[tuple[str, float]] = []

    def mark(self, step: str) -> None:
        now = time.monotonic()
        self._spent.append((step, now - self._last))
        self._last = now

    def report_if_slow(self, what: str) -> None:
        total = self._last - self._start
        if total >= self.SLOW_S:
            log.warning("%s took %.1f s: %s", what, total,
                        ", ".join(f"{step} {seconds:.1f} s" for step, seconds in self._spent))


class BatchDelivery:
    """One session's deliveries; they may overlap, their transactions commit in the order they began."""

    def __init__(self, sink: ResultSink, transactions: PartitionTransactions, patience: Patience,
                 forwarded: Callable[[int], None]) -> None:
        """`forwarded` counts requests handed to a CPU fallback topic."""
        self._sink = sink
        self._transactions = transactions
        self._patience = patience
        self._forwarded = forwarded
        self._turns = Turns()

    def take_turn(self) -> Turn:
        """Taken before the delivery's first await, so turns go in the order batches came."""
        return self._turns.take()

    async def deliver(self, turn: Turn, records: list[ConsumerRecord], owned: Partitions, outcomes: list[Outcome],
                      letters: list[DeadLetter], forwards: list[tuple[Source, Send]]) -> Partitions:
        """Every outcome, letter and forward durably where it goes; returns the partitions whose
        offsets a transaction committed (the settler commits the others)."""
        try:
            if not self._transactions.enabled:
                turn.release()  # only transactions keep to the order
                await self._at_least_once(outcomes, letters, forwards)
                return frozenset()
            return await self._in_transactions(turn, records, owned, outcomes, letters, forwards)
        finally:
            turn.release()  # however this delivery ended, the next one's transactions may go

    async def _at_least_once(self, outcomes: list[Outcome], letters: list[DeadLetter],
                             forwards: list[tuple[Source, Send]]) -> None:
        await self._sink.deliver(outcomes, letters)
        by_topic: dict[str, list[tuple[bytes | None, bytes]]] = {}
        for _, (topic, value, key) in forwards:
            by_topic.setdefault(topic, []).append((key, value))
        for topic, originals in by_topic.items():
            await self._sink.forward(topic, originals)
            self._forwarded(len(originals))

    async def _in_transactions(self, turn: Turn, records: list[ConsumerRecord], owned: Partitions,
                               outcomes: list[Outcome], letters: list[DeadLetter],
                               forwards: list[tuple[Source, Send]]) -> Partitions:
        sink, covered = self._sink, self._transactions.covers
        exact = [o for o in outcomes if o.source is not None and covered(o.source[0])]
        await asyncio.gather(
            self._at_least_once([o for o in outcomes if o.source is None or not covered(o.source[0])],
                                [d for d in letters if not covered(d.topic)],
                                [f for f in forwards if not covered(f[0][0])]),
            sink.write_redis(exact))  # the waiting callers' answers: keyed by id, a repeat is harmless
        phases = Phases()
        sends = self._sends(exact, letters, forwards)
        await self._patience.until_done("kafka", lambda: sink.ensure_topics(send[0] for _, send in sends))
        chunks = chunks_of(((r.topic, r.partition, r.offset) for r in records if (r.topic, r.partition) in owned),
                           sends, covered)
        phases.mark("answers to Redis and topics made")
        async with turn:
            phases.mark("the previous delivery's turn")
            await self._transactions.prune()
            phases.mark("stopping producers of partitions gone")
            async with asyncio.TaskGroup() as commits:  # a fence cancels the batch's other transactions too
                for chunk in chunks.values():
                    commits.create_task(self._commit(chunk, exact, letters, forwards))
            phases.mark("the transactions")
        phases.report_if_slow(f"a delivery of {len(chunks)} partitions' transactions")
        if forwarded := sum(1 for (topic, partition, _), _ in forwards if covered(topic) and (topic, partition) in owned):
            self._forwarded(forwarded)
        # Every partition of these lanes is the transactions' to commit, also one that was not owned at
        # delivery (its records were dropped): the settler committing it after a rebalance gave it back
        # would skip records its interim owner never answered.
        return frozenset((r.topic, r.partition) for r in records if covered(r.topic))

    def _sends(self, exact: list[Outcome], letters: list[DeadLetter],
               forwards: list[tuple[Source, Send]]) -> list[tuple[Source, Send]]:
        """What the transactions produce, each with the record it answers. A result too large for
        any transaction goes as a dead letter (the at-least-once sink learns that from the broker)."""
        covered = self._transactions.covers
        sends: list[tuple[Source, Send]] = []
        for outcome, send in self._sink.topic_sends(exact):
            assert outcome.source is not None
            if len(send[1]) + len(send[2] or b"") > MAX_RECORD_BYTES:
                refused = MessageSizeTooLargeError(f"{len(send[1])} bytes")
                send = self._sink.letter_send(undeliverable(outcome, send[0], refused))
            sends.append((outcome.source, send))
        sends += [((d.topic, d.partition, d.offset), self._sink.letter_send(d)) for d in letters if covered(d.topic)]
        return sends + [f for f in forwards if covered(f[0][0])]

    async def _commit(self, chunk: PartitionChunk, outcomes: list[Outcome], letters: list[DeadLetter],
                      forwards: list[tuple[Source, Send]]) -> None:
        """One partition's transaction. When Kafka refuses one of its records for good, the partition's
        batch is delivered at least once instead (the refused record a dead letter), and its offset
        committed after it in a transaction of its own, still in this delivery's turn."""
        try:
            await self._transactions.commit(chunk)
            return
        except Refused as exc:
            log.warning("a transaction of %s[%d] was refused (%s); its batch is delivered at least once",
                        chunk.partition.topic, chunk.partition.partition, exc)
        tp = (chunk.partition.topic, chunk.partition.partition)
        await self._at_least_once([o for o in outcomes if o.source is not None and o.source[:2] == tp],
                                  [d for d in letters if (d.topic, d.partition) == tp],
                                  [f for f in forwards if f[0][:2] == tp])
        await self._transactions.commit(PartitionChunk(chunk.partition, chunk.next_offset))
