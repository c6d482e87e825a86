"""The shared side of the semantic cache: a compacted Kafka topic per model version that every
worker of that version replays at start and follows while running.

Why a compacted topic and not Redis: a worker needs the vectors, not just the answers, to
rebuild its FAISS index, and the index is rebuilt in order from the beginning; a log gives
exactly that, and compaction (key = digest of the canonical text) keeps one record per text,
so the topic stays about as large as one cache. One partition keeps replay simple and
ordered; the write rate is the miss rate of the fleet, far below one partition's limit.

Record (msgpack map, key = 16-byte BLAKE2b of the UTF-8 canonical text):
    v           int     record version (1)
    text        str     canonical input text
    vector      bytes   float32 little-endian, normalised, the encoder's dimension
    outputs     bytes   msgpack of the result's outputs map
    generation  int     cache generation (`fleet cache clear` changes it); records of any other are ignored
    time_ms     int     when it was published (epoch ms)
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import msgpack
import numpy as np
import numpy.typing as npt
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition

from common.clients import new_consumer
from common.settings import FleetSettings
from common.topics import ensure_topics, partitions_of
from workers.cache.semantic import SemanticCache, entry_key

log = logging.getLogger(__name__)

RECORD_VERSION = 1
COMPACTED = {"cleanup.policy": "compact"}


@dataclass(frozen=True)
class SemanticEntry:
    text: str
    vector: npt.NDArray[np.float32]
    outputs: bytes
    generation: int = 0
    time_ms: int = 0


def encode_entry(entry: SemanticEntry) -> tuple[bytes, bytes]:
    """(key, value) of the entry's record."""
    value = msgpack.packb({"v": RECORD_VERSION, "text": entry.text,
                           "vector": np.ascontiguousarray(entry.vector, dtype="<f4").tobytes(),
                           "outputs": entry.outputs, "generation": entry.generation,
                           "time_ms": entry.time_ms or int(time.time() * 1000)}, use_bin_type=True)
    return entry_key(entry.text), value


def decode_entry(value: bytes, dim: int) -> SemanticEntry:
    """The entry of a record value; ValueError when it is not one (of this dimension)."""
    try:
        data: Any = msgpack.unpackb(value, raw=False)
        vector = np.frombuffer(data["vector"], dtype="<f4").astype(np.float32)
        entry = SemanticEntry(str(data["text"]), vector, bytes(data["outputs"]), int(data["generation"]),
                              int(data.get("time_ms", 0)))
    except (ValueError, TypeError, KeyError, msgpack.UnpackException) as exc:
        raise ValueError(f"not a semantic-cache record: {exc}") from exc
    if vector.shape != (dim,):
        raise ValueError(f"vector of {vector.shape[0]} floats, expected {dim}")
    return entry


async def ensure_compacted_topic(settings: FleetSettings, topic: str) -> None:
    """Create the topic with cleanup.policy=compact when missing (an existing topic is left alone)."""
    await ensure_topics(settings, [topic], 1, configs=COMPACTED)


class SemanticLog:
    """Publishes this worker's new entries and loads everyone's into `cache`.

    The producer is injected (the worker's own); the consumer is this object's, unassigned
    to any group: every worker reads the whole topic.
    """

    def __init__(self, cache: SemanticCache, *, settings: FleetSettings, topic: str, producer: AIOKafkaProducer | None = None,
                 generation: int = 0, poll_ms: int = 200, replay_timeout_s: float = 120.0) -> None:
        self.cache = cache
        self.topic = topic
        self._settings = settings
        self._producer = producer
        self._generation = generation
        self._poll_ms = poll_ms
        self._replay_timeout_s = replay_timeout_s
        self._consumer: AIOKafkaConsumer | None = None
        self._following: asyncio.Task[None] | None = None
        self.loaded = 0  # entries stored from the log (replay + follow)
        self.stale = 0  # records of an older generation, ignored
        self.malformed = 0  # records that are not entries, skipped

    @property
    def generation(self) -> int:
        return self._generation

    def set_generation(self, generation: int) -> bool:
        """Adopt another cache generation: drop the cache, ignore records of any other one from
        now on (equal, not newer: a Redis that lost the counter restarts it lower, and the
        records of the generations it forgot must not come back). Returns whether anything changed."""
        if generation == self._generation:
            return False
        self._generation = generation
        self.cache.clear()
        return True

    async def publish(self, entries: Sequence[SemanticEntry]) -> int:
        """Send entries to the topic (waits for the broker's acks); returns how many were sent."""
        if self._producer is None:
            raise RuntimeError("this SemanticLog was built without a producer")
        pending = []
        for entry in entries:
            key, value = encode_entry(entry)
            pending.append(await self._producer.send(self.topic, value=value, key=key))
        await asyncio.gather(*pending)
        return len(pending)

    async def start(self) -> int:
        """Replay the topic from the beginning to its current end into the cache, then follow it
        in the background. Returns how many entries the replay stored."""
        if self._consumer is not None:
            raise RuntimeError("SemanticLog already started")
        await ensure_compacted_topic(self._settings, self.topic)
        consumer = new_consumer(self._settings, enable_auto_commit=False, auto_offset_reset="earliest")
        await consumer.start()
        self._consumer = consumer
        try:
            partitions = await partitions_of(self._settings, self.topic)
            consumer.assign(partitions)
            await consumer.seek_to_beginning(*partitions)
            loaded = await self._replay(consumer, await consumer.end_offsets(partitions))
        except BaseException:
            self._consumer = None
            await consumer.stop()
            raise
        self._following = asyncio.create_task(self._follow(consumer), name=f"semantic-log:{self.topic}")
        log.info("semantic cache %s: %d entries loaded from the log", self.topic, loaded)
        return loaded

    async def stop(self) -> None:
        """Stop following (idempotent); raises what made the background follower fail, if anything."""
        task, consumer = self._following, self._consumer
        self._following = self._consumer = None
        failure: BaseException | None = None
        if task is not None:
            if task.done() and not task.cancelled():
                failure = task.exception()
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if consumer is not None:
            await consumer.stop()
        if failure is not None:
            raise RuntimeError(f"following {self.topic} failed") from failure

    async def __aenter__(self) -> SemanticLog:
        await self.start()
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        trace: TracebackType | None) -> None:
        await self.stop()

    async def _replay(self, consumer: AIOKafkaConsumer, end: dict[TopicPartition, int]) -> int:
        loaded = 0
        give_up = time.monotonic() + self._replay_timeout_s
        remaining = {tp: offset for tp, offset in end.items() if offset > await consumer.position(tp)}
        while remaining:
            if time.monotonic() > give_up:
                raise TimeoutError(f"replaying {self.topic} took over {self._replay_timeout_s}s")
            batches = await consumer.getmany(*remaining, timeout_ms=self._poll_ms)
            loaded += await self._apply([record for records in batches.values() for record in records])
            for tp in list(remaining):
                if await consumer.position(tp) >= remaining[tp]:
                    del remaining[tp]
        return loaded

    async def _follow(self, consumer: AIOKafkaConsumer) -> None:
        try:
            while True:
                batches = await consumer.getmany(timeout_ms=self._poll_ms)
                await self._apply([record for records in batches.values() for record in records])
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("semantic cache %s stopped following its log; the cache keeps what it has", self.topic)
            raise

    async def _apply(self, records: list[ConsumerRecord]) -> int:
        by_generation: dict[int, list[SemanticEntry]] = {}
        for record in records:
            if record.value is None:
                continue  # a compaction tombstone
            try:
                entry = decode_entry(record.value, self.cache.dim)
            except ValueError as exc:
                self.malformed += 1
                log.warning("skipping record %s@%s of %s: %s", record.partition, record.offset, self.topic, exc)
                continue
            if entry.generation != self._generation:
                self.stale += 1
                continue
            by_generation.setdefault(entry.generation, []).append(entry)
        stored = 0
        for generation, entries in by_generation.items():
            if generation != self._generation:
                self.stale += len(entries)  # set_generation ran while these were being decoded
                continue
            vectors = np.stack([entry.vector for entry in entries])
            stored += await asyncio.to_thread(self.cache.add, [e.text for e in entries], vectors,
                                              [e.outputs for e in entries], generation)
        self.loaded += stored
        return stored
