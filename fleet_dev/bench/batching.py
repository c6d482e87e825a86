"""`scripts/bench`: the batching benchmark (issue 3, seed §2.2).

For each batching configuration (and precision) one worker runs as a real process and the
bench drives it end to end (client -> Kafka -> worker -> Redis reply) with a seeded
customer-support workload:

- saturation: C closed-loop callers (C = max((B + 1) x max_batch, 16), B the batches the worker
  hands its model at once) -> req/s, p50/p95/p99;
- 50% load: Poisson arrivals at half that rate -> p50/p95/p99 from each scheduled send;
- raw: the same model in-process at the same batch size, no worker running -> sentences/s;
- efficiency = saturation req/s / raw sentences/s.

The worker serves the model under a bench-only name (`minilm-embed-bench`: the same
registered version, symlinked into <home>/bench/models, so its own request topic and
consumer group): workers and tests on `fleet.requests.minilm-embed` never share the bench's
partitions. Before each row's measurement, the group's backlog is drained.

Prints one row per configuration, the issue's targets under the table, where the CPU went,
and writes the same data as JSON (default <home>/bench/batching-<timestamp>.json).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import platform
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import onnxruntime
from tokenizers import Tokenizer

from fleet_dev.arguments import script_parser
from fleet_dev.bench.fleet_process import CpuCounters, CpuSplit, GroupWatch, WorkerProcess, bench_alias, cpu_counters
from fleet_dev.bench.load import TextCycle, closed_loop, open_loop
from fleet_dev.bench.raw import LengthAwareComparison, RawThroughput, compare_length_aware, length_aware_available, \
    raw_throughput, worker_settings
from fleet_dev.bench.plots import plot_beside
from fleet_dev.bench.report import BenchRow, PhaseSummary, check_targets, format_cpu_split, format_targets, \
    results_table, write_json
from fleet_dev.bench.stats import percentile, poisson_arrivals
from fleet_dev.bench.workload import format_histogram, length_histogram, support_queries, word_count
from fleet.exits import Exit
from gateway.client import FleetClient
from gateway.settings import ClientSettings
from schemas.names import consumer_group, requests_topic
from models.registry import ModelManifest, ModelNotFound, ModelRegistry
from workers.compute.parallelism import batches_in_flight

MODEL = "minilm-embed"
LENGTH_AWARE_BATCH = 32
WORKER_READY_TIMEOUT_S = 90.0
DRAIN_TIMEOUT_S = 120.0
GROUP_QUIET_TIMEOUT_S = 30.0
NOISY_NEIGHBOUR_SHARE = 0.35  # flag a row when other processes used more of the busy CPU
CLIENT_LAG_NOTE_MS = 20.0  # flag an open-loop phase whose sends left this much behind schedule (p99)
RAW_SPREAD_NOTE = 1.3  # flag a raw figure whose fastest repeat beat its slowest by more than this factor


@dataclass(frozen=True)
class BatchingConfig:
    name: str
    max_batch: int
    max_queue_delay_ms: float
    policy: str

    def env(self) -> dict[str, str]:
        return {"FLEET_MAX_BATCH_SIZE": str(self.max_batch), "FLEET_MAX_QUEUE_DELAY_MS": f"{self.max_queue_delay_ms:g}",
                "FLEET_BATCH_POLICY": self.policy}

    def callers(self, fixed: int | None, minimum: int, batches_in_model: int) -> int:
        """Enough closed-loop callers for a full batch in the model at each place it takes one, and
        one more gathering: fewer, and the model waits for the callers, not the other way round."""
        return fixed if fixed is not None else max((batches_in_model + 1) * self.max_batch, minimum)


def batches_in_model() -> int:
    """Batches the bench's CPU worker hands its model at once (FLEET_MODEL_BATCHES_IN_FLIGHT counts)."""
    return batches_in_flight("cpu", worker_settings({}).model_batches_in_flight)


CONFIGS = (
    BatchingConfig("none", 1, 0, "fixed"),
    BatchingConfig("8/10ms", 8, 10, "fixed"),
    BatchingConfig("32/50ms", 32, 50, "fixed"),
    BatchingConfig("64/100ms", 64, 100, "fixed"),
    BatchingConfig("adaptive", 32, 20, "adaptive"),
)


@dataclass(frozen=True)
class Durations:
    warmup_s: float
    saturation_s: float
    half_load_s: float
    raw_sentences: int
    raw_repeats: int


QUICK = Durations(warmup_s=1.5, saturation_s=5, half_load_s=5, raw_sentences=192, raw_repeats=3)
FULL = Durations(warmup_s=3, saturation_s=15, half_load_s=15, raw_sentences=768, raw_repeats=3)


class Progress:
    """One line per phase, stamped with seconds since the bench started."""

    def __init__(self) -> None:
        self.started = time.perf_counter()

    @property
    def elapsed_s(self) -> float:
        return time.perf_counter() - self.started

    def say(self, message: str) -> None:
        print(f"[{self.elapsed_s:6.1f}s] {message}", flush=True)


@dataclass
class Bench:
    args: argparse.Namespace
    durations: Durations
    settings: ClientSettings
    manifests: dict[str, ModelManifest]  # by precision, as registered
    aliases: dict[str, ModelManifest]  # the same versions under the bench-only model name
    alias_registry: ModelRegistry
    texts: list[str]
    progress: Progress
    stamp: str

    @property
    def model(self) -> str:
        """The bench-only model name: its own request topic and consumer group."""
        return next(iter(self.aliases.values())).name

    def worker_env(self, config: BatchingConfig, precision: str) -> dict[str, str]:
        return {**config.env(), "FLEET_MODEL": self.model, "FLEET_MODEL_DIR": str(self.alias_registry.root.resolve()),
                "FLEET_MODEL_VERSION": self.aliases[precision].id, "FLEET_PRECISION": precision,
                "FLEET_INTRA_OP_THREADS": str(self.args.threads),
                # Batching is measured on computed requests: the workload repeats queries, and
                # cache hits would inflate it (`scripts/bench cache` measures the caches).
                "FLEET_EXACT_CACHE": "false",
                # Tens of thousands of results a run must not fill the stack's Redis for the next hour.
                "FLEET_RESULT_TTL_S": "120"}

    async def raw(self, config: BatchingConfig, precision: str, cache: dict[tuple[str, int], RawThroughput]) -> RawThroughput:
        key = (precision, config.max_batch)
        if key not in cache:
            cache[key] = await asyncio.to_thread(raw_throughput, self.worker_env(config, precision),
                                                 self.texts[:self.durations.raw_sentences], config.max_batch,
                                                 self.durations.raw_repeats)
            rates = ", ".join(f"{rate:.0f}" for rate in cache[key].repeats_per_s)
            self.progress.say(f"{precision} {config.name}: raw in-process at batch {config.max_batch}: "
                              f"{cache[key].sentences_per_s:.0f} sentences/s (repeats {rates}; "
                              f"{cache[key].cpu_ms_per_sentence:.2f} CPU ms/sentence)")
        return cache[key]

    async def settle(self, client: FleetClient, watch: GroupWatch, worker_id: str) -> None:
        """One request through the fresh worker (it has joined and got partitions), then wait
        until the group has no backlog, so stale requests never share the measured window."""
        await client.infer(self.model, "warm-up probe", timeout=60)
        give_up = time.monotonic() + DRAIN_TIMEOUT_S
        reported = False
        while (lag := await watch.lag()) > 0:
            if time.monotonic() > give_up:
                raise SystemExit(f"{watch.topic} still has {lag} uncommitted requests after {DRAIN_TIMEOUT_S:g} s")
            if not reported:
                self.progress.say(f"draining {lag} earlier requests from {watch.topic} through {worker_id}")
                reported = True
            await asyncio.sleep(0.25)
        others = [member for member in await watch.members() if member != worker_id]
        if others:
            raise SystemExit(f"group {watch.group} has other members {others}: another worker or test is consuming "
                             f"{watch.topic}; stop it (or wait) so rows measure one worker")

    async def wait_group_quiet(self, watch: GroupWatch) -> None:
        give_up = time.monotonic() + GROUP_QUIET_TIMEOUT_S
        while members := await watch.members():
            if time.monotonic() > give_up:
                raise SystemExit(f"group {watch.group} still has members {members} after {GROUP_QUIET_TIMEOUT_S:g} s:"
                                 f" another worker or test is consuming {watch.topic}; the bench needs it to itself")
            await asyncio.sleep(0.5)

    async def row(self, client: FleetClient, watch: GroupWatch, config: BatchingConfig, precision: str,
                  raw: RawThroughput) -> BenchRow:
        label = f"{precision} {config.name}"
        callers = config.callers(self.args.concurrency, self.args.min_concurrency, batches_in_model())
        worker_id = f"bench-{self.stamp}-{precision}-{config.name.replace('/', '-')}"
        await self.wait_group_quiet(watch)
        log_file = self.settings.home / "bench" / "logs" / f"{worker_id}.log"
        with WorkerProcess({**self.worker_env(config, precision), "FLEET_WORKER_ID": worker_id}, log_file) as worker:
            await asyncio.to_thread(worker.wait_ready, WORKER_READY_TIMEOUT_S)
            await self.settle(client, watch, worker_id)
            self.progress.say(f"{label}: worker {worker_id} ready and the topic drained")
            texts = TextCycle(self.texts)
            edges: list[CpuCounters | None] = []
            samples = await closed_loop(client, self.model, texts, callers=callers,
                                        warmup_s=self.durations.warmup_s, duration_s=self.durations.saturation_s,
                                        at_window_edges=lambda: edges.append(cpu_counters(worker.pid)))
            saturated = PhaseSummary.of(samples)
            before, after = edges if len(edges) == 2 else (None, None)
            cpu = CpuSplit.between(before, after, samples.completed) if before and after else None
            notes = _problems("saturation", saturated, worker_id, cpu)
            self.progress.say(f"{label}: saturation, {callers} callers: {saturated.requests_per_s:.0f} req/s, p99 "
                              f"{saturated.latency.p99_ms:.0f} ms, mean batch {saturated.mean_batch:.1f}"
                              f"{_cpu_note(cpu)}{_bracketed(notes)}")
            target = saturated.requests_per_s / 2
            seed = self.args.seed + sum(map(ord, label))
            schedule = poisson_arrivals(target, self.durations.half_load_s, seed) if target > 0 else []
            half = PhaseSummary.of(await open_loop(client, self.model, texts, schedule_s=schedule,
                                                   duration_s=self.durations.half_load_s))
            half_notes = _problems("50% load", half, worker_id, None)
            self.progress.say(f"{label}: 50% load at {target:.0f} req/s: {half.requests_per_s:.0f} req/s, p99 "
                              f"{half.latency.p99_ms:.0f} ms, mean batch {half.mean_batch:.1f}{_bracketed(half_notes)}")
        self.progress.say(f"{label}: worker stopped (exit {worker.stop()})")
        return BenchRow(config=config.name, precision=precision, version=self.manifests[precision].id,
                        policy=config.policy, max_batch=config.max_batch, max_queue_delay_ms=config.max_queue_delay_ms,
                        callers=callers, intra_op_threads=self.args.threads, saturation=saturated,
                        half_load_target_per_s=target, half_load=half, raw=raw, saturation_cpu=cpu,
                        notes=tuple(notes + half_notes + _raw_problems(raw)))


def _cpu_note(cpu: CpuSplit | None) -> str:
    if cpu is None:
        return ""
    return (f"; CPU ms/req: worker {cpu.worker_ms:.2f}, bench {cpu.bench_client_ms:.2f}, other {cpu.other_ms:.2f} "
            f"({cpu.machine_busy:.0%} busy)")


def _problems(phase: str, summary: PhaseSummary, worker_id: str, cpu: CpuSplit | None) -> list[str]:
    """What makes a phase's numbers suspect, in words."""
    notes = []
    if summary.errors:
        notes.append(f"{phase}: errors {summary.errors}")
    if set(summary.workers) - {worker_id}:
        notes.append(f"{phase}: answered by {summary.workers}")
    if set(summary.cache_tiers) - {"miss"}:
        notes.append(f"{phase}: cache tiers {summary.cache_tiers}")
    if summary.send_lag_p99_ms > CLIENT_LAG_NOTE_MS:
        notes.append(f"{phase}: the client fell behind its schedule (p99 {summary.send_lag_p99_ms:.0f} ms)")
    if cpu is not None and cpu.other_share > NOISY_NEIGHBOUR_SHARE:
        notes.append(f"{phase}: other processes used {cpu.other_share:.0%} of the busy CPU (noisy neighbours?)")
    return notes


def _raw_problems(raw: RawThroughput) -> list[str]:
    slowest, fastest = min(raw.repeats_per_s), max(raw.repeats_per_s)
    if slowest > 0 and fastest / slowest > RAW_SPREAD_NOTE:
        rates = ", ".join(f"{rate:.0f}" for rate in raw.repeats_per_s)
        return [f"raw: repeats disagree ({rates} sentences/s; the median is used)"]
    return []


def _bracketed(notes: list[str]) -> str:
    return f"  [{'; '.join(note.split(': ', 1)[1] for note in notes)}]" if notes else ""


def describe_workload(texts: Sequence[str], tokenizer_file: Path) -> dict[str, Any]:
    """Token lengths as the model sees them ([CLS] and [SEP] included, no padding or truncation)."""
    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    tokens = [len(encoding.ids) for encoding in tokenizer.encode_batch(list(texts))]
    words = [word_count(text) for text in texts]
    bins = length_histogram(tokens)
    print(f"workload: {len(texts)} queries, {len(set(texts)) / len(texts):.0%} distinct; words p50 "
          f"{percentile(words, 50):.0f} / p90 {percentile(words, 90):.0f} / max {max(words)}; tokens p50 "
          f"{percentile(tokens, 50):.0f} / p90 {percentile(tokens, 90):.0f} / p99 {percentile(tokens, 99):.0f} / "
          f"max {max(tokens)}")
    print(format_histogram(bins))
    return {"queries": len(texts), "distinct": len(set(texts)),
            "token_percentiles": {f"p{q}": percentile(tokens, q) for q in (50, 90, 99)}, "max_tokens": max(tokens),
            "word_percentiles": {f"p{q}": percentile(words, q) for q in (50, 90, 99)}, "max_words": max(words),
            "token_histogram": [{"tokens": b.label, "count": b.count} for b in bins]}


async def run(args: argparse.Namespace) -> int:
    durations = QUICK if args.quick else FULL
    durations = Durations(args.warmup or durations.warmup_s, args.duration or durations.saturation_s,
                          args.duration or durations.half_load_s, durations.raw_sentences, durations.raw_repeats)
    precisions = args.precision.split(",") if args.precision else (["fp32"] if args.quick else ["fp32", "int8"])
    configs = [config for config in CONFIGS if not args.configs or config.name in args.configs.split(",")]
    settings = ClientSettings()
    registry = ModelRegistry(settings.registry_dir)
    try:
        manifests = {precision: registry.resolve(args.model, None, precision) for precision in precisions}
    except ModelNotFound as missing:
        raise SystemExit(f"{missing}; build the models with scripts/build-models") from None
    progress = Progress()
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    texts = support_queries(args.workload_size, args.seed)
    first = manifests[precisions[0]]
    workload = {"seed": args.seed, **describe_workload(texts, registry.path_of(first, first.tokenizer_file))}
    alias_registry = ModelRegistry(settings.home / "bench" / "models")
    aliases = {precision: bench_alias(registry, manifest, alias_registry, f"{args.model}-bench")
               for precision, manifest in manifests.items()}
    bench = Bench(args, durations, settings, manifests, aliases, alias_registry, texts, progress, stamp)
    print(f"{len(configs)} configurations x {precisions}, threads per batch {args.threads or 'the worker default'}, "
          f"{batches_in_model()} batches in the model at once, {os.cpu_count()} "
          f"CPUs; phases: {durations.warmup_s:g} s warm-up + {durations.saturation_s:g} s saturation, "
          f"{durations.half_load_s:g} s at 50% load; served as {bench.model} on {requests_topic(bench.model)}",
          flush=True)
    length_aware: LengthAwareComparison | str = "not available in this build"
    if length_aware_available():
        length_aware = await asyncio.to_thread(compare_length_aware, registry, first,
                                               texts[:durations.raw_sentences], batch_size=LENGTH_AWARE_BATCH,
                                               intra_op_threads=args.threads, repeats=durations.raw_repeats)
        progress.say(f"length-aware at batch {LENGTH_AWARE_BATCH}: {length_aware.speedup:.2f}x vs unsorted")
    rows: list[BenchRow] = []
    raw_cache: dict[tuple[str, int], RawThroughput] = {}
    async with FleetClient(settings) as client, GroupWatch(
            settings, consumer_group(bench.model), requests_topic(bench.model)) as watch:
        for precision in precisions:
            for config in configs:
                raw = await bench.raw(config, precision, raw_cache)
                rows.append(await bench.row(client, watch, config, precision, raw))
    checks = check_targets(rows)
    print()
    print(results_table(rows))
    for row in rows:
        for note in row.notes:
            print(f"  * {row.config} {row.precision}: {note}")
    print("\n" + format_cpu_split(rows))
    print()
    print(format_targets(checks, length_aware))
    json_path: Path = args.json or settings.home / "bench" / f"batching-{stamp}.json"
    meta = {"started": stamp, "wall_s": progress.elapsed_s, "quick": args.quick, "precisions": precisions,
            "threads": args.threads, "cpus": os.cpu_count(), "python": platform.python_version(),
            "onnxruntime": onnxruntime.__version__, "durations": asdict(durations), "model": args.model,
            "versions": {precision: manifest.id for precision, manifest in manifests.items()},
            "served_as": {precision: alias.id for precision, alias in aliases.items()}}
    write_json(json_path, meta=meta, workload=workload, rows=rows, checks=checks, length_aware=length_aware)
    plot_beside(json_path)
    print(f"\n{len(rows)} rows in {progress.elapsed_s:.0f} s; JSON: {json_path}")
    failed = sum(sum(row.saturation.errors.values()) + sum(row.half_load.errors.values()) for row in rows)
    return Exit.FAILED if failed or any(math.isnan(row.saturation.requests_per_s) for row in rows) else Exit.OK


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = script_parser("bench", __doc__)
    parser.add_argument("--quick", action="store_true", help="short phases, fp32 only (under 2 minutes)")
    parser.add_argument("--precision", help="comma-separated: fp32,int8 (default both; fp32 with --quick)")
    parser.add_argument("--threads", type=int, default=0, help="FLEET_INTRA_OP_THREADS; 0: the worker's "
                        "default (the cores shared out among the batches in flight)")
    parser.add_argument("--configs", help=f"comma-separated subset of {', '.join(c.name for c in CONFIGS)}")
    parser.add_argument("--concurrency", type=int, help="closed-loop callers for every row (default max((batches in "
                        "the model + 1) x batch, --min-concurrency))")
    parser.add_argument("--min-concurrency", type=int, default=16)
    parser.add_argument("--duration", type=float, help="seconds of each measured phase")
    parser.add_argument("--warmup", type=float, help="seconds of closed-loop warm-up before measuring")
    parser.add_argument("--workload-size", type=int, default=20_000, help="distinct-ish queries to cycle through")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--model", default=MODEL)
    parser.add_argument("--json", type=Path, help="where to write the results (default <home>/bench/batching-<time>.json)")
    args = parser.parse_args(argv)
    if args.configs and (unknown := set(args.configs.split(",")) - {c.name for c in CONFIGS}):
        parser.error(f"unknown configurations {sorted(unknown)}")
    if args.precision and (unknown := set(args.precision.split(",")) - {"fp32", "int8"}):
        parser.error(f"unknown precisions {sorted(unknown)}")
    return args


def main(argv: list[str] | None = None) -> int:
    return asyncio.run(run(parse_args(argv)))


if __name__ == "__main__":
    raise SystemExit(main())
