"""Dead letters as the operator sees them: read, count, replay to their request topic, purge.

`fleet dlq` and the console both call these functions. A dead letter is named by its place in
`fleet.dlq`, `<partition>:<offset>`. Replay is safe to repeat and to interrupt:

- a record counts as replayed only once Kafka acknowledged the copy (acks=all); the mark is
  written after the acknowledgement, and a "pending" flag before the send makes a copy whose
  mark was never written visible as "maybe replayed" instead of silently unreplayed;
- nothing is taken out of the DLQ by a replay, so a failed or cancelled redrive loses nothing;
  replaying a whole code again skips what was already acknowledged (a resume), and replaying a
  replayed record needs `again=True` and shows its count going up.

Marks are Redis hashes with a TTL (bounded by time, like the DLQ's own retention); every replay
and purge is appended to a capped audit stream.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka import TopicPartition
from aiokafka.admin.records_to_delete import RecordsToDelete

from common.clients import new_admin, new_consumer, new_producer
from common.redis_cluster import AnyRedis
from common.settings import FleetSettings
from common.topics import newest_records, partitions_of
from schemas.lanes import DEFAULT_LANES, parsed_lanes
from schemas.lanes import model_of_topic as lane_model_of_topic
from schemas.names import DLQ_TOPIC, TOPIC_PREFIX
from schemas.wire import DeadLetter, WireError, now_ms
from workers import DeadLetterPolicy, parse_duration, parse_time

SCAN_PER_PARTITION = 2000  # newest dead letters read per partition: a listing is bounded, not the DLQ
MARK_TTL_S = 30 * 24 * 3600
AUDIT_STREAM = f"{TOPIC_PREFIX}:dlq:audit"
AUDIT_MAXLEN = 10_000
UNREADABLE = "unreadable_letter"


def format_time_ms(time_ms: int) -> str:
    return datetime.fromtimestamp(time_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%fZ")[:-4] + "Z" if time_ms else "-"


def mark_key(ref: str) -> str:
    return f"{TOPIC_PREFIX}:dlq:replay:{ref}"


def model_of_topic(topic: str) -> str | None:
    """`fleet.requests.<model>[.<lane>][.cpu]` -> model (the default lanes); None for any other topic."""
    return lane_model_of_topic(topic, parsed_lanes(DEFAULT_LANES))


@dataclass(frozen=True)
class DeadLetterEntry:
    partition: int
    offset: int
    letter: DeadLetter

    @property
    def ref(self) -> str:
        return f"{self.partition}:{self.offset}"

    @property
    def model(self) -> str:
        return model_of_topic(self.letter.topic) or "-"

    @property
    def masked(self) -> dict[str, Any] | None:
        """What may be shown: the letter's masked view, or one made now; never the original bytes."""
        if self.letter.masked is not None:
            return self.letter.masked
        return DeadLetterPolicy().masked_view(self.letter.original)

    @property
    def replayable(self) -> str | None:
        """None when it can be replayed, else why not."""
        if not self.letter.original:
            return "it carries only a masked view (workers run with FLEET_DLQ_KEEP_ORIGINAL=false)"
        if self.letter.truncated:
            return "its original bytes were cut at the worker's cap"
        if model_of_topic(self.letter.topic) is None:
            return f"its source {self.letter.topic!r} is not a request topic"
        return None


@dataclass(frozen=True)
class ReplayMark:
    count: int
    last_ms: int
    actor: str
    copy: str  # topic/partition@offset of the last acknowledged copy
    pending: bool  # a send began and no acknowledgement was recorded: it may have been copied


def parse_ref(ref: str) -> tuple[int, int]:
    partition, _, offset = ref.partition(":")
    if not partition.isdigit() or not offset.isdigit():
        raise ValueError(f"{ref!r} is not a dead letter reference <partition>:<offset>")
    return int(partition), int(offset)


def _decode(partition: int, offset: int, raw: bytes | None) -> DeadLetterEntry:
    try:
        letter = DeadLetter.decode(raw or b"")
    except (WireError, ValueError) as exc:
        letter = DeadLetter(reason=f"the DLQ record itself is unreadable: {exc}"[:300], code=UNREADABLE,
                            topic="", partition=-1, offset=-1, time_ms=0)
    return DeadLetterEntry(partition, offset, letter)


def time_bound(text: str | None, now_ms: int) -> int | None:
    """Epoch ms of `text`: a duration ago (`30m`, `2h`, `1h30m`, `2d`) or an ISO 8601 time (UTC unless it
    names a zone); None when empty. ValueError, in words, for anything else."""
    if text is None or not text.strip():
        return None
    try:
        return now_ms - int(parse_duration(text) * 1000)
    except ValueError:
        pass
    try:
        return parse_time(text.strip())
    except ValueError:
        raise ValueError(f"not a time: {text!r} (a duration ago such as 30m or 2h, or a UTC time such as "
                         "2026-12-03T08:00)") from None


def select_letters(entries: Iterable[DeadLetterEntry], *, model: str | None = None, code: str | None = None,
                   refs: Iterable[str] | None = None, limit: int = 200, since_ms: int | None = None,
                   until_ms: int | None = None) -> list[DeadLetterEntry]:
    """The entries of `model` / `code` / `refs` (None: any), dead-lettered in [since_ms, until_ms) when
    given, newest first, at most `limit`."""
    wanted = set(refs) if refs is not None else None
    chosen = [e for e in entries if (model is None or e.model == model) and (code is None or e.letter.code == code)
              and (wanted is None or e.ref in wanted) and (since_ms is None or e.letter.time_ms >= since_ms)
              and (until_ms is None or e.letter.time_ms < until_ms)]
    chosen.sort(key=lambda e: (e.letter.time_ms, e.partition, e.offset), reverse=True)
    return chosen[:limit]


def decode_records(records: Iterable[Any]) -> list[DeadLetterEntry]:
    """DLQ consumer records as entries (an unreadable one says so instead of failing the list)."""
    return [_decode(r.partition, r.offset, r.value) for r in records]


async def read_dead_letters(settings: FleetSettings, *, model: str | None = None, code: str | None = None,
                            refs: Iterable[str] | None = None, limit: int = 200,
                            per_partition: int = SCAN_PER_PARTITION, since_ms: int | None = None,
                            until_ms: int | None = None) -> list[DeadLetterEntry]:
    """The newest dead letters (up to `per_partition` read per partition), newest first, filtered."""
    records = await newest_records(settings, DLQ_TOPIC, per_partition)
    return select_letters(decode_records(records), model=model, code=code, refs=refs, limit=limit,
                          since_ms=since_ms, until_ms=until_ms)


def counts_by_code(entries: Sequence[DeadLetterEntry]) -> list[tuple[str, str, int]]:
    """(model, code, count) rows, most first."""
    counted = Counter((e.model, e.letter.code) for e in entries)
    return [(m, c, n) for (m, c), n in counted.most_common()]


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


async def replay_marks(redis: AnyRedis, refs: Sequence[str]) -> dict[str, ReplayMark]:
    raws = await asyncio.gather(*(redis.hgetall(mark_key(ref)) for ref in refs))
    marks = {}
    for ref, raw in zip(refs, raws, strict=True):
        fields = {_text(k): _text(v) for k, v in (raw or {}).items()}
        if fields:
            marks[ref] = ReplayMark(int(fields.get("count", 0)), int(fields.get("last_ms", 0)),
                                    fields.get("actor", "-"), fields.get("copy", "-"), fields.get("pending") == "1")
    return marks


async def audit(redis: AnyRedis, actor: str, action: str, detail: str, reason: str) -> None:
    await redis.xadd(AUDIT_STREAM, {"time_ms": str(now_ms()), "actor": actor, "action": action,
                                    "detail": detail[:2000], "reason": reason[:500]},
                     maxlen=AUDIT_MAXLEN, approximate=True)


async def audit_entries(redis: AnyRedis, limit: int = 20) -> list[dict[str, str]]:
    rows = await redis.xrevrange(AUDIT_STREAM, count=limit)
    return [{_text(k): _text(v) for k, v in fields.items()} for _, fields in rows]


@dataclass
class ReplayReport:
    replayed: list[tuple[str, str]] = field(default_factory=list)  # (ref, where the copy landed)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (ref, why)

    def summary(self) -> str:
        return f"{len(self.replayed)} replayed, {len(self.skipped)} skipped"


async def replay(settings: FleetSettings, redis: AnyRedis, entries: Sequence[DeadLetterEntry], actor: str,
                 reason: str, *, again: bool = False) -> ReplayReport:
    """Copy each entry's original bytes to its request topic; see the module docstring."""
    report = ReplayReport()
    marks = await replay_marks(redis, [e.ref for e in entries])
    producer = new_producer(settings, linger_ms=0)
    await producer.start()
    try:
        for entry in entries:
            why = entry.replayable
            mark = marks.get(entry.ref)
            if why is None and mark is not None and mark.count and not again:
                why = f"already replayed {mark.count}x (last copy {mark.copy}); replay again to copy it once more"
            if why is not None:
                report.skipped.append((entry.ref, why))
                continue
            report.replayed.append((entry.ref, await _replay_one(producer, redis, entry, actor)))
    finally:
        await producer.stop()
        if report.replayed:
            await audit(redis, actor, "replay", ", ".join(ref for ref, _ in report.replayed), reason)
    return report


async def _replay_one(producer: Any, redis: AnyRedis, entry: DeadLetterEntry, actor: str) -> str:
    key = mark_key(entry.ref)
    await redis.hset(key, "pending", "1")
    await redis.expire(key, MARK_TTL_S)
    assert entry.letter.original is not None
    meta = await producer.send_and_wait(entry.letter.topic, entry.letter.original)  # acknowledged, or raises
    copy = f"{meta.topic}/{meta.partition}@{meta.offset}"
    await redis.hincrby(key, "count", 1)
    await redis.hset(key, mapping={"last_ms": str(now_ms()), "actor": actor, "copy": copy, "pending": "0"})
    return copy


async def dlq_ends(settings: FleetSettings) -> dict[int, int]:
    """Each DLQ partition's end offset now: what a purge decided on now removes, and nothing later."""
    partitions = await partitions_of(settings, DLQ_TOPIC)
    if not partitions:
        return {}
    consumer = new_consumer(settings, enable_auto_commit=False)
    await consumer.start()
    try:
        ends = await consumer.end_offsets(partitions)
    finally:
        await consumer.stop()
    return {tp.partition: end for tp, end in ends.items()}


def format_ends(ends: dict[int, int]) -> str:
    return ",".join(f"{p}:{o}" for p, o in sorted(ends.items()))


def parse_ends(text: str) -> dict[int, int]:
    return dict(parse_ref(part) for part in text.split(",") if part)


async def purge(settings: FleetSettings, redis: AnyRedis, ends: dict[int, int], actor: str,
                reason: str) -> dict[int, int]:
    """Delete every dead letter before `ends` (per partition); returns each partition's new first offset."""
    admin = new_admin(settings)
    await admin.start()
    try:
        low = await admin.delete_records({TopicPartition(DLQ_TOPIC, p): RecordsToDelete(before_offset=o)
                                          for p, o in ends.items()})
    finally:
        await admin.close()
    await audit(redis, actor, "purge", f"before {format_ends(ends)}", reason)
    return {tp.partition: offset for tp, offset in low.items()}


def letter_fields(entry: DeadLetterEntry, *, masked: bool = True) -> list[tuple[str, str]]:
    """One letter, field by field, as `fleet dlq show` prints it and the console lists it
    (the console shows the masked view on its own, laid out)."""
    letter = entry.letter
    fields = [("ref", entry.ref), ("model", entry.model), ("code", letter.code), ("reason", letter.reason),
              ("source", f"{letter.topic}/{letter.partition}@{letter.offset}"), ("worker", letter.worker or "-"),
              ("time", format_time_ms(letter.time_ms)), ("size", str(letter.original_size or "-")),
              ("replayable", entry.replayable or "yes")]
    if masked:
        fields.append(("masked", json.dumps(entry.masked, ensure_ascii=False, default=str)))
    return fields
