"""Micro-batch sizing from the backlog the worker can see and a maximum delay (seed §2.2).

`BatchPolicy` is pure: given what is in hand, how much is still waiting on the assigned
partitions and how old the oldest record is, it says "go now" or "wait up to t ms for more".
`BatchCollector` feeds it from an aiokafka consumer. The backlog is highwater minus position
per partition, both known locally from fetch responses: no broker round trip per batch.

- adaptive: a full batch goes at once; while the model is still busy with the previous batch
  (sending now would only queue behind it) it keeps collecting; while more records are
  visibly waiting it fetches them, up to the delay; otherwise it never waits for records that
  are not there. Light traffic goes out at once at batch-1 latency; under load the batches
  fill while the model works.
- fixed: the classic rule, wait until the batch is full or the oldest record has waited
  max_queue_delay.
With the model free, no record waits longer than max_queue_delay counted from its Kafka
timestamp, so time already spent in the topic counts.
"""

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition

from workers.settings import BatchPolicyName

IDLE_POLL_MS = 200


BUSY_POLL_MS = 2.0
MAX_BUSY_WAIT_S = 1.0  # re-check stop requests and health at least this often


@dataclass(frozen=True)
class BatchView:
    in_hand: int
    backlog: int
    oldest_age_ms: float
    model_busy: bool = False


@dataclass(frozen=True)
class Decision:
    dispatch: bool
    wait_ms: float = 0.0
    until_model_free: bool = False  # wait for the running batch to finish, then take what has arrived


class BatchPolicy:
    def __init__(self, max_batch_size: int, max_queue_delay_ms: float, policy: BatchPolicyName,
                 preferred_batch_sizes: Sequence[int] = ()) -> None:
        self.max_batch_size = max_batch_size
        self.max_queue_delay_ms = max_queue_delay_ms
        self.policy = policy
        self.preferred = frozenset(size for size in preferred_batch_sizes if 0 < size <= max_batch_size)

    def decide(self, view: BatchView) -> Decision:
        if view.in_hand == 0:
            return Decision(dispatch=False, wait_ms=IDLE_POLL_MS)
        if view.in_hand >= self.max_batch_size or view.in_hand in self.preferred:
            return Decision(dispatch=True)
        adaptive = self.policy is BatchPolicyName.adaptive
        if adaptive and view.model_busy:
            # Sent now, the batch would only queue behind the one running; it leaves the
            # moment the model is free, bigger and no later.
            return Decision(dispatch=False, wait_ms=BUSY_POLL_MS, until_model_free=True)
        left_ms = self.max_queue_delay_ms - view.oldest_age_ms
        if left_ms <= 0:
            return Decision(dispatch=True)
        if not adaptive or view.backlog > 0:
            return Decision(dispatch=False, wait_ms=left_ms)
        return Decision(dispatch=True)  # nothing visible to wait for, and the model is free


@dataclass
class FetchedBatch:
    """Records in fetch order, with when each reached this worker (epoch ms)."""

    records: list[ConsumerRecord] = field(default_factory=list)
    fetched_ms: list[float] = field(default_factory=list)


class BatchCollector:
    """Pulls records from a consumer until the policy says the batch should go."""

    def __init__(self, consumer: AIOKafkaConsumer, policy: BatchPolicy, *,
                 stopping: Callable[[], bool] = lambda: False, model_free: asyncio.Event | None = None) -> None:
        self._consumer = consumer
        self._policy = policy
        self._stopping = stopping
        self._model_free = model_free
        self.last_backlog: dict[TopicPartition, int] = {}

    async def backlog(self) -> int:
        """Records on the assigned partitions not yet handed to us, as of the last fetch responses."""
        waiting: dict[TopicPartition, int] = {}
        for tp in self._consumer.assignment():
            highwater = self._consumer.highwater(tp)
            if highwater is not None:
                waiting[tp] = max(highwater - await self._consumer.position(tp), 0)
        self.last_backlog = waiting
        return sum(waiting.values())

    async def next_batch(self) -> FetchedBatch:
        """A batch the policy approves of; empty when nothing arrived within an idle poll."""
        fetched_batch = FetchedBatch()
        batch = fetched_batch.records
        while True:
            oldest = min((record.timestamp for record in batch), default=None)
            age_ms = time.time() * 1000 - oldest if oldest is not None else 0.0
            view = BatchView(in_hand=len(batch), backlog=await self.backlog() if batch else 0, oldest_age_ms=age_ms,
                             model_busy=self._model_free is not None and not self._model_free.is_set())
            decision = self._policy.decide(view)
            if decision.dispatch or (batch and self._stopping()):
                return fetched_batch
            wait_ms = max(int(decision.wait_ms), 1)
            if decision.until_model_free and self._model_free is not None:
                # Sleep instead of polling: the consumer keeps prefetching in the background, and
                # one non-blocking getmany takes what arrived once the model is free.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._model_free.wait(), MAX_BUSY_WAIT_S)
                wait_ms = 0
            fetched = await self._consumer.getmany(timeout_ms=wait_ms,
                                                   max_records=self._policy.max_batch_size - len(batch))
            records = [record for part in fetched.values() for record in part]
            if not records and not batch:
                return fetched_batch
            batch += records
            fetched_batch.fetched_ms += [time.time() * 1000] * len(records)
