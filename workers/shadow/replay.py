"""Shadow replay: compare the candidate on past traffic ("shadow the last hour").

Reads a window of the primary request topic with a group-less consumer (manual assignment,
no commits, so no consumer group's position moves) and compares every record the way the
shadow worker does (workers/shadow/engine.py): the live result from Redis while it is
still there (results expire after `result_ttl_s`), else stable recomputed here. The window
is a time range (record timestamps; Kafka finds the first offset at or after a time) or an
offset range, on all partitions or chosen ones. The end is fixed when the replay starts, so
traffic arriving meanwhile is not chased.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

from aiokafka import AIOKafkaProducer, TopicPartition

from common.redis_cluster import AnyRedis
from common.clients import new_consumer
from common.topics import partitions_of
from schemas.wire import now_ms
from workers.shadow.member import ShadowMember
from workers.shadow.engine import BackendLoader, ShadowMetrics
from workers.shadow.settings import ShadowSettings

_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}
FETCH_MS = 500


def parse_duration(text: str) -> float:
    """Seconds in '90s', '30m', '1h', '1h30m', '2d'; ValueError for anything else."""
    compact = text.strip().lower().replace(" ", "")
    if not compact or _DURATION.sub("", compact):
        raise ValueError(f"not a duration: {text!r} (examples: 30m, 1h, 1h30m, 2d)")
    return sum(float(number) * _UNIT_S[unit] for number, unit in _DURATION.findall(compact))


def parse_time(text: str) -> int:
    """Epoch ms of an ISO 8601 time; one without a zone is taken as UTC."""
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


@dataclass(frozen=True)
class ReplayWindow:
    """What to replay: a time range [start_ms, end_ms) or an offset range [from_offset, to_offset)."""

    start_ms: int | None = None
    end_ms: int | None = None
    from_offset: int | None = None
    to_offset: int | None = None
    partitions: tuple[int, ...] | None = None

    @classmethod
    def since(cls, duration: str, *, now: int | None = None, partitions: tuple[int, ...] | None = None) -> ReplayWindow:
        end = now if now is not None else now_ms()
        return cls(start_ms=end - int(parse_duration(duration) * 1000), end_ms=end, partitions=partitions)

    @property
    def by_time(self) -> bool:
        return self.start_ms is not None or self.end_ms is not None

    def __post_init__(self) -> None:
        if self.by_time and (self.from_offset is not None or self.to_offset is not None):
            raise ValueError("a replay window is a time range or an offset range, not both")

    def keeps(self, timestamp: int) -> bool:
        return ((self.start_ms is None or timestamp >= self.start_ms)
                and (self.end_ms is None or timestamp < self.end_ms))


def clamp_ranges(begins: dict[TopicPartition, int], ends: dict[TopicPartition, int], from_offset: int | None,
                 to_offset: int | None) -> dict[TopicPartition, tuple[int, int]]:
    """Per partition [first, end) of an offset range, inside what the partition still holds; empty ones dropped."""
    ranges = {}
    for tp, begin in begins.items():
        first = max(begin, from_offset if from_offset is not None else begin)
        end = min(ends[tp], to_offset if to_offset is not None else ends[tp])
        if first < end:
            ranges[tp] = (first, end)
    return ranges


class ShadowReplay(ShadowMember):
    what = "replay"

    def __init__(self, settings: ShadowSettings, window: ReplayWindow, *, redis: AnyRedis | None = None,
                 producer: AIOKafkaProducer | None = None, backends: BackendLoader | None = None,
                 metrics: ShadowMetrics | None = None) -> None:
        super().__init__(settings, redis=redis, producer=producer, backends=backends, metrics=metrics)
        self.window = window

    async def _open(self) -> None:
        await self._open_engine()
        # Group-less: manual assignment and no commits, so no consumer group's position moves.
        self._consumer = new_consumer(self.settings, enable_auto_commit=False, group_id=None,
                                     max_poll_records=self.settings.max_batch_size)
        await self._consumer.start()

    async def ranges(self) -> dict[TopicPartition, tuple[int, int]]:
        """Per partition, the [first, end) offsets the window covers, as of now."""
        consumer = self._require_consumer()
        partitions = await partitions_of(self.settings, self.topic)
        if self.window.partitions is not None:
            partitions = [tp for tp in partitions if tp.partition in self.window.partitions]
        if not partitions:
            return {}
        begins = await consumer.beginning_offsets(partitions)
        ends = await consumer.end_offsets(partitions)
        if not self.window.by_time:
            return clamp_ranges(begins, ends, self.window.from_offset, self.window.to_offset)
        firsts = await self._offsets_at(partitions, self.window.start_ms, begins)
        lasts = await self._offsets_at(partitions, self.window.end_ms, ends)
        return {tp: (firsts[tp], min(lasts[tp], ends[tp])) for tp in partitions if firsts[tp] < min(lasts[tp], ends[tp])}

    async def _offsets_at(self, partitions: list[TopicPartition], at_ms: int | None,
                          default: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """First offset with a timestamp >= at_ms per partition; `default` where none (or no time given)."""
        if at_ms is None:
            return dict(default)
        found = await self._require_consumer().offsets_for_times({tp: at_ms for tp in partitions})
        return {tp: (found[tp].offset if found.get(tp) is not None else default[tp]) for tp in partitions}

    async def run(self) -> int:
        """Compare every record in the window; returns how many records were read."""
        consumer = self._require_consumer()
        ranges = await self.ranges()
        if not ranges:
            return 0
        consumer.assign(list(ranges))
        for tp, (first, _) in ranges.items():
            consumer.seek(tp, first)
        remaining = {tp: end for tp, (_, end) in ranges.items()}
        read = 0
        while remaining:
            fetched = await consumer.getmany(*remaining, timeout_ms=FETCH_MS, max_records=self.settings.max_batch_size)
            batch = [record for tp, records in fetched.items() for record in records
                     if record.offset < remaining[tp] and self.window.keeps(record.timestamp)]
            read += len(batch)
            if batch:
                await self.engine.process(batch)
            # Positions, not record offsets: transaction markers take offsets no record has.
            remaining = {tp: end for tp, end in remaining.items() if await consumer.position(tp) < end}
        return read
