"""`scripts/bench lanes`: interactive calls through the gateway while a bulk backlog drains (issue 37).

Two workers serve a bench-only alias of minilm-embed (caches off, so every request costs the model);
a gateway takes interactive calls. Each mode runs three phases:

  alone        the bulk backlog (12,000 requests produced straight to Kafka) drains with nothing else
  interactive  the same backlog again, and while it drains, sync calls through the gateway at 4 a
               second, `priority` 9 and a 3 s deadline: how many are answered 200 in time, their
               p50/p99, and the backlog's drain rate against `alone`
  flood        the backlog again, and beside it an interactive backlog as large produced straight to
               the interactive lane, so the workers always have interactive records waiting: the
               share of batches bulk still gets while they wait (FLEET_BULK_MIN_SHARE), from the
               workers' metrics (lanes mode only: with lanes off there is one lane)

Modes: `lanes` (the default FLEET_LANES; the backlog on the bulk lane's topic) and `off`
(FLEET_LANES_ENABLED=false: the backlog and the calls share the first lane's topic, the fleet before
lanes). The table prints at the end, and a plot of interactive latency and bulk progress over time
is written beside the JSON (`<home>/bench/lanes.json`, `lanes.png`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import httpx

from common.auth_keys import create_key, revoke_key
from common.clients import redis_client
from common.settings import FleetSettings
from common.topics import ensure_topics
from fleet_dev.bench.fleet_process import GroupWatch, WorkerProcess, bench_alias
from fleet_dev.bench.gateway import Gateway
from fleet_dev.bench.stats import percentile
from fleet_dev.bench.workload import support_queries
from fleet.ports import free_port
from fleet.tables import format_table
from gateway.client import FleetClient
from gateway.main import run_loop
from gateway.settings import ClientSettings
from models.registry import ModelRegistry
from schemas.wire import ReplyTo, now_ms

MODEL = "minilm-embed"
BENCH_MODEL = "minilm-embed-lanebench"
TENANT = "bench-lanes"
HOST = "127.0.0.1"
PARTITIONS = 4
MODES = {"lanes": "true", "off": "false"}


@dataclass
class Phase:
    mode: str
    name: str
    backlog: int
    drain_s: float = float("nan")
    calls: list[tuple[float, int, float]] = field(default_factory=list)  # (sent s, status, latency ms)
    progress: list[tuple[float, int]] = field(default_factory=list)  # (s, records left)
    bulk_share: float | None = None

    @property
    def drain_per_s(self) -> float:
        return self.backlog / self.drain_s

    def in_time(self, deadline_ms: float) -> float:
        ok = [1 for _, status, ms in self.calls if status == 200 and ms <= deadline_ms]
        return len(ok) / len(self.calls) if self.calls else float("nan")

    def latency(self, q: float) -> float:
        return percentile([ms for _, status, ms in self.calls if status == 200], q) if self.calls else float("nan")


HEADERS = ("mode", "phase", "backlog", "drain req/s", "x alone", "calls", "200 in 3 s", "p50 ms", "p99 ms",
           "bulk share")


def cells(phase: Phase, alone: Phase | None, deadline_ms: float) -> list[str]:
    ratio = f"{phase.drain_per_s / alone.drain_per_s:.2f}" if alone is not None else "1.00"
    calls = len(phase.calls)
    return [phase.mode, phase.name, f"{phase.backlog:,}", f"{phase.drain_per_s:.1f}", ratio, str(calls) if calls else "-",
            f"{phase.in_time(deadline_ms):.1%}" if calls else "-", f"{phase.latency(50):.0f}" if calls else "-",
            f"{phase.latency(99):.0f}" if calls else "-",
            f"{phase.bulk_share:.1%}" if phase.bulk_share is not None else "-"]


class Bench:
    def __init__(self, args: argparse.Namespace, settings: FleetSettings, client: FleetClient, url: str,
                 headers: dict[str, str], metrics_ports: list[int]) -> None:
        self.args = args
        self.settings = settings
        self.client = client
        self.url = url
        self.headers = headers
        self.metrics_ports = metrics_ports
        self._texts = support_queries(2000)
        self._round = 0

    async def produce_backlog(self, topic: str, label: str = "batch job") -> None:
        """Distinct texts: no cache could answer them (and the caches are off)."""
        self._round += 1
        sends = []
        for i in range(self.args.backlog):
            text = f"{self._texts[i % len(self._texts)]} ({label} {self._round}, row {i})"
            request = self.client.build_request(BENCH_MODEL, text, timeout=3600, reply=ReplyTo())
            sends.append(await self.client.producer.send(topic, request.encode(), key=request.id.encode()))
        await asyncio.gather(*sends)

    async def drain(self, phase: Phase, watch: GroupWatch, started: float) -> None:
        while True:
            left = await watch.lag()
            phase.progress.append((time.monotonic() - started, left))
            if left == 0:
                phase.drain_s = time.monotonic() - started
                return
            await asyncio.sleep(0.5)

    async def call_at_rate(self, phase: Phase, started: float, draining: asyncio.Task[None]) -> None:
        """Open loop: a call every 1/rate s while the backlog drains, each its own deadline."""
        body = {"priority": 9, "timeout_ms": int(self.args.deadline_s * 1000)}
        async with httpx.AsyncClient(base_url=self.url, headers=self.headers,
                                     timeout=self.args.deadline_s + 5) as http:
            calls: list[asyncio.Task[None]] = []
            n = 0
            while not draining.done():
                n += 1
                calls.append(asyncio.create_task(self._call(http, phase, started, {**body, "text": f"urgent {n}: "
                                                                                   f"{self._texts[n % 500]}"})))
                await asyncio.sleep(1 / self.args.rate)
            await asyncio.gather(*calls)

    async def _call(self, http: httpx.AsyncClient, phase: Phase, started: float, body: dict[str, object]) -> None:
        sent = time.monotonic()
        try:
            status = (await http.post(f"/v1/models/{BENCH_MODEL}/infer", json=body)).status_code
        except httpx.HTTPError:
            status = 0
        phase.calls.append((sent - started, status, (time.monotonic() - sent) * 1000))

    def lane_batches(self) -> dict[str, float]:
        """fleet_lane_batches_total per lane, summed over the workers' metrics endpoints."""
        totals: dict[str, float] = {}
        pattern = re.compile(r'^fleet_lane_batches_total\{[^}]*lane="([^"]+)"[^}]*\} ([0-9.e+]+)$', re.M)
        for port in self.metrics_ports:
            text = httpx.get(f"http://{HOST}:{port}/metrics", timeout=5).text
            for lane, value in pattern.findall(text):
                totals[lane] = totals.get(lane, 0.0) + float(value)
        return totals

    async def phase(self, mode: str, name: str, topic: str, watch: GroupWatch) -> Phase:
        phase = Phase(mode, name, self.args.backlog)
        flooding = name == "flood"
        await self.produce_backlog(topic)
        top = self.settings.lane_plan.topics(BENCH_MODEL)[0]
        if flooding:
            await self.produce_backlog(top, label="interactive backlog")
        before = self.lane_batches()
        started = time.monotonic()
        draining = asyncio.create_task(self.drain(phase, watch, started))
        if name == "interactive":
            await self.call_at_rate(phase, started, draining)
        elif flooding:
            # The share is counted while interactive records wait: until the interactive backlog is gone.
            async with GroupWatch(self.settings, BENCH_MODEL, top) as interactive:
                while await interactive.lag() > 0 and not draining.done():
                    await asyncio.sleep(0.5)
            during = {lane: n - before.get(lane, 0) for lane, n in self.lane_batches().items()}
            total = sum(during.values())
            lower = sum(n for lane, n in during.items() if lane != self.settings.lane_plan.top.name)
            phase.bulk_share = lower / total if total else None
        await draining
        print(format_table(HEADERS, [cells(phase, None, self.args.deadline_s * 1000)]), flush=True)
        return phase


async def run_mode(args: argparse.Namespace, mode: str, settings: FleetSettings, alias: ModelRegistry,
                   logs: Path, headers: dict[str, str], client: FleetClient) -> list[Phase]:
    lanes = settings.lane_plan
    topic = lanes.topics(BENCH_MODEL)[-1] if mode == "lanes" else lanes.topics(BENCH_MODEL)[0]
    ports = [free_port() for _ in range(args.workers)]
    env = {"FLEET_MODEL": BENCH_MODEL, "FLEET_MODEL_DIR": str(alias.root), "FLEET_EXACT_CACHE": "false",
           "FLEET_SEMANTIC_CACHE": "false", "FLEET_SESSION_TIMEOUT_MS": "6000", "FLEET_RESULT_TTL_S": "120",
           "FLEET_LANES_ENABLED": MODES[mode], "FLEET_MAX_BATCH_SIZE": str(args.max_batch)}
    workers = [WorkerProcess({**env, "FLEET_WORKER_ID": f"lanes-{mode}-{i}", "FLEET_METRICS_PORT": str(port)},
                             logs / f"worker-{mode}-{i}.log") for i, port in enumerate(ports)]
    port = free_port()
    gateway = Gateway(1, "fast path", port, logs / f"gateway-{mode}.log", model=BENCH_MODEL,
                      env={"FLEET_LANES_ENABLED": MODES[mode]})
    phases: list[Phase] = []
    try:
        for worker in workers:
            worker.__enter__()
        for worker in workers:
            await asyncio.to_thread(worker.wait_ready, 120)
        await asyncio.to_thread(gateway.wait_ready)
        bench = Bench(args, settings, client, gateway.url, headers, ports)
        async with GroupWatch(settings, BENCH_MODEL, topic) as watch:
            for name in [n for n in args.phases if mode == "lanes" or n != "flood"]:  # off: one lane, no share
                phases.append(await bench.phase(mode, name, topic, watch))
    finally:
        gateway.stop()
        for worker in workers:
            worker.stop()
    return phases


def plot(path: Path, phases: Sequence[Phase], deadline_s: float) -> Path | None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    shown = [p for p in phases if p.name == "interactive"]
    if not shown:
        return None
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    for phase in shown:
        top.plot([s for s, _, _ in phase.calls], [ms if status == 200 else float("nan") for _, status, ms in phase.calls],
                 ".", label=f"{phase.mode}: interactive latency (200s)")
        bottom.plot([s for s, _ in phase.progress], [left for _, left in phase.progress], label=f"{phase.mode}: bulk left")
    top.axhline(deadline_s * 1000, color="red", linestyle="--", label="deadline")
    top.set_ylabel("ms")
    top.set_yscale("log")
    bottom.set_ylabel("bulk records left")
    bottom.set_xlabel("s since the backlog was produced")
    top.legend()
    bottom.legend()
    fig.suptitle("scripts/bench lanes: interactive calls at 4/s while a bulk backlog drains")
    out = path.with_suffix(".png")
    fig.savefig(out, dpi=110)
    return out


async def main_async(args: argparse.Namespace) -> int:
    settings = FleetSettings()
    source = ModelRegistry(settings.registry_dir)
    alias = ModelRegistry(settings.home / "bench" / "models")
    bench_alias(source, source.resolve(MODEL, precision="fp32"), alias, BENCH_MODEL)
    await ensure_topics(settings, [*settings.lane_plan.topics(BENCH_MODEL)], PARTITIONS)
    logs = settings.home / "bench" / f"lanes-{datetime.now():%Y%m%d-%H%M%S}"
    logs.mkdir(parents=True, exist_ok=True)
    redis = redis_client(settings)
    issued = await create_key(redis, TENANT, now_ms=now_ms())
    headers = {"Authorization": f"Bearer {issued.key}"}
    phases: list[Phase] = []
    try:
        async with FleetClient(ClientSettings()) as client:
            for mode in args.modes:
                phases += await run_mode(args, mode, settings, alias, logs, headers, client)
    finally:
        await revoke_key(redis, issued.record.key_id, now_ms=now_ms())
        await redis.aclose()
    alone = {p.mode: p for p in phases if p.name == "alone"}
    print(f"\n{args.workers} workers, max batch {args.max_batch}; calls at {args.rate}/s with priority 9 and a "
          f"{args.deadline_s:g} s deadline; logs in {logs}\n")
    print(format_table(HEADERS, [cells(p, alone.get(p.mode), args.deadline_s * 1000) for p in phases]))
    out = settings.home / "bench" / "lanes.json"
    out.write_text(json.dumps({"meta": {"started": f"{datetime.now():%Y-%m-%d %H:%M}", "args": vars(args)},
                               "phases": [{"mode": p.mode, "phase": p.name, "drain_s": p.drain_s, "calls": p.calls,
                                           "progress": p.progress, "bulk_share": p.bulk_share} for p in phases]}))
    drawn = plot(out, phases, args.deadline_s)
    print(f"\n{out}" + (f"\n{drawn}" if drawn else ""))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench lanes", description=__doc__.splitlines()[0])
    parser.add_argument("--backlog", type=int, default=12_000, help="bulk requests produced straight to Kafka")
    parser.add_argument("--rate", type=float, default=4.0, help="interactive calls a second")
    parser.add_argument("--deadline-s", type=float, default=3.0, help="each interactive call's deadline")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--max-batch", type=int, default=32)
    parser.add_argument("--modes", nargs="+", choices=list(MODES), default=list(MODES))
    parser.add_argument("--phases", nargs="+", choices=["alone", "interactive", "flood"],
                        default=["alone", "interactive", "flood"])
    return run_loop(main_async(parser.parse_args(argv)))


if __name__ == "__main__":
    raise SystemExit(main())
