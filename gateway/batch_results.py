"""A batch job's answers (gateway/batch_jobs.py), read from its own results topic, the only place
they are kept: request ids that name their line, the collection that counts answered lines in
Redis bitmaps (idempotent), and the output and errors rows, each line's first answer."""

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import msgpack
from aiokafka import TopicPartition

from common.clients import new_consumer
from common.topics import partitions_of
from gateway.settings import MAX_BATCH_LINES, BatchSettings
from schemas.names import batch_key, batch_results_topic
from schemas.wire import Result, Status, WireError

_MASK = MAX_BATCH_LINES
_MIX = 0x9E3779B1  # odd, so multiplying by it is a bijection of 32-bit integers
_UNMIX = pow(_MIX, -1, 1 << 32)


@dataclass(frozen=True)
class OutputRow:
    line: int
    custom_id: str
    result: Result


@dataclass(frozen=True)
class ErrorRow:
    line: int
    custom_id: str | None
    reason: str


def request_id(job: str, line: int) -> str:
    """32 hex chars: the scrambled line number first (the partitioner reads the first 32 bits, so a
    job's requests spread over every partition), the job's id after."""
    return f"{((line * _MIX) & _MASK) ^ int(job[:8], 16):08x}{job}"


def line_of(job: str, request: str) -> int | None:
    if len(request) != 32 or request[8:] != job:
        return None
    return (((int(request[:8], 16) ^ int(job[:8], 16)) * _UNMIX) & _MASK)



def output_line(row: OutputRow) -> bytes:
    """A line of the output file, as `fleet batch results` writes it."""
    outputs = row.result.as_floats().model_dump(mode="json")["outputs"]
    return (json.dumps({"custom_id": row.custom_id, "line": row.line, "id": row.result.id, "outputs": outputs})
            + "\n").encode()


def error_line(row: ErrorRow) -> bytes:
    return (json.dumps({"line": row.line, "custom_id": row.custom_id, "reason": row.reason}) + "\n").encode()


class JobResults:
    """What the workers answered for a job, read from its results topic (never held elsewhere)."""

    def __init__(self, redis: Any, settings: BatchSettings) -> None:
        self.redis = redis
        self.settings = settings

    async def collect(self, job: str) -> None:
        """Mark every line the results topic answered since the last collection (idempotent: bits)."""
        saved = {int(p): int(o) for p, o in (await self.redis.hgetall(batch_key(job, "offsets"))).items()}
        async for records, positions in self.read(job, saved):
            async with self.redis.pipeline(transaction=False) as pipe:
                for line, result in records:
                    if result.status in (Status.ok, Status.degraded):
                        pipe.setbit(batch_key(job, "done"), line, 1)
                        pipe.setbit(batch_key(job, "failed"), line, 0)
                    else:
                        pipe.setbit(batch_key(job, "failed"), line, 1)
                pipe.hset(batch_key(job, "offsets"), mapping={str(p): o for p, o in positions.items()})
                for part in ("done", "failed", "offsets"):
                    pipe.expire(batch_key(job, part), self.settings.batch_retention_s)
                await pipe.execute()
        # A failure answered again later as done counts once, as done.
        await self.redis.bitop("AND", batch_key(job, "overlap"), batch_key(job, "done"), batch_key(job, "failed"))
        if await self.redis.bitcount(batch_key(job, "overlap")):
            await self.redis.bitop("XOR", batch_key(job, "failed"), batch_key(job, "failed"), batch_key(job, "overlap"))
        await self.redis.delete(batch_key(job, "overlap"))

    async def read(self, job: str, start: dict[int, int], *, committed_only: bool = True
                   ) -> AsyncIterator[tuple[list[tuple[int, Result]], dict[int, int]]]:
        """The job's results from `start` (partition: offset) to the topic's end, in slices with the
        positions after each. `committed_only`: as a read_committed reader, without the results of
        aborted delivery transactions (exactly-once lanes); False shows what a plain reader sees."""
        topic = batch_results_topic(job)
        reader = new_consumer(self.settings, enable_auto_commit=False,
                              isolation_level="read_committed" if committed_only else "read_uncommitted")
        await reader.start()
        try:
            partitions = await partitions_of(self.settings, topic)
            if not partitions:
                return
            reader.assign(partitions)
            ends = await reader.end_offsets(partitions)
            # Explicit seeks: seek_to_beginning() called per partition raced aiokafka's fetcher here,
            # which skipped a partition's records while moving its position to the end.
            beginnings = await reader.beginning_offsets(partitions)
            for tp in partitions:
                reader.seek(tp, start.get(tp.partition, beginnings[tp]))
            while await behind(reader, ends):
                batch: list[tuple[int, Result]] = []
                for records in (await reader.getmany(timeout_ms=1000, max_records=5000)).values():
                    for record in records:
                        try:
                            result = Result.decode(record.value)
                        except WireError:
                            continue
                        if (line := line_of(job, result.id)) is not None:
                            batch.append((line, result))
                yield batch, {tp.partition: await reader.position(tp) for tp in partitions}
        finally:
            await reader.stop()

    async def output(self, job: str) -> AsyncIterator[OutputRow]:
        """One row per line answered `ok` (or `degraded`), the first answer of each, in topic order."""
        seen: set[int] = set()
        async for records, _ in self.read(job, {}):
            fresh = _first_of_each([(line, r) for line, r in records if r.status in (Status.ok, Status.degraded)],
                                   seen)
            if not fresh:
                continue
            names = await self.redis.hmget(batch_key(job, "lines"), [str(line) for line, _ in fresh])
            for (line, result), name in zip(fresh, names):
                yield OutputRow(line, (name or b"").decode(), result)

    async def errors(self, job: str, *, with_failures: bool) -> AsyncIterator[ErrorRow]:
        """Lines refused at submit, then (`with_failures`) the lines the fleet answered with an error
        and never with a result."""
        cursor = 0
        while True:
            cursor, refused = await self.redis.hscan(batch_key(job, "refused"), cursor, count=1000)
            for number, packed in refused.items():
                entry = msgpack.unpackb(packed)
                yield ErrorRow(int(number), entry["custom_id"], entry["reason"])
            if cursor == 0:
                break
        if not with_failures:
            return
        reported: set[int] = set()
        async for records, _ in self.read(job, {}):
            failed = _first_of_each([(line, r) for line, r in records if r.status not in (Status.ok, Status.degraded)],
                                    reported)
            if not failed:
                continue
            still = await self._bits(batch_key(job, "failed"), [line for line, _ in failed])
            names = await self.redis.hmget(batch_key(job, "lines"), [str(line) for line, _ in failed])
            for (line, result), name, failing in zip(failed, names, still):
                if failing:
                    reason = f"{result.error.code}: {result.error.message}" if result.error else result.status.value
                    yield ErrorRow(line, (name or b"").decode() or None, reason)

    async def _bits(self, key: str, offsets: list[int]) -> list[bool]:
        async with self.redis.pipeline(transaction=False) as pipe:
            for offset in offsets:
                pipe.getbit(key, offset)
            return [bool(bit) for bit in await pipe.execute()]


async def behind(reader: Any, ends: dict[TopicPartition, int]) -> bool:
    """Whether the reader has records left before `ends` on any of its partitions."""
    for tp, end in ends.items():
        if await reader.position(tp) < end:
            return True
    return False


def _first_of_each(records: list[tuple[int, Result]], seen: set[int]) -> list[tuple[int, Result]]:
    """The records of lines not in `seen`, one per line (a redelivered result can sit in the same
    read as its first copy); their lines join `seen`."""
    first = []
    for line, result in records:
        if line not in seen:
            seen.add(line)
            first.append((line, result))
    return first
