"""Heartbeats and drain switches against the real Redis (FLEET_REDIS_URL), and the `fleet workers`
command reading them. The table's layout alone is in tests/unit/fleet/commands/test_workers_table.py.
"""

import asyncio
import itertools
import json
from uuid import uuid4

import pytest
from redis.asyncio import Redis

from fleet.commands import workers as workers_cli
from schemas.names import WORKER_MODELS_KEY, workers_index_key
from workers.health.heartbeat import Heartbeat
from common.heartbeats import (
    BeatFields,
    HealthState,
    drain,
    drain_key,
    healthy_primaries,
    is_drained,
    list_workers,
    undrain,
    worker_key,
)


@pytest.fixture
def model() -> str:
    # A model name of its own per test, so tests never see each other's (or anyone's) workers.
    return f"test-hb-{uuid4().hex[:10]}"


def heartbeat(redis: Redis, model: str, worker: str, role: str = "primary", ttl_s: float = 30.0) -> Heartbeat:
    return Heartbeat(redis, model=model, worker_id=worker, role=role, device="cuda", ttl_s=ttl_s)


async def cleanup(redis: Redis, model: str, *workers: str) -> None:
    await redis.delete(*[worker_key(model, w) for w in workers], *[drain_key(w) for w in workers],
                       workers_index_key(model))
    await redis.srem(WORKER_MODELS_KEY, model)


async def scans(redis: Redis) -> int:
    return int((await redis.info("commandstats")).get("cmdstat_scan", {}).get("calls", 0))


async def test_workers_are_found_without_scanning_the_keyspace(redis: Redis, model: str) -> None:
    # The same Redis holds every cache entry and result: a SCAN would walk millions of keys.
    worker = f"{model}-w1"
    try:
        await heartbeat(redis, model, worker).beat(HealthState.healthy, "", "v", 0)
        before = await scans(redis)
        assert [w.worker for w in await list_workers(redis, model)] == [worker]
        assert worker in {w.worker for w in await list_workers(redis)}
        assert await scans(redis) == before
    finally:
        await cleanup(redis, model, worker)


async def test_a_beat_lists_the_worker_with_its_fields(redis: Redis, model: str) -> None:
    worker = f"{model}-w1"
    try:
        await heartbeat(redis, model, worker).beat(HealthState.degraded, "out of memory", f"{model}-20240101-001", 17)
        (info,) = await list_workers(redis, model)
        assert (info.worker, info.model, info.role, info.device, info.state, info.reason, info.version, info.lag) == (
            worker, model, "primary", "cuda", "degraded", "out of memory", f"{model}-20240101-001", 17)
        assert 0 <= info.age_s < 5 and not info.drained
        assert worker in {w.worker for w in await list_workers(redis)}, "listing every model includes it too"
    finally:
        await cleanup(redis, model, worker)


async def test_the_heartbeat_expires_when_the_beats_stop(redis: Redis, model: str) -> None:
    worker = f"{model}-w1"
    beat = heartbeat(redis, model, worker, ttl_s=0.3)
    try:
        await beat.beat(HealthState.healthy, "", "v", 0)
        assert 0 < await redis.pttl(worker_key(model, worker)) <= 300
        await asyncio.sleep(0.2)
        await beat.beat(HealthState.healthy, "", "v", 0)
        assert await redis.pttl(worker_key(model, worker)) > 200, "a fresh beat pushes the expiry ahead"
        assert len(await list_workers(redis, model)) == 1
        await asyncio.sleep(0.45)
        assert await list_workers(redis, model) == [], "a worker that stops beating disappears by itself"
    finally:
        await cleanup(redis, model, worker)


async def test_the_beat_loop_keeps_the_worker_listed_and_remove_drops_it(redis: Redis, model: str) -> None:
    worker = f"{model}-w1"
    beat = heartbeat(redis, model, worker, ttl_s=0.3)
    lag = itertools.count()  # unbounded: a slow Redis under load must not exhaust it mid-test
    task = asyncio.create_task(beat.run(0.05, lambda: BeatFields(HealthState.healthy, "", "v", next(lag))))
    try:
        await asyncio.sleep(0.6)
        (info,) = await list_workers(redis, model)
        assert info.lag >= 5, "it kept beating with fresh values"
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    await beat.remove()
    assert await list_workers(redis, model) == []


async def test_healthy_primaries_counts_serving_primaries_only(redis: Redis, model: str) -> None:
    workers = {"p-ok": ("primary", HealthState.healthy), "p-slow": ("primary", HealthState.degraded),
               "p-dead": ("primary", HealthState.failed), "p-drained": ("primary", HealthState.healthy),
               "fb": ("fallback", HealthState.healthy), "sh": ("shadow", HealthState.healthy)}
    ids = [f"{model}-{name}" for name in workers]
    other_model = f"{model}-other"
    try:
        for name, (role, state) in workers.items():
            await heartbeat(redis, model, f"{model}-{name}", role).beat(state, "", "v", 0)
        await heartbeat(redis, other_model, f"{model}-elsewhere").beat(HealthState.healthy, "", "v", 0)
        assert await healthy_primaries(redis, model) == 3, "healthy and degraded primaries serve; failed do not"
        await drain(redis, f"{model}-p-drained")
        assert await healthy_primaries(redis, model) == 2, "a drained primary takes no traffic"
        assert len(await list_workers(redis, model)) == len(workers), "another model's workers are not listed"
        assert await healthy_primaries(redis, f"{model}-nobody") == 0
    finally:
        await cleanup(redis, model, *ids)
        await cleanup(redis, other_model, f"{model}-elsewhere")


async def test_drain_and_undrain(redis: Redis, model: str) -> None:
    worker = f"{model}-w1"
    try:
        assert not await is_drained(redis, worker)
        await drain(redis, worker)
        assert await is_drained(redis, worker)
        await heartbeat(redis, model, worker).beat(HealthState.healthy, "", "v", 0)
        (info,) = await list_workers(redis, model)
        assert info.drained
        assert await undrain(redis, worker)
        assert not await is_drained(redis, worker)
        assert not await undrain(redis, worker), "undraining twice says it was not drained"
    finally:
        await cleanup(redis, model, worker)


async def test_the_cli_shows_json_and_switches_drain(redis: Redis, model: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    worker = f"{model}-w1"
    try:
        await heartbeat(redis, model, worker).beat(HealthState.healthy, "", "v1", 3)
        # The CLI runs its own event loop, so it goes to a thread like a separate process would.
        assert await asyncio.to_thread(workers_cli.main, ["--model", model, "--json"]) == 0
        (shown,) = json.loads(capsys.readouterr().out)
        assert (shown["worker"], shown["state"], shown["lag"], shown["drained"]) == (worker, "healthy", 3, False)
        assert await asyncio.to_thread(workers_cli.drain_main, [worker]) == 0
        assert "is now drained" in capsys.readouterr().out and await is_drained(redis, worker)
        assert await asyncio.to_thread(workers_cli.main, ["--model", model]) == 0
        assert "[drained]" in capsys.readouterr().out
        assert await asyncio.to_thread(workers_cli.undrain_main, [worker]) == 0
        assert "takes work again" in capsys.readouterr().out and not await is_drained(redis, worker)
    finally:
        await cleanup(redis, model, worker)


async def test_batch_sizes_and_cache_lookups_are_reported_and_a_heartbeat_without_them_stays_readable(redis: Redis, model: str) -> None:
    new, old = f"{model}-new", f"{model}-old"
    try:
        await heartbeat(redis, model, new).beat(HealthState.healthy, "", "v", 0, batch=12, max_batch=32,
                                                cache=(("local_hits", 3), ("local_misses", 7)))
        await heartbeat(redis, model, old).beat(HealthState.healthy, "", "v", 0)
        await redis.hdel(worker_key(model, old), "batch", "max_batch")  # as a worker before batch sizes wrote it
        found = {w.worker: w for w in await list_workers(redis, model)}
        assert (found[new].batch, found[new].max_batch) == (12, 32)
        assert found[new].cache == (("local_hits", 3), ("local_misses", 7))
        assert (found[old].batch, found[old].max_batch, found[old].cache) == (0, 0, ())
    finally:
        await cleanup(redis, model, new, old)
