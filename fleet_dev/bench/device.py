"""`scripts/bench device`: one worker on a simulated device, to see the pipeline's own cost (issue 14).

The worker is a real `python -m workers.main` process with `FLEET_BACKEND=sim`: the registered
minilm-embed FP32 version's tokenizer and length grouping run for real, the device only sleeps
`a + b x rows` ms (models/backends/sim.py), so what limits throughput is the worker's
pipeline (Kafka, batching, tokenising, delivery), not this machine's CPU running a model. It
serves the model under a bench-only name (`minilm-embed-devbench`, the same registered bytes
symlinked into <home>/bench/models: its own topic and consumer group), exact cache off.

For each max batch (1, 32, 64, 256) on the `h200-minilm` preset:
- drain: a backlog is produced first (replies to a Redis waiter and a results topic, embeddings
  as raw float32 bytes, `--embedding-encoding floats` for float arrays), then the worker starts
  and drains it; req/s is counted between 10% and 90% of the replies;
- closed loop: 2 x max batch callers (at least 16) through FleetClient; req/s, p50/p99;
- open loop: Poisson arrivals at half the drained rate; p50/p99 from each scheduled send.
Each row: the device-only ceiling (rows/s the sim device alone allows at full batches),
efficiency (req/s / ceiling) and the worker's CPU per request (/proc/<pid>/stat utime + stime
over the window). Then the seed's §2.2 table, drained with the `a10-bert-base` preset at the
seed's batch sizes and delays, next to the seed's own QPS.

A benchmarking and capacity-planning tool: the sim backend never serves users (refused in production).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

from fleet_dev.bench.drain_window import DrainedBeforeFirstPoll, DrainWindow, Poll, Stall
from fleet_dev.bench.fleet_process import (CpuCounters, CpuSplit, GroupWatch, WorkerProcess, bench_alias, cpu_counters,
                                      process_cpu_s)
from fleet_dev.bench.plots import plot_beside
from fleet_dev.bench.load import PhaseSamples, TextCycle, closed_loop, open_loop
from fleet_dev.bench.stats import percentile, poisson_arrivals
from fleet_dev.bench.workload import support_queries
from fleet.tables import format_table
from common.settings import FleetSettings
from common.clients import new_consumer
from common.topics import ensure_topics, partitions_of
from gateway.client import FleetClient, RequestOptions
from gateway.settings import ClientSettings
from models.backends.sim import PRESETS, SimDevice
from models.registry import ModelRegistry
from schemas.names import reply_stream, requests_topic, result_key
from schemas.packing import F32LE, EmbeddingEncoding
from schemas.wire import ReplyTo

MODEL = "minilm-embed"
BENCH_MODEL = "minilm-embed-devbench"
RESULTS_TOPIC = "fleet.results.bench-device"
MAX_BATCHES = (1, 32, 64, 256)
PARTITIONS = 4
# The seed's §2.2 table on one A10: (max batch, max queue delay ms, QPS it measured).
SEED_ROWS = ((1, 0.0, 45.0), (32, 50.0, 580.0), (64, 100.0, 720.0))
BACKLOG_TIMEOUT_S = 600.0  # backlog requests must not expire while they wait
RESULT_TTL_S = 30
READY_TIMEOUT_S = 90.0
POLL_S = 0.05
STALL_S = 20.0  # no new reply for this long: the drain has failed (under RESULT_TTL_S: the stream outlives it)
UNLINK_CHUNK = 1_000


@dataclass(frozen=True)
class Backlog:
    stream: str  # the waiter's reply stream
    ids: list[str]


@dataclass(frozen=True)
class Sizes:
    drain_s: float  # a backlog of about this many seconds at the device's ceiling
    max_backlog: int
    warmup_s: float
    loop_s: float


QUICK = Sizes(drain_s=1.5, max_backlog=6_000, warmup_s=1.0, loop_s=3.0)
FULL = Sizes(drain_s=6.0, max_backlog=40_000, warmup_s=2.0, loop_s=10.0)


@dataclass(frozen=True)
class Row:
    preset: str
    max_batch: int
    mode: str
    req_per_s: float
    ceiling: float
    p50_ms: float = math.nan
    p99_ms: float = math.nan
    worker_cpu_ms: float = math.nan

    @property
    def efficiency(self) -> float:
        return self.req_per_s / self.ceiling

    def cells(self) -> list[str]:
        def num(value: float, digits: int = 0) -> str:
            return "-" if math.isnan(value) else f"{value:,.{digits}f}"

        return [self.preset, self.mode, str(self.max_batch), num(self.req_per_s), num(self.ceiling),
                num(self.efficiency, 2), num(self.p50_ms, 1), num(self.p99_ms, 1), num(self.worker_cpu_ms, 3)]


HEADERS = ("preset", "mode", "max batch", "req/s", "device ceiling", "efficiency", "p50 ms", "p99 ms",
           "worker CPU ms/req")


@dataclass
class Bench:
    settings: FleetSettings
    client: FleetClient
    registry_dir: Path
    texts: Sequence[str]
    sizes: Sizes
    logs: Path
    embedding_encoding: EmbeddingEncoding | None = F32LE  # what the backlog's pipeline asks for

    def worker_env(self, preset: str, max_batch: int, delay_ms: float) -> dict[str, str]:
        return {"FLEET_MODEL": BENCH_MODEL, "FLEET_MODEL_DIR": str(self.registry_dir), "FLEET_BACKEND": "sim",
                "FLEET_SIM_PRESET": preset, "FLEET_MAX_BATCH_SIZE": str(max_batch),
                "FLEET_MAX_QUEUE_DELAY_MS": f"{delay_ms:g}", "FLEET_BATCH_POLICY": "fixed" if delay_ms else "adaptive",
                "FLEET_EXACT_CACHE": "false", "FLEET_WORKER_ID": f"bench-device-{preset}-{max_batch}",
                "FLEET_SESSION_TIMEOUT_MS": "6000",
                # The bench writes tens of thousands of results a run: a short TTL keeps them from filling Redis.
                "FLEET_RESULT_TTL_S": str(RESULT_TTL_S)}

    async def skip_leftovers(self) -> None:
        """Commit the bench group past what earlier runs left unread (a drain stops at 90%), so each
        run drains its own backlog only: a slow preset would otherwise first chew through a fast one's."""
        consumer = new_consumer(self.settings, group_id=BENCH_MODEL, enable_auto_commit=False)
        await consumer.start()
        try:
            partitions = await partitions_of(self.settings, requests_topic(BENCH_MODEL))
            consumer.assign(partitions)
            await consumer.commit(dict(await consumer.end_offsets(partitions)))
        finally:
            await consumer.stop()

    async def produce_backlog(self, count: int, waiter: str | None = None) -> Backlog:
        """`count` requests on the bench topic, replies to the waiter's stream (a fresh one by default)
        and the results topic."""
        waiter = waiter or new_waiter()
        reply = ReplyTo(redis=waiter, topic=RESULTS_TOPIC)
        cycle = TextCycle(self.texts)
        options = RequestOptions(embedding_encoding=self.embedding_encoding)
        requests = [self.client.build_request(BENCH_MODEL, cycle.take(), timeout=BACKLOG_TIMEOUT_S, reply=reply,
                                              options=options) for _ in range(count)]
        producer = self.client.producer
        futures = [await producer.send(requests_topic(BENCH_MODEL), r.encode(), key=r.id.encode()) for r in requests]
        await asyncio.gather(*futures)
        return Backlog(reply_stream(waiter), [request.id for request in requests])

    async def forget(self, backlog: Backlog) -> None:
        """Unlink a run's results and replies once its workers have stopped: tens of thousands of
        results a run would otherwise fill the stack's Redis to maxmemory, and the next runs would
        measure Redis evicting on every write."""
        keys = [result_key(request_id) for request_id in backlog.ids]
        for start in range(0, len(keys), UNLINK_CHUNK):
            await self.client.redis.unlink(*keys[start:start + UNLINK_CHUNK])
        await self.client.redis.unlink(backlog.stream)

    async def drain(self, workers: Sequence[WorkerProcess], stream: str, count: int, preset: str,
                    max_batch: int) -> Row:
        """Replies on `stream` counted between 10% and 90% of the backlog, and the workers' CPU over the
        same window."""
        window, stall = DrainWindow(count), Stall(time.monotonic())
        while True:
            replies = int(await self.client.redis.xlen(stream))
            poll = Poll(time.monotonic(), replies, sum(process_cpu_s(worker.pid) for worker in workers))
            try:
                edges = window.see(poll)
            except DrainedBeforeFirstPoll as exc:
                raise SystemExit(f"{exc}: too small a backlog to time") from exc
            if edges is not None:
                opened, closed = edges
                served = closed.replies - opened.replies
                mode = "drain" if len(workers) == 1 else f"drain, {len(workers)} workers"
                return Row(preset, max_batch, mode, served / (closed.at - opened.at),
                           len(workers) * ceiling(preset, max_batch),
                           worker_cpu_ms=(closed.cpu_s - opened.cpu_s) * 1000 / served)
            if stall.for_s(poll) > STALL_S:
                raise SystemExit(f"the workers answered {stall.replies} of {count} requests and then nothing for "
                                 f"{STALL_S:g} s; Redis evicted {await self.evicted_keys()} keys so far (a full "
                                 f"Redis drops the reply stream); logs: {workers[0].log_file.parent}")
            await asyncio.sleep(POLL_S)

    async def evicted_keys(self) -> int:
        return int((await self.client.redis.info("stats"))["evicted_keys"])

    async def closed(self, worker: WorkerProcess, preset: str, max_batch: int) -> Row:
        edges: list[CpuCounters | None] = []
        samples = await closed_loop(self.client, BENCH_MODEL, TextCycle(self.texts), callers=max(2 * max_batch, 16),
                                    warmup_s=self.sizes.warmup_s, duration_s=self.sizes.loop_s,
                                    at_window_edges=lambda: edges.append(cpu_counters(worker.pid)))
        return loop_row(preset, max_batch, f"closed {max(2 * max_batch, 16)}", samples, edges)

    async def open(self, worker: WorkerProcess, preset: str, max_batch: int, rate: float) -> Row:
        schedule = poisson_arrivals(rate, self.sizes.loop_s, seed=max_batch)
        before = cpu_counters(worker.pid)
        samples = await open_loop(self.client, BENCH_MODEL, TextCycle(self.texts), schedule_s=schedule,
                                  duration_s=self.sizes.loop_s)
        return loop_row(preset, max_batch, f"open {rate:,.0f}/s", samples, [before, cpu_counters(worker.pid)])

    async def run_config(self, preset: str, max_batch: int, delay_ms: float, *, loops: bool) -> list[Row]:
        """Backlog first, then the worker: it starts with the whole backlog waiting (the seed's saturation)."""
        count = min(max(int(ceiling(preset, max_batch) * self.sizes.drain_s), 100), self.sizes.max_backlog)
        await self.skip_leftovers()
        backlog = await self.produce_backlog(count)
        log = self.logs / f"worker-{preset}-{max_batch}.log"
        with WorkerProcess(self.worker_env(preset, max_batch, delay_ms), log) as worker:
            await asyncio.to_thread(worker.wait_ready, READY_TIMEOUT_S)
            rows = [await self.drain([worker], backlog.stream, count, preset, max_batch)]
            if loops:
                rows.append(await self.closed(worker, preset, max_batch))
                rows.append(await self.open(worker, preset, max_batch, rows[0].req_per_s / 2))
        await self.forget(backlog)
        # The loops' replies, read already: the waiter's stream keeps them up to its cap otherwise.
        await self.client.redis.xtrim(self.client.waiter.stream, maxlen=0)
        print(format_table(HEADERS, [row.cells() for row in rows]), flush=True)
        return rows


    async def scaling(self, preset: str, max_batch: int, workers: int) -> Row:
        """`workers` workers (each its own simulated device) drain one backlog on the bench topic's partitions."""
        count = max(min(int(workers * ceiling(preset, max_batch) * self.sizes.drain_s), self.sizes.max_backlog), 100)
        await self.skip_leftovers()
        with ExitStack() as running:
            started = [running.enter_context(WorkerProcess(
                self.worker_env(preset, max_batch, 0.0) | {"FLEET_WORKER_ID": f"bench-device-scale-{index}"},
                self.logs / f"worker-scale-{workers}-{index}.log")) for index in range(workers)]
            for worker in started:
                await asyncio.to_thread(worker.wait_ready, READY_TIMEOUT_S)
            await self.settled_group(workers)  # the backlog comes once every worker owns its partitions
            # Watched from before its first request: four workers answer it as fast as it is produced.
            waiter = new_waiter()
            async with asyncio.TaskGroup() as tasks:  # a failed drain stops the producing, and the other way round
                draining = tasks.create_task(self.drain(started, reply_stream(waiter), count, preset, max_batch))
                backlog = await self.produce_backlog(count, waiter)
            row = draining.result()
        await self.forget(backlog)
        print(format_table(HEADERS, [row.cells()]), flush=True)
        return row


    async def settled_group(self, members: int) -> None:
        async with GroupWatch(self.settings, BENCH_MODEL, requests_topic(BENCH_MODEL)) as group:
            give_up = time.monotonic() + READY_TIMEOUT_S
            while len(await group.members()) < members:
                if time.monotonic() > give_up:
                    raise SystemExit(f"{members} workers did not all join group {BENCH_MODEL}")
                await asyncio.sleep(0.2)
        await asyncio.sleep(1.0)  # the last join's rebalance hands the partitions out


def new_waiter() -> str:
    return f"bench-device-{time.time_ns()}"


def ceiling(preset: str, max_batch: int) -> float:
    device: SimDevice = PRESETS[preset]
    return device.ceiling_rows_per_s(max_batch)


def loop_row(preset: str, max_batch: int, mode: str, samples: PhaseSamples,
             edges: Sequence[CpuCounters | None]) -> Row:
    split = None
    if len(edges) == 2 and edges[0] is not None and edges[1] is not None:
        split = CpuSplit.between(edges[0], edges[1], samples.completed)
    return Row(preset, max_batch, mode, samples.completed / samples.window_s, ceiling(preset, max_batch),
               percentile(samples.latencies_ms, 50), percentile(samples.latencies_ms, 99),
               split.worker_ms if split is not None else math.nan)


def seed_table(rows: Sequence[Row]) -> str:
    """The seed's QPS next to the a10-bert-base preset's drained req/s at the same batch sizes."""
    lines = []
    for (max_batch, delay_ms, seed_qps), row in zip(SEED_ROWS, rows, strict=True):
        lines.append([f"{max_batch}", f"{delay_ms:g}", f"{seed_qps:,.0f}", f"{row.req_per_s:,.0f}",
                      f"{row.req_per_s / seed_qps - 1:+.1%}", f"{row.ceiling:,.0f}", f"{row.efficiency:.2f}"])
    return format_table(("max batch", "delay ms", "seed QPS (A10)", "sim req/s", "vs seed", "device ceiling",
                         "efficiency"), lines)


async def main_async(args: argparse.Namespace) -> int:
    settings = FleetSettings()
    source = ModelRegistry(settings.registry_dir)
    alias_registry = ModelRegistry(settings.home / "bench" / "models")
    bench_alias(source, source.resolve(MODEL, precision="fp32"), alias_registry, BENCH_MODEL)
    await ensure_topics(settings, [requests_topic(BENCH_MODEL), RESULTS_TOPIC], PARTITIONS)
    sizes = QUICK if args.quick else FULL
    logs = settings.home / "bench" / f"device-{datetime.now():%Y%m%d-%H%M%S}"
    async with FleetClient(ClientSettings(default_timeout_s=60)) as client:
        encoding: EmbeddingEncoding | None = F32LE if args.embedding_encoding == "f32le" else None
        bench = Bench(settings, client, alias_registry.root, support_queries(2_000), sizes, logs, encoding)
        rows: list[Row] = []
        for max_batch in args.max_batch:
            rows += await bench.run_config("h200-minilm", max_batch, 0.0, loops=not args.drain_only)
        scaled = [await bench.scaling("h200-minilm", args.scale_batch, count) for count in args.scale_workers]
        seed_rows = [row for max_batch, delay_ms, _ in SEED_ROWS
                     for row in await bench.run_config("a10-bert-base", max_batch, delay_ms, loops=False)]
    print(f"\none worker, FLEET_BACKEND=sim, exact cache off, the drained backlog's embeddings as "
          f"{args.embedding_encoding}; worker logs in {logs}\n")
    print(format_table(HEADERS, [row.cells() for row in rows]))
    if scaled:
        print(f"\nScaling on this machine: 1..{max(args.scale_workers)} workers, max batch {args.scale_batch}, "
              f"{PARTITIONS} partitions, one backlog produced while they drain it (the producer shares the cores):\n")
        print(format_table(HEADERS, [row.cells() for row in scaled]))
    print("\nThe seed's §2.2 table (BERT-base, 128 tokens, one A10) with the a10-bert-base preset, backlog drained:\n")
    print(seed_table(seed_rows))
    plot_beside(write_rows(logs.with_suffix(".json"), rows + seed_rows, scaled, quick=args.quick))
    return 0


def write_rows(path: Path, rows: Sequence[Row], scaled: Sequence[Row], *, quick: bool) -> Path:
    """Every row as JSON, beside the run's worker logs (<home>/bench/device-<time>.json)."""
    meta = {"started": path.stem.removeprefix("device-"), "quick": quick,
            "caption": f"scripts/bench device{' --quick' if quick else ''}, {path.stem.removeprefix('device-')}"}
    path.write_text(json.dumps({"meta": meta, "rows": [asdict(row) for row in rows],
                                "scaling": [asdict(row) for row in scaled]}, indent=1) + "\n")
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench device", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short phases: the whole run in under 2 minutes")
    parser.add_argument("--max-batch", type=int, nargs="+", default=list(MAX_BATCHES), help="max batch sizes")
    parser.add_argument("--drain-only", action="store_true", help="skip the closed and open loops")
    parser.add_argument("--scale-workers", type=int, nargs="*", default=[1, 2, 4], metavar="N",
                        help="worker counts draining one backlog together (none: skip the scaling rows)")
    parser.add_argument("--scale-batch", type=int, default=256, help="max batch of the scaling rows")
    parser.add_argument("--embedding-encoding", choices=["f32le", "floats"], default="f32le",
                        help="what the backlog's pipeline asks for: raw float32 bytes (default) or float arrays")
    return asyncio.run(main_async(parser.parse_args(argv)))


if __name__ == "__main__":
    raise SystemExit(main())
