"""What the chaos run reads back from the fleet: the results topic (every copy of every result),
the dead-letter topic (counted by `code`), stored results in Redis (`fleet:result:<id>`) for the
requests nobody saw answered, and the gateway's first good answer after a fault."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager

import httpx
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from common.clients import new_consumer
from common.redis_cluster import REDIS_DOWN, AnyRedis, mget_all
from common.settings import FleetSettings
from common.topics import partitions_of
from fleet_dev.chaos.ledger import TOPIC, Ledger
from schemas.names import DLQ_TOPIC, result_key
from schemas.wire import DeadLetter, Result, WireError

LOOKUP_CHUNK = 500
PROBE_EVERY_S = 0.2


class ResultsReader:
    """Reads a results topic from its current end for as long as the run lasts; every result goes
    into whatever ledger `ledger()` names at that moment (the scenario running now)."""

    def __init__(self, settings: FleetSettings, topic: str, ledger: Callable[[], Ledger]) -> None:
        self._settings, self._topic, self._ledger = settings, topic, ledger
        # As a pipeline reads: with --exactly-once, results come in delivery transactions.
        self._consumer = new_consumer(settings, enable_auto_commit=False, isolation_level="read_committed")
        self._task: asyncio.Task[None] | None = None
        self.undecodable = 0

    async def start(self) -> None:
        await self._consumer.start()
        partitions = await partitions_of(self._settings, self._topic)
        self._consumer.assign(partitions)
        for tp, offset in (await self._consumer.end_offsets(partitions)).items():
            self._consumer.seek(tp, offset)
        self._task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        while True:
            try:
                batches = await self._consumer.getmany(timeout_ms=500, max_records=2000)
            except KafkaError:  # a broker restart: the consumer reconnects by itself
                await asyncio.sleep(0.5)
                continue
            now = time.monotonic()
            for records in batches.values():
                for record in records:
                    try:
                        result = Result.decode(record.value or b"")
                    except WireError:
                        self.undecodable += 1
                        continue
                    self._ledger().answer(result.id, result.status.value, TOPIC, now)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self._consumer.stop()


class DlqWatch:
    """Dead letters written since `start()`, counted by their `code`."""

    def __init__(self, settings: FleetSettings) -> None:
        self._settings = settings
        self._starts: dict[TopicPartition, int] = {}

    async def start(self) -> None:
        self._starts = await self._ends()

    async def _ends(self) -> dict[TopicPartition, int]:
        partitions = await partitions_of(self._settings, DLQ_TOPIC)
        if not partitions:
            return {}
        async with _consumer(self._settings) as consumer:
            return dict(await consumer.end_offsets(partitions))

    async def count(self) -> Counter[str]:
        ends = await self._ends()
        codes: Counter[str] = Counter()
        left = {tp: end for tp, end in ends.items() if end > self._starts.get(tp, 0)}
        if not left:
            return codes
        async with _consumer(self._settings) as consumer:
            consumer.assign(list(left))
            for tp in left:
                consumer.seek(tp, self._starts.get(tp, 0))
            while left:
                for tp, records in (await consumer.getmany(*left, timeout_ms=1000)).items():
                    for record in records:
                        if record.offset < left[tp]:
                            codes[_code(record.value)] += 1
                left = {tp: end for tp, end in left.items() if await consumer.position(tp) < end}
        return codes


@asynccontextmanager
async def _consumer(settings: FleetSettings) -> AsyncIterator[AIOKafkaConsumer]:
    """A group-less consumer. aiokafka's stop() raises CancelledError when it comes before the
    consumer's own start-up task ever ran, so that task gets its turn first."""
    consumer = new_consumer(settings, enable_auto_commit=False,
                            max_partition_fetch_bytes=8 * 1024 * 1024)
    await consumer.start()
    try:
        yield consumer
    finally:
        await asyncio.sleep(0)
        await consumer.stop()


def _code(value: bytes | None) -> str:
    try:
        return DeadLetter.decode(value or b"").code
    except WireError:
        return "(undecodable dead letter)"


async def on_topic_uncommitted(settings: FleetSettings, topic: str, ids: Sequence[str]) -> int:
    """How many of `ids` a read_uncommitted reader finds on `topic` (all of it): results a read_committed
    reader never saw were produced in a transaction that aborted, or that is still open."""
    wanted, found = set(ids), set()
    partitions = await partitions_of(settings, topic)
    if not wanted or not partitions:
        return 0
    async with _consumer(settings) as consumer:
        consumer.assign(partitions)
        ends = dict(await consumer.end_offsets(partitions))
        await consumer.seek_to_beginning(*partitions)
        left = {tp for tp, end in ends.items() if end > 0}
        while left:
            for records in (await consumer.getmany(*left, timeout_ms=1000)).values():
                for record in records:
                    try:
                        found.add(Result.decode(record.value or b"").id)
                    except WireError:
                        continue
            left = {tp for tp in left if await consumer.position(tp) < ends[tp]}
    return len(wanted & found)


async def stored_results(redis: AnyRedis, ids: Sequence[str]) -> list[tuple[str, str]]:
    """(id, status) of the ids whose result is stored in Redis; those not found (or unreadable) are left out."""
    found: list[tuple[str, str]] = []
    for start in range(0, len(ids), LOOKUP_CHUNK):
        chunk = list(ids[start:start + LOOKUP_CHUNK])
        try:
            values = await mget_all(redis, [result_key(request_id) for request_id in chunk])
        except REDIS_DOWN:
            return found
        for request_id, raw in zip(chunk, values, strict=True):
            if raw is not None:
                try:
                    found.append((request_id, Result.decode(raw).status.value))
                except WireError:
                    found.append((request_id, "undecodable"))
    return found


async def first_good_answer(http: httpx.AsyncClient, model: str, headers: dict[str, str], since: float,
                            give_up_s: float) -> float | None:
    """Seconds from `since` (time.monotonic()) until POST /infer first answers 200; None if it did not
    within `give_up_s`."""
    deadline = since + give_up_s
    while time.monotonic() < deadline:
        try:
            response = await http.post(f"/v1/models/{model}/infer", headers=headers, timeout=3.0,
                                       json={"text": f"chaos probe {time.monotonic_ns()}", "timeout_ms": 2000})
            if response.status_code == 200:
                return max(time.monotonic() - since, 0.0)
        except httpx.HTTPError:
            pass
        await asyncio.sleep(PROBE_EVERY_S)
    return None
