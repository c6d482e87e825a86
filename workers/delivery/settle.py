"""The worker's last stage: settling delivered batches, in the order they were delivered.

Settling is what follows delivery and no caller waits for: committing the batch's offsets,
teaching the caches, writing debug traces, counting version stats. Done inline, its round
trips (a commit, a stats pipeline) would hold up the next batch's delivery; here they run
beside it. Batches that were delivered while the previous settlement was in flight are settled
together: one commit covers them all (commits are cumulative per partition), one stats write
counts them all. Nothing is committed before it is delivered: only delivered batches get here.
"""

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer

from common.process import return_memory
from versions.stats import VersionStatsRecorder
from workers.cache.batch import BatchCaches
from workers.compute.compute import Computed
from workers.delivery.offsets import commit_records
from workers.delivery.sink import Outcome
from workers.delivery.version_stats import record_versions
from workers.observability.tracing import DebugTracer

# Delivered batches that may wait for their settlement before delivery itself waits.
SETTLE_DEPTH = 8
# After batches this large, glibc is asked to give freed memory back (a 5 MB record leaves ~400 MB behind).
OUTSIZED_BATCH_BYTES = 1 << 20


@dataclass(frozen=True)
class Delivered:
    """A computed batch and the outcomes that were delivered for it (those of partitions still owned)."""

    batch: Computed
    outcomes: list[Outcome]


class Settler:
    def __init__(self, consumer: Callable[[], AIOKafkaConsumer], caches: BatchCaches, tracer: DebugTracer,
                 stats: VersionStatsRecorder, settled: Callable[[Computed], None]) -> None:
        """`consumer` gives the group member of the moment; `settled` is told of each batch once settled."""
        self._consumer = consumer
        self._caches = caches
        self._tracer = tracer
        self._stats = stats
        self._settled = settled

    async def run(self, inbox: "asyncio.Queue[Delivered | None]") -> None:
        """Settle what arrives until the None that ends the session, taking whatever queued up at once."""
        finished = False
        while not finished and (first := await inbox.get()) is not None:
            delivered = [first]
            while not inbox.empty():
                more = inbox.get_nowait()
                if more is None:
                    finished = True
                    break
                delivered.append(more)
            await self.settle(delivered)

    async def settle(self, delivered: list[Delivered]) -> None:
        outcomes = [outcome for item in delivered for outcome in item.outcomes]
        records = [record for item in delivered for record in item.batch.records]
        # None of these raises: a refused commit is redelivered, caches, traces and stats are best effort.
        await asyncio.gather(commit_records(self._consumer(), records),
                             *(self._caches.remember(item.batch) for item in delivered),
                             self._tracer.record(outcomes), record_versions(self._stats, outcomes))
        for item in delivered:
            self._settled(item.batch)
        if sum(item.batch.size_bytes for item in delivered) > OUTSIZED_BATCH_BYTES:
            await asyncio.to_thread(return_memory)
