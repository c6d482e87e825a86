"""Pulling a micro-batch from an aiokafka consumer until the policy says it should go.

The backlog the policy weighs is highwater minus position per assigned partition, both known
locally from fetch responses: no broker round trip per batch.
"""

import asyncio
import contextlib
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition

from workers.batching.policy import MAX_BUSY_WAIT_S, BatchPolicy, BatchView


@dataclass
class FetchedBatch:
    """Records in fetch order, with when each reached this worker (epoch ms)."""

    records: list[ConsumerRecord] = field(default_factory=list)
    fetched_ms: list[float] = field(default_factory=list)
    size_bytes: int = 0  # of the records' values: whether preparing them is worth a thread, settling a trim
    oldest_ms: float | None = None  # the earliest record timestamp

    def add(self, records: list[ConsumerRecord], fetched_ms: float) -> None:
        if not records:
            return
        self.records += records
        self.fetched_ms += [fetched_ms] * len(records)
        self.size_bytes += sum(len(record.value or b"") for record in records)
        oldest = min(record.timestamp for record in records)
        self.oldest_ms = oldest if self.oldest_ms is None else min(self.oldest_ms, oldest)


class BatchCollector:
    """Pulls records from a consumer until the policy says the batch should go."""

    def __init__(self, consumer: AIOKafkaConsumer, policy: BatchPolicy, *,
                 stopping: Callable[[], bool] = lambda: False, model_has_room: asyncio.Event | None = None,
                 model_working: Callable[[], bool] = lambda: False) -> None:
        self._consumer = consumer
        self._policy = policy
        self._stopping = stopping
        self._model_has_room = model_has_room
        self._model_working = model_working
        self.last_backlog: dict[TopicPartition, int] = {}

    async def waiting(self) -> dict[TopicPartition, int]:
        """Per assigned partition, records not yet handed to us, as of the last fetch responses."""
        waiting: dict[TopicPartition, int] = {}
        for tp in self._consumer.assignment():
            highwater = self._consumer.highwater(tp)
            if highwater is not None:
                waiting[tp] = max(highwater - await self._consumer.position(tp), 0)
        self.last_backlog = waiting
        return waiting

    async def backlog(self) -> int:
        return sum((await self.waiting()).values())

    async def next_batch(self, limit: int | None = None, top_up: Collection[TopicPartition] = ()) -> FetchedBatch:
        """A batch the policy approves of; empty when nothing arrived within an idle poll.

        `limit` caps a lower lane's batch (workers/batching/lanes.py). Such a batch, once full, waits
        for room in the model before it goes, so that no more lower-lane work queues ahead of the model
        than it runs at once; as it goes it takes, without waiting, what arrived meanwhile on the
        higher lanes' partitions (`top_up`), up to the policy's cap: an interactive record that lands
        behind a full bulk batch rides with it instead of waiting for it."""
        fetched_batch = FetchedBatch()
        batch = fetched_batch.records
        while True:
            if limit is not None and len(batch) >= limit:
                return await self._topped_up(fetched_batch, top_up)
            oldest = fetched_batch.oldest_ms
            age_ms = time.time() * 1000 - oldest if oldest is not None else 0.0
            view = BatchView(in_hand=len(batch), backlog=await self.backlog() if batch else 0, oldest_age_ms=age_ms,
                             model_busy=self._model_has_room is not None and not self._model_has_room.is_set(),
                             model_working=self._model_working())
            decision = self._policy.decide(view)
            if decision.dispatch or (batch and self._stopping()):
                return fetched_batch
            wait_ms = max(int(decision.wait_ms), 1)
            if decision.until_model_has_room:
                # Sleep instead of polling: the consumer keeps prefetching in the background, and
                # one non-blocking getmany takes what arrived once the model has room.
                await self._until_model_has_room()
                wait_ms = 0
            # Read after the wait: an out-of-memory back-off may have cut the cap below what is in hand.
            cap = self._policy.max_batch_size if limit is None else min(limit, self._policy.max_batch_size)
            room = cap - len(batch)
            if room <= 0:
                return fetched_batch
            fetched = await self._consumer.getmany(timeout_ms=wait_ms, max_records=room)
            records = [record for part in fetched.values() for record in part]
            if not records and not batch:
                return fetched_batch
            fetched_batch.add(records, time.time() * 1000)

    async def _until_model_has_room(self) -> None:
        if self._model_has_room is None:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(MAX_BUSY_WAIT_S):  # not wait_for: see workers/delivery/offsets.py
                await self._model_has_room.wait()

    async def _topped_up(self, fetched_batch: FetchedBatch, top_up: Collection[TopicPartition]) -> FetchedBatch:
        while not self._stopping() and self._model_has_room is not None and not self._model_has_room.is_set():
            await self._until_model_has_room()
        room = self._policy.max_batch_size - len(fetched_batch.records)
        fetchable = [tp for tp in top_up if tp in self._consumer.assignment()]
        if room > 0 and fetchable:
            fetched = await self._consumer.getmany(*fetchable, timeout_ms=0, max_records=room)
            fetched_batch.add([record for part in fetched.values() for record in part], time.time() * 1000)
        return fetched_batch
