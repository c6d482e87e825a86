"""The console's view of fleet.dlq: one long-lived consumer (no group) that reads only what is
new at each page load, so the Dead letters page costs two offset look-ups instead of a fresh
consumer and a re-read of the newest records (about 600 ms on the local stack).

It keeps the newest SCAN_PER_PARTITION letters of each partition, as `fleet dlq list` reads
them, and drops what a purge deleted. Selection and decoding are dlq_store's, shared with the CLI.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque

from aiokafka import AIOKafkaConsumer, TopicPartition

from common.clients import new_consumer
from common.topics import partitions_of
from fleet.commands.dlq_store import SCAN_PER_PARTITION, DeadLetterEntry, decode_records
from fleet.console.settings import ConsoleSettings
from schemas.names import DLQ_TOPIC

READ_BUDGET_S = 5.0  # one page load reads new letters for at most this long


class DeadLetterShelf:
    def __init__(self, settings: ConsoleSettings, per_partition: int = SCAN_PER_PARTITION) -> None:
        self.settings = settings
        self.per_partition = per_partition
        self._consumer: AIOKafkaConsumer | None = None
        self._partitions: list[TopicPartition] = []
        self._kept: dict[int, deque[DeadLetterEntry]] = {}
        self.ends: dict[int, int] = {}  # partition -> end offset at the last catch-up: what a purge may delete
        self._lock = asyncio.Lock()

    async def entries(self) -> list[DeadLetterEntry]:
        """Every kept letter, after reading what arrived since the last call."""
        async with self._lock:
            try:
                await self._catch_up()
            except BaseException:
                await self.close()  # a fresh consumer next time, after an outage
                raise
            return [entry for kept in self._kept.values() for entry in kept]

    async def close(self) -> None:
        if self._consumer is not None:
            consumer, self._consumer = self._consumer, None
            await consumer.stop()

    async def _start(self) -> AIOKafkaConsumer:
        self._partitions = await partitions_of(self.settings, DLQ_TOPIC)
        # read_committed: a letter written in an aborted delivery transaction was never dead-lettered.
        consumer = new_consumer(self.settings, enable_auto_commit=False, isolation_level="read_committed")
        await consumer.start()
        if self._partitions:
            consumer.assign(self._partitions)
            ends = await consumer.end_offsets(self._partitions)
            starts = await consumer.beginning_offsets(self._partitions)
            for tp in self._partitions:
                consumer.seek(tp, max(starts[tp], ends[tp] - self.per_partition))
        self._kept = {tp.partition: deque(maxlen=self.per_partition) for tp in self._partitions}
        self._consumer = consumer
        return consumer

    async def _catch_up(self) -> None:
        consumer = self._consumer or await self._start()
        if not self._partitions:
            await self.close()  # the topic does not exist yet: look again next time
            return
        ends = await consumer.end_offsets(self._partitions)
        starts = await consumer.beginning_offsets(self._partitions)
        for tp in self._partitions:  # a purge moved the start: what it deleted goes
            kept = self._kept[tp.partition]
            while kept and kept[0].offset < starts[tp]:
                kept.popleft()
        self.ends = {tp.partition: end for tp, end in ends.items()}
        behind = {tp: end for tp, end in ends.items() if await consumer.position(tp) < end}
        give_up = time.monotonic() + READ_BUDGET_S
        consumer.resume(*behind)
        try:
            while behind and time.monotonic() < give_up:
                for tp, records in (await consumer.getmany(*behind, timeout_ms=500)).items():
                    self._kept[tp.partition].extend(decode_records(r for r in records if r.offset < behind[tp]))
                behind = {tp: end for tp, end in behind.items() if await consumer.position(tp) < end}
        finally:
            # Paused between page loads: an idle consumer's long-poll fetch (500 ms) would hold
            # the connection and make the next offset look-up wait for it.
            consumer.pause(*self._partitions)
