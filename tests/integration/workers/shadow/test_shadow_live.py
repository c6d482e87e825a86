"""A shadow consumer beside a live worker: its own process and group, compared, never in the way."""

import asyncio
import signal
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

from redis.asyncio import Redis

from gateway.client import FleetClient
from schemas.names import shadow_stats_key
from tests.integration.conftest import MODEL, ROOT, Process, start_worker
from models.registry import ModelRegistry
from workers.settings import WorkerSettings

BLOCK = 40


async def sequential_latencies_ms(client: FleetClient, label: str, count: int) -> tuple[list[float], set[str | None]]:
    latencies, workers = [], set()
    for i in range(count):
        started = time.perf_counter()
        result = await client.infer(MODEL, f"shadow latency {label} {i} {uuid.uuid4().hex[:8]}", timeout=30)
        latencies.append((time.perf_counter() - started) * 1000)
        workers.add(result.worker)
    return latencies, workers


async def live_p50s_without_and_with(client: FleetClient, shadow: Process,
                                     attempt: int) -> tuple[float, float, set[str | None]]:
    """Live p50 with the shadow paused and running, and the workers that answered. One shadow
    process, paused (SIGSTOP) and resumed between blocks: no start-up inside a block, and drift on a
    shared machine hits both sides alike."""
    off: list[float] = []
    on: list[float] = []
    live_workers: set[str | None] = set()
    for round_ in range(4):
        shadow.popen.send_signal(signal.SIGSTOP)
        latencies, seen = await sequential_latencies_ms(client, f"off {attempt}.{round_}", BLOCK)
        off += latencies
        live_workers |= seen
        shadow.popen.send_signal(signal.SIGCONT)
        latencies, seen = await sequential_latencies_ms(client, f"on {attempt}.{round_}", BLOCK)
        on += latencies
        live_workers |= seen
    return statistics.median(off), statistics.median(on), live_workers


async def test_int8_shadow_reports_agreement_and_leaves_live_latency_alone(
        client: FleetClient, redis: Redis, processes: list[Process], tmp_path: Path) -> None:
    fp32 = ModelRegistry(WorkerSettings().registry_dir).resolve(MODEL, precision="fp32").id
    int8 = ModelRegistry(WorkerSettings().registry_dir).resolve(MODEL, precision="int8").id
    await redis.delete(shadow_stats_key(MODEL, int8))
    start_worker(processes, tmp_path, "live", FLEET_EXACT_CACHE="false", FLEET_INTRA_OP_THREADS="1",
                 FLEET_MODEL_VERSION=fp32)
    await sequential_latencies_ms(client, "warm-up", 20)
    shadow = start_worker(processes, tmp_path, "shadow", FLEET_ROLE="shadow", FLEET_SHADOW_CANDIDATE=int8,
                          FLEET_SHADOW_GROUP=f"{MODEL}.shadow-test-{uuid.uuid4().hex[:8]}",
                          FLEET_INTRA_OP_THREADS="1", FLEET_SHADOW_GRACE_MS="2000")
    await sequential_latencies_ms(client, "settle", 10)
    live_workers: set[str | None] = set()
    # A timing check on two shared cores: a measurement over the bound is taken once more before it
    # fails (one in three clean-clone runs once measured +11.4% against +0.8-8% on reruns).
    for attempt in range(2):
        p50_off, p50_on, answered_by = await live_p50s_without_and_with(client, shadow, attempt)
        live_workers |= answered_by
        print(f"\nlive p50 with shadow off {p50_off:.1f} ms, on {p50_on:.1f} ms ({p50_on / p50_off - 1:+.1%})")
        if p50_on <= 1.10 * p50_off:
            break
    await asyncio.sleep(1.0)  # let the shadow catch up before it stops
    shadow.stop()
    assert live_workers == {"live"}, "only the live worker may answer; a shadow never delivers"
    assert p50_on <= 1.10 * p50_off

    report = subprocess.run([sys.executable, "-m", "fleet.cli", "shadow", "report", MODEL, "--candidate", int8],
                            cwd=ROOT, capture_output=True, text=True, timeout=60)
    print(report.stdout)
    assert report.returncode == 0, report.stderr
    assert "agreement" in report.stdout.lower() and int8 in report.stdout
    stats = {k.decode(): float(v) for k, v in (await redis.hgetall(shadow_stats_key(MODEL, int8))).items()}
    assert stats["compared"] >= BLOCK
    assert stats["cosine_sum"] / stats["compared"] > 0.98
