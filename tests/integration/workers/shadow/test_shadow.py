"""Shadow consumers on the real Kafka and Redis, with the built FP32 (stable) and INT8 (candidate) versions.

Each test uses its own model name, so its topic, consumer group, stats hash and comparisons
topic start empty; the backend loader maps that name back to the built minilm-embed versions.
"""

import asyncio
import secrets
import time
from collections.abc import AsyncIterator, Callable

import numpy as np
import pytest
from aiokafka import AIOKafkaProducer
from redis.asyncio import Redis

from common.redis_cluster import mget_all
from common.settings import FleetSettings
from fleet.commands.shadow import build_report, recent_comparisons
from common.topics import ensure_topics, partitions_of
from schemas.names import comparisons_topic, requests_topic, result_key, reply_stream, shadow_stats_key, versions_key
from schemas.shadow import Comparison, LiveSource
from schemas.wire import ReplyTo, Request, Result, Status, new_request_id, now_ms
from tests.integration.conftest import MODEL
from tests.built_models import built_registry
from models.backends.base import Backend
from models.loading import ModelLoader
from workers.settings import WorkerSettings
from workers.shadow.worker import ShadowWorker
from workers.shadow.compare import sampled
from workers.shadow.settings import ShadowSettings
from workers.shadow.replay import ReplayWindow, ShadowReplay

TEXTS = ["How do I reset my password?", "Where is my parcel?", "The invoice total looks wrong",
         "Can I change the delivery address after ordering?", "Cancel my subscription please",
         "Is there a student discount?", "My card was charged twice", "What are your opening hours?"]


class Versions:
    """The built stable (newest FP32) and its INT8 child, loaded once; counts loads per version."""

    def __init__(self) -> None:
        registry = built_registry()
        stable = registry.resolve(MODEL, precision="fp32")
        children = [m for m in registry.versions(MODEL) if m.precision == "int8" and m.parent == stable.id]
        if not children:
            pytest.skip(f"no INT8 version of {stable.id} in {registry.root}; run scripts/build-models")
        self.stable, self.candidate = stable.id, children[-1].id
        self.loads: dict[str, int] = {}
        self._loaded: dict[str, Backend] = {}

    def loader(self, version: str) -> Backend:
        """What ShadowWorker's BackendCache calls: the test model name stands for minilm-embed."""
        self.loads[version] = self.loads.get(version, 0) + 1
        if version not in self._loaded:
            self._loaded[version] = ModelLoader(WorkerSettings(model=MODEL).runtime()).load_version(version)
        return self._loaded[version]


@pytest.fixture(scope="module")
def versions() -> Versions:
    return Versions()


@pytest.fixture
async def model(stack: FleetSettings, redis: Redis) -> AsyncIterator[str]:
    name = f"shadowtest-{secrets.token_hex(4)}"
    await ensure_topics(stack, [requests_topic(name), comparisons_topic(name)], 2)
    yield name
    await redis.delete(versions_key(name))


def shadow_settings(model: str, **extra: object) -> ShadowSettings:
    return ShadowSettings(model=model, shadow_start="earliest", shadow_grace_ms=300, max_batch_size=16,
                          session_timeout_ms=6000, **extra)  # type: ignore[arg-type]


async def produce(producer: AIOKafkaProducer, model: str, texts: list[str], *, garbage: int = 0) -> list[Request]:
    requests = [Request(id=new_request_id(), model=model, inputs={"text": text}, deadline_ms=now_ms() + 60_000,
                        submitted_ms=now_ms(), reply=ReplyTo(redis=f"waiter-{model}", topic=f"fleet.results.{model}"))
                for text in texts]
    sends = [await producer.send(requests_topic(model), r.encode(), key=r.id.encode()) for r in requests]
    sends += [await producer.send(requests_topic(model), b"\xc1 not msgpack") for _ in range(garbage)]
    await asyncio.gather(*sends)
    return requests


async def comparisons_of(stack: FleetSettings, model: str, until: Callable[[list[Comparison]], bool]) -> list[Comparison]:
    give_up = time.monotonic() + 20
    found: list[Comparison] = []
    while not until(found) and time.monotonic() < give_up:
        found = await recent_comparisons(stack, model, 10_000)
    return found


async def test_shadow_compares_every_request_and_recomputes_missing_live_results(
        stack: FleetSettings, redis: Redis, producer: AIOKafkaProducer, versions: Versions, model: str) -> None:
    texts = [f"{TEXTS[i % len(TEXTS)]} (#{i})" for i in range(40)]
    requests = await produce(producer, model, texts, garbage=1)
    stable_backend = versions.loader(versions.stable)
    versions.loads.clear()
    live = requests[::2]  # the live workers answered half of them
    embeddings = stable_backend.infer([r.text for r in live])
    written = {r.id: Result(id=r.id, model=model, version=versions.stable, status=Status.ok,
                            outputs={"embedding": row.tolist()}, batch_size=len(live),
                            timings={"inference_ms": 25.0}).encode() for r, row in zip(live, embeddings, strict=True)}
    async with redis.pipeline(transaction=False) as pipe:  # SETs, not one MSET: on a Redis Cluster the keys span slots
        for request_id, payload in written.items():
            pipe.set(result_key(request_id), payload)
        await pipe.execute()
    await redis.hset(versions_key(model), mapping={"stable": versions.stable, "candidate": versions.candidate})

    async with ShadowWorker(shadow_settings(model), backends=versions.loader) as worker:
        read = await asyncio.wait_for(worker.run(burst=True), 90)
        totals = worker.engine.totals
        compared_metric = worker.metrics.registry.get_sample_value(
            "fleet_shadow_compared_total", {"model": model, "candidate": versions.candidate})

    assert read == len(requests) + 1
    assert (totals.compared, totals.skipped["undecodable"]) == (len(requests), 1)
    assert compared_metric == len(requests)
    assert versions.loads == {versions.candidate: 1, versions.stable: 1}  # stable loaded once, lazily, kept

    found = await comparisons_of(stack, model, lambda c: len(c) >= len(requests))
    by_id = {c.id: c for c in found}
    assert set(by_id) == {r.id for r in requests} and len(found) == len(requests)
    for r in requests:
        c = by_id[r.id]
        assert (c.live_version, c.shadow_version) == (versions.stable, versions.candidate)
        assert c.live_source is (LiveSource.live_result if r.id in written else LiveSource.recomputed)
        assert c.input == r.text[:80] and c.cosine is not None and c.shadow_ms > 0
        if r.id in written:
            assert (c.live_ms, c.live_batch) == (25.0, len(live))
        else:  # timed by the shadow's own stable run
            assert c.live_ms is not None and c.live_ms > 0 and c.live_batch is not None
    cosines = np.array([c.cosine for c in found])
    assert cosines.mean() > 0.97, f"INT8 vs FP32 mean cosine {cosines.mean():.4f}"

    stats = {k.decode(): float(v) for k, v in (await redis.hgetall(shadow_stats_key(model, versions.candidate))).items()}
    assert stats["compared"] == len(requests) and stats["recomputed"] == len(requests) - len(live)
    assert stats["agreed"] == sum(c.agreed for c in found)
    assert stats["cosine_sum"] == pytest.approx(float(cosines.sum()), rel=1e-6)

    # A shadow never delivers: the live results are untouched, nothing new was written.
    assert await mget_all(redis, list(map(result_key, written))) == list(written.values())
    assert await redis.exists(*[result_key(r.id) for r in requests if r.id not in written]) == 0
    assert await redis.exists(reply_stream(f"waiter-{model}")) == 0
    assert await partitions_of(stack, f"fleet.results.{model}") == []

    built = await build_report(shadow_settings(model), model, None, 2000)
    assert built is not None
    text, report_totals = built
    assert report_totals.compared == len(requests) and report_totals.mean_cosine is not None
    assert report_totals.mean_cosine > 0.97
    assert versions.candidate in text and "worst 10" in text and "delta (shadow - live)" in text

    # Offsets were committed: the same group finds nothing left to compare.
    async with ShadowWorker(shadow_settings(model), backends=versions.loader) as again:
        assert await asyncio.wait_for(again.run(burst=True), 60) == 0


async def test_without_a_candidate_the_shadow_consumes_and_commits_without_comparing(
        stack: FleetSettings, redis: Redis, producer: AIOKafkaProducer, versions: Versions, model: str) -> None:
    requests = await produce(producer, model, TEXTS[:5])
    await redis.hset(versions_key(model), mapping={"stable": versions.stable})
    async with ShadowWorker(shadow_settings(model), backends=versions.loader) as worker:
        assert await asyncio.wait_for(worker.run(burst=True), 60) == len(requests)
        assert worker.engine.totals.compared == 0
        assert worker.engine.totals.skipped["no_candidate"] == len(requests)
    async with ShadowWorker(shadow_settings(model), backends=versions.loader) as again:
        assert await asyncio.wait_for(again.run(burst=True), 60) == 0


async def test_replay_of_a_time_window_compares_only_that_window(
        stack: FleetSettings, redis: Redis, producer: AIOKafkaProducer, versions: Versions, model: str) -> None:
    before = await produce(producer, model, TEXTS)
    await asyncio.sleep(0.02)
    window_start = now_ms()
    await asyncio.sleep(0.02)
    inside = await produce(producer, model, [f"{t} again" for t in TEXTS * 3])
    await redis.hset(versions_key(model), mapping={"stable": versions.stable})
    settings = shadow_settings(model, shadow_candidate=versions.candidate, shadow_sample=0.5)

    async with ShadowReplay(settings, ReplayWindow(start_ms=window_start), backends=versions.loader) as replay:
        read = await asyncio.wait_for(replay.run(), 90)
        totals = replay.engine.totals
        offsets = await replay.ranges()
    async with ShadowReplay(settings, ReplayWindow(from_offset=1, to_offset=3, partitions=(0,))) as by_offset:
        assert list((await by_offset.ranges()).values()) == [(1, 3)]

    expected = {r.id for r in inside if sampled(r.id, 0.5)}
    assert read == len(inside) and totals.compared == len(expected)
    assert totals.skipped["not_sampled"] == len(inside) - len(expected)
    assert sum(end for _, end in offsets.values()) == len(before) + len(inside)  # the end is the topic's end
    found = await comparisons_of(stack, model, lambda c: len(c) >= len(expected))
    assert {c.id for c in found} == expected
    assert all(c.live_source is LiveSource.recomputed and c.live_version == versions.stable for c in found)
    assert np.mean([c.cosine for c in found]) > 0.97


async def test_a_candidate_that_cannot_run_is_counted_not_fatal(
        stack: FleetSettings, redis: Redis, producer: AIOKafkaProducer, versions: Versions, model: str) -> None:
    missing = f"{MODEL}-20261130-999"
    requests = await produce(producer, model, TEXTS[:5])
    await redis.hset(versions_key(model), mapping={"stable": versions.stable})
    async with ShadowWorker(shadow_settings(model, shadow_candidate=missing), backends=versions.loader) as worker:
        assert await asyncio.wait_for(worker.run(burst=True), 60) == len(requests)
        assert worker.engine.totals.skipped["candidate_failed"] == len(requests)
    assert await redis.hget(shadow_stats_key(model, missing), "errors") == str(len(requests)).encode()
    assert await redis.hget(shadow_stats_key(model, missing), "compared") is None
