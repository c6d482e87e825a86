"""The semantic cache's compacted topic on the real Kafka: a worker started later loads what
another published, one already running follows it live, and older generations are ignored."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable

import msgpack
import numpy as np
import numpy.typing as npt
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from common.settings import FleetSettings
from schemas.names import semantic_cache_topic
from workers.cache.semantic import SemanticCache
from workers.cache.semantic_log import SemanticEntry, SemanticLog

DIM = 8


def unit(seed: int) -> npt.NDArray[np.float32]:
    v = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
    return v / np.linalg.norm(v)


def entry(i: int, generation: int = 0) -> SemanticEntry:
    return SemanticEntry(f"question number {i}", unit(i), msgpack.packb({"label": f"intent-{i}"}), generation)


def answered(cache: SemanticCache, i: int) -> bytes | None:
    [hit] = cache.lookup([f"question number {i}"], unit(i)[None, :])
    return None if hit is None else hit.outputs


async def until(condition: Callable[[], bool], timeout_s: float = 20.0) -> bool:
    give_up = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > give_up:
            return False
        await asyncio.sleep(0.05)
    return True


async def cleanup_policy(bootstrap: str, topic: str) -> str:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        [response] = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    finally:
        await admin.close()
    [(_code, _message, _type, _name, configs)] = response.resources
    return next(value for name, value, *_ in configs if name == "cleanup.policy")


async def test_a_later_worker_loads_what_another_published_and_a_running_one_follows(
        stack: FleetSettings, producer: AIOKafkaProducer) -> None:
    topic = semantic_cache_topic(f"test-semantic-{uuid.uuid4().hex[:8]}", "v1")
    first = SemanticLog(SemanticCache(DIM), settings=stack, topic=topic, producer=producer)
    assert await first.start() == 0  # creates the topic, compacted
    try:
        assert await cleanup_policy(stack.kafka_bootstrap, topic) == "compact"
        assert await first.publish([entry(i) for i in range(5)]) == 5
        # The publisher's own follower re-adds its entries: the cache holds each text once.
        assert await until(lambda: first.cache.entries == 5)

        async with SemanticLog(SemanticCache(DIM), settings=stack, topic=topic) as second:
            assert second.loaded == 5
            assert answered(second.cache, 3) == msgpack.packb({"label": "intent-3"})
            await first.publish([entry(5), entry(6)])
            assert await until(lambda: second.cache.entries == 7), second.cache.entries
            assert answered(second.cache, 6) == msgpack.packb({"label": "intent-6"})

            # A generation bump drops the cache and ignores older records from then on.
            assert second.set_generation(2)
            assert second.cache.entries == 0
            await first.publish([entry(7, generation=1), entry(8, generation=2)])
            assert await until(lambda: second.cache.entries == 1)
            assert answered(second.cache, 8) is not None and answered(second.cache, 7) is None
            assert await until(lambda: second.stale >= 1)
    finally:
        await first.stop()
        await first.stop()  # idempotent

    third = SemanticLog(SemanticCache(DIM), settings=stack, topic=topic, generation=2)
    assert await third.start() == 1  # only the generation-2 entry survives the replay
    await third.stop()


async def test_malformed_records_are_skipped_not_fatal(stack: FleetSettings, producer: AIOKafkaProducer) -> None:
    topic = semantic_cache_topic(f"test-semantic-{uuid.uuid4().hex[:8]}", "v1")
    log = SemanticLog(SemanticCache(DIM), settings=stack, topic=topic, producer=producer)
    await log.start()
    try:
        await producer.send_and_wait(topic, value=b"\xc1not msgpack", key=b"bad")
        await producer.send_and_wait(topic, value=msgpack.packb({"v": 1, "text": "short", "vector": b"\0" * 4,
                                                                 "outputs": b"", "generation": 0}), key=b"short")
        await log.publish([entry(1)])
        assert await until(lambda: log.cache.entries == 1)
        assert log.malformed == 2
    finally:
        await log.stop()
