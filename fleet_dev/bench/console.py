"""`scripts/bench console`: how fast the console's pages load with 10 models and 50 workers.

    python -m fleet_dev.bench.console [--models 10] [--workers 50] [--loads 20]

Writes the heartbeats of `--workers` made-up workers spread over `--models` made-up models into
the stack's Redis, exactly as workers write them (workers/health/heartbeat.py) and kept fresh
every second, serves the console in this process on a free port, signs in with a fresh key of a
made-up operator tenant, and times `--loads` sequential loads of each page (after one warm-up
load each). Target: under 300 ms per page. The parts the Debug and Shadow pages fetch after they
are shown are timed too. The heartbeats and the key are removed afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
import statistics
import time

import httpx
import uvicorn

from common.auth_keys import create_key, revoke_key
from common.clients import redis_client
from common.redis_cluster import AnyRedis
from fleet.console.app import create_app
from fleet.console.settings import ConsoleSettings
from fleet.tables import format_table
from schemas.names import WORKER_MODELS_KEY, worker_key, workers_index_key
from schemas.wire import now_ms
from workers.health.heartbeat import Heartbeat

TENANT = "bench-console-ops"
PAGES = ("/", "/live/overview", "/versions", "/workers", "/tenants", "/dlq", "/shadow", "/debug")
# Parts a page fetches after it is shown (they read a Kafka topic at each load): timed, not held
# to the page target.
FRAGMENTS = ("/live/debug", "/live/shadow/minilm-embed")
TARGET_MS = 300.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def made_up_beats(redis: AnyRedis, models: int, workers: int) -> list[Heartbeat]:
    return [Heartbeat(redis, model=f"bench-console-m{i % models}", worker_id=f"bench-console-w{i}", role="primary",
                      device="cpu", ttl_s=5.0) for i in range(workers)]


async def keep_beating(beats: list[Heartbeat]) -> None:
    while True:
        for i, beat in enumerate(beats):
            await beat.beat("healthy" if i % 17 else "degraded", "" if i % 17 else "slow device", "bench-v1", i)
        await asyncio.sleep(1.0)


async def remove_beats(redis: AnyRedis, beats: list[Heartbeat]) -> None:
    for beat in beats:
        await redis.delete(worker_key(beat.model, beat.worker_id))
        await redis.zrem(workers_index_key(beat.model), beat.worker_id)
    await redis.srem(WORKER_MODELS_KEY, *{beat.model for beat in beats})


async def time_pages(url: str, key: str, loads: int) -> list[tuple[str, ...]]:
    rows = []
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        answer = await client.post("/login", data={"key": key})
        assert answer.status_code == 303, f"sign-in failed: {answer.status_code}"
        for page in PAGES + FRAGMENTS:
            await client.get(page)  # warm-up: first template compile, first Kafka connection
            times = []
            for _ in range(loads):
                started = time.perf_counter()
                response = await client.get(page)
                times.append((time.perf_counter() - started) * 1000)
                assert response.status_code == 200, f"{page}: {response.status_code}"
            p95 = sorted(times)[max(int(len(times) * 0.95) - 1, 0)]
            verdict = "fills in after" if page in FRAGMENTS else "ok" if p95 < TARGET_MS else "OVER"
            rows.append((page, f"{statistics.median(times):.1f}ms", f"{p95:.1f}ms", f"{max(times):.1f}ms", verdict))
    return rows


async def run(models: int, workers: int, loads: int) -> str:
    port = free_port()
    settings = ConsoleSettings(console_tenants=f"{TENANT}:admin")
    redis = redis_client(settings)
    issued = await create_key(redis, TENANT, now_ms=now_ms())
    beats = made_up_beats(redis, models, workers)
    beating = asyncio.create_task(keep_beating(beats))
    server = uvicorn.Server(uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning"))
    serving = asyncio.create_task(server.serve())
    try:
        give_up = time.monotonic() + 30
        while not server.started:
            if serving.done() or time.monotonic() > give_up:
                raise RuntimeError(f"the console did not start on port {port}")
            await asyncio.sleep(0.05)
        await asyncio.sleep(settings.console_lag_sample_s + 1)  # one lag sample in
        rows = await time_pages(f"http://127.0.0.1:{port}", issued.key, loads)
    finally:
        server.should_exit = True
        await serving
        beating.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await beating
        await remove_beats(redis, beats)
        await revoke_key(redis, issued.record.key_id, now_ms=now_ms())
        await redis.aclose()
    title = f"console page loads: {models} models, {workers} workers' heartbeats, {loads} loads each (target < {TARGET_MS:g} ms)"
    return title + "\n" + format_table(("page", "median", "p95", "max", "verdict"), rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench console", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", type=int, default=10)
    parser.add_argument("--workers", type=int, default=50)
    parser.add_argument("--loads", type=int, default=20)
    args = parser.parse_args(argv)
    print(asyncio.run(run(args.models, args.workers, args.loads)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
