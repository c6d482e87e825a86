"""`scripts/bench tasks`: does batching still pay for the newer tasks?

For a reranker (`bench-rerank`: MiniLM-sized cross-encoder, 8 passages a request) and a tensor
model (`bench-cnn`: ResNet-18 on 3 x 32 x 32 images, one image a request), made on the spot by
fleet_dev/bench/task_models.py, and for max batch 1 and 32: one worker process serves the model and
closed-loop callers drive it end to end (client -> Kafka -> worker -> Redis reply) -> req/s and
p50; then the same backend in-process, fed the same requests in batches of that size, as many
at once as the worker runs -> raw req/s. Efficiency = fleet req/s / raw req/s; "x b1" is a
row's req/s over its model's at max batch 1.

The fleet's req/s is callers / mean latency (Little's law, `closed_loop_rate`), not the replies
counted in the window: at max batch 32 replies come 32 at a time, a batch every second or two.

The machine is shared, and neighbours' load moves req/s by tens of percent within a minute; CPU
milliseconds a request move far less. So each row also says where the fleet's CPU went (worker,
bench client, Kafka and Redis of the local stack) and "CPU eff.": the model's own CPU a request
(in-process) over all of that. `--rounds N` measures every row N times, interleaved, and prints
the medians.

Prints one row per (model, max batch) and writes them as JSON (<home>/bench/tasks-<time>.json).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from common.settings import FleetSettings
from fleet_dev.arguments import script_parser
from fleet_dev.bench.fleet_process import WorkerProcess, cpu_counters, process_cpu_s
from fleet_dev.bench.load import TextCycle, closed_loop
from fleet_dev.bench.raw import RawThroughput, measure, worker_settings
from fleet_dev.bench.stats import median, percentile
from fleet_dev.bench.task_models import IMAGE_SHAPE, RERANK_MODEL, bench_models
from fleet_dev.bench.workload import support_queries
from gateway.client import FleetClient
from gateway.settings import ClientSettings
from models.loading import ModelLoader
from models.registry import ModelRegistry
from schemas.task_inputs import RerankInput, TensorInput
from workers.compute.parallelism import batches_in_flight

PASSAGES = 8
BATCH_SIZES = (1, 32)
READY_TIMEOUT_S = 120.0
RAW_BATCHES_PER_SLOT = 4  # the raw passes hold at least this many batches per batch in flight
STACK_PROCESSES = ("kafka", "redis")  # scripts/stack writes their pids to <home>/stack/run/<name>.pid


@dataclass(frozen=True)
class TaskRow:
    model: str
    task: str
    max_batch: int
    fleet_per_s: float
    p50_ms: float
    mean_batch: float
    errors: int
    raw_per_s: float
    worker_cpu_ms: float  # CPU a request in the fleet's window: the worker process's
    client_cpu_ms: float  # the bench process's (client, closed loop)
    stack_cpu_ms: float  # Kafka's and Redis's of the local stack; NaN when their pids are not known
    raw_cpu_ms: float  # the model in-process
    fleet_vs_batch_1: float = 1.0  # this row's fleet req/s over its model's at max batch 1
    raw_vs_batch_1: float = 1.0

    @property
    def efficiency(self) -> float:
        return self.fleet_per_s / self.raw_per_s if self.raw_per_s else float("nan")

    @property
    def cpu_efficiency(self) -> float:
        """The model's CPU a request over the fleet's (worker + client + Kafka + Redis)."""
        fleet = self.worker_cpu_ms + self.client_cpu_ms + self.stack_cpu_ms
        return self.raw_cpu_ms / fleet if fleet > 0 else float("nan")

    @classmethod
    def median_of(cls, rounds: Sequence[TaskRow]) -> TaskRow:
        """Each measured field's median over the rounds (errors: their sum)."""
        measured = {f.name: median([getattr(row, f.name) for row in rounds]) for f in fields(cls)
                    if f.type == "float" and not f.name.endswith("_vs_batch_1")}
        return replace(rounds[0], **measured, errors=sum(row.errors for row in rounds))

    def against(self, batch_1: TaskRow) -> TaskRow:
        return replace(self, fleet_vs_batch_1=self.fleet_per_s / batch_1.fleet_per_s if batch_1.fleet_per_s else float("nan"),
                       raw_vs_batch_1=self.raw_per_s / batch_1.raw_per_s if batch_1.raw_per_s else float("nan"))


def workload(model: str, count: int) -> tuple[list[dict[str, Any]], list[Any]]:
    """(request inputs for the client, the same inputs as the backend takes them)."""
    if model == RERANK_MODEL:
        texts = support_queries(count * (PASSAGES + 1), seed=23)
        inputs = [{"query": texts[i * (PASSAGES + 1)], "passages": texts[i * (PASSAGES + 1) + 1:(i + 1) * (PASSAGES + 1)]}
                  for i in range(count)]
        return inputs, [RerankInput(item["query"], tuple(item["passages"])) for item in inputs]
    rows = np.random.default_rng(23).normal(size=(count, 1, *IMAGE_SHAPE)).astype(np.float32)
    return [{"x": row} for row in rows], [TensorInput({"x": row}, 1) for row in rows]


def worker_env(registry: ModelRegistry, model: str, max_batch: int, threads: int) -> dict[str, str]:
    return {"FLEET_MODEL": model, "FLEET_MODEL_DIR": str(registry.root.resolve()), "FLEET_MAX_BATCH_SIZE": str(max_batch),
            "FLEET_MAX_QUEUE_DELAY_MS": "5", "FLEET_EXACT_CACHE": "false", "FLEET_RESULT_TTL_S": "120",
            "FLEET_INTRA_OP_THREADS": str(threads), "FLEET_WORKER_ID": f"bench-{model}-{max_batch}"}


def closed_loop_rate(callers: int, latencies_ms: Sequence[float]) -> float:
    """Requests a second of `callers` back-to-back callers, by Little's law: callers / mean latency.

    At max batch 32 replies come 32 at once, one or two batches a second. Counting the replies
    inside a window moves by a whole batch at each edge: in one 50 s run of the reranker (9.6 req/s
    over its last 40 s), 8 s windows counted 8 to 16 req/s, and counting from a reply instant to a
    reply instant 7.9 to 12.6; callers / mean latency of the same windows' replies gave 9.3 to 10.5."""
    return callers * 1000 / float(np.mean(latencies_ms)) if len(latencies_ms) else 0.0


def stack_cpu_s(home: Path) -> float:
    """CPU seconds Kafka and Redis of the local stack have used; NaN when a pid is not there to read."""
    try:
        return sum(process_cpu_s(int((home / "stack" / "run" / f"{name}.pid").read_text())) for name in STACK_PROCESSES)
    except (OSError, ValueError, IndexError):
        return float("nan")


@dataclass(frozen=True)
class FleetPhase:
    per_s: float
    p50_ms: float
    mean_batch: float
    errors: int
    worker_cpu_ms: float
    client_cpu_ms: float
    stack_cpu_ms: float


async def fleet_phase(client: FleetClient, env: dict[str, str], requests: list[dict[str, Any]], args: argparse.Namespace,
                      settings: FleetSettings) -> FleetPhase:
    max_batch = int(env["FLEET_MAX_BATCH_SIZE"])
    at_once = batches_in_flight("cpu", worker_settings(env).model_batches_in_flight)
    log_file = settings.home / "bench" / f"tasks-{env['FLEET_MODEL']}-{max_batch}.log"
    callers, edges = max((at_once + 1) * max_batch, 8), []

    def at_edge() -> None:
        edges.append((time.perf_counter(), cpu_counters(worker.pid), stack_cpu_s(settings.home)))

    with WorkerProcess(env, log_file) as worker:
        await asyncio.to_thread(worker.wait_ready, READY_TIMEOUT_S)
        samples = await closed_loop(client, env["FLEET_MODEL"], TextCycle(requests),  # type: ignore[arg-type]
                                    callers=callers, warmup_s=args.warmup,
                                    duration_s=args.duration, at_window_edges=at_edge)
    (start, before, stack_before), (end, after, stack_after) = edges
    rate = closed_loop_rate(callers, samples.latencies_ms)
    # CPU over the window's requests at that rate: the replies inside it come in bursts too.
    per_request = 1000 / (rate * (end - start)) if rate > 0 else float("nan")
    worker_ms, client_ms = ((after.worker_s - before.worker_s) * per_request, (after.bench_s - before.bench_s) * per_request) \
        if before and after else (float("nan"), float("nan"))
    return FleetPhase(rate,
                      percentile(samples.latencies_ms, 50) if samples.latencies_ms else float("nan"),
                      float(np.mean(samples.batch_sizes)) if samples.batch_sizes else 0.0, sum(samples.errors.values()),
                      worker_ms, client_ms, (stack_after - stack_before) * per_request)


def raw_phase(env: dict[str, str], payloads: list[Any], repeats: int) -> RawThroughput:
    settings = worker_settings(env)
    backend = ModelLoader(settings.runtime()).load()
    try:
        at_once = batches_in_flight(backend.device, settings.model_batches_in_flight)
        # Enough batches a pass that the last ones' uneven ends (one slot idle) weigh little.
        enough = RAW_BATCHES_PER_SLOT * at_once * settings.max_batch_size
        payloads = [payloads[i % len(payloads)] for i in range(max(len(payloads), enough))]
        return measure(backend.infer, payloads, settings.max_batch_size, repeats, at_once)
    finally:
        del backend
        gc.collect()


async def measure_row(client: FleetClient, registry: ModelRegistry, model: str, task: str, max_batch: int,
                      work: tuple[list[dict[str, Any]], list[Any]], args: argparse.Namespace) -> TaskRow:
    env = worker_env(registry, model, max_batch, args.threads)
    fleet = await fleet_phase(client, env, work[0], args, FleetSettings())
    raw = await asyncio.to_thread(raw_phase, env, work[1], args.repeats)
    return TaskRow(model, task, max_batch, fleet.per_s, fleet.p50_ms, fleet.mean_batch, fleet.errors,
                   raw.sentences_per_s, fleet.worker_cpu_ms, fleet.client_cpu_ms, fleet.stack_cpu_ms,
                   raw.cpu_ms_per_sentence)


async def run(args: argparse.Namespace) -> tuple[list[TaskRow], list[TaskRow]]:
    """(each round's rows, the rows of medians), one row per (model, max batch)."""
    settings = FleetSettings()
    bench_registry = ModelRegistry(settings.home / "bench" / "task-models")
    manifests = [m for m in bench_models(ModelRegistry(settings.registry_dir), bench_registry) if m.task in args.tasks]
    measured: list[TaskRow] = []
    async with FleetClient(ClientSettings(default_timeout_s=60)) as client:
        for manifest in manifests:
            work = workload(manifest.name, args.requests)
            for _ in range(args.rounds):
                for max_batch in BATCH_SIZES:
                    row = await measure_row(client, bench_registry, manifest.name, manifest.task, max_batch, work, args)
                    measured.append(row)
                    print(format_row(row), flush=True)
    medians = []
    for manifest in manifests:
        by_batch = [TaskRow.median_of([r for r in measured if r.model == manifest.name and r.max_batch == size])
                    for size in BATCH_SIZES]
        medians += [row.against(by_batch[0]) for row in by_batch]
    return measured, medians


HEADER = f"{'model':<13}{'task':<7}{'max batch':>10}{'fleet req/s':>12}{'x b1':>6}{'p50 ms':>8}{'mean batch':>11}" \
         f"{'raw req/s':>10}{'x b1':>6}{'efficiency':>11}{'CPU eff.':>9}" \
         f"{'CPU ms/req: worker':>19}{'client':>7}{'stack':>7}{'raw':>7}{'errors':>7}"


def format_row(row: TaskRow) -> str:
    return (f"{row.model:<13}{row.task:<7}{row.max_batch:>10}{row.fleet_per_s:>12.1f}{row.fleet_vs_batch_1:>6.2f}"
            f"{row.p50_ms:>8.0f}{row.mean_batch:>11.1f}{row.raw_per_s:>10.1f}{row.raw_vs_batch_1:>6.2f}"
            f"{row.efficiency:>11.2f}{row.cpu_efficiency:>9.2f}{row.worker_cpu_ms:>19.2f}{row.client_cpu_ms:>7.2f}"
            f"{row.stack_cpu_ms:>7.2f}{row.raw_cpu_ms:>7.2f}{row.errors:>7}")


def as_json(rows: Sequence[TaskRow]) -> list[dict[str, Any]]:
    return [{**asdict(row), "efficiency": row.efficiency, "cpu_efficiency": row.cpu_efficiency} for row in rows]


def main(argv: list[str] | None = None) -> int:
    parser = script_parser("bench tasks", __doc__)
    parser.add_argument("--quick", action="store_true", help="8 s windows after 4 s of warm-up, 2 raw repeats over at "
                        "most 64 distinct requests, one round unless --rounds says more")
    parser.add_argument("--duration", type=float, default=15.0, help="seconds measured per row (after warm-up)")
    parser.add_argument("--warmup", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, help="measure every row this many times and print the medians "
                        "(default 3; 1 with --quick)")
    parser.add_argument("--requests", type=int, default=256, help="distinct requests cycled through")
    parser.add_argument("--repeats", type=int, default=3, help="raw passes through the requests")
    parser.add_argument("--threads", type=int, default=0, help="FLEET_INTRA_OP_THREADS of the worker and raw runs")
    parser.add_argument("--tasks", nargs="+", choices=("rerank", "tensor"), default=["rerank", "tensor"],
                        help="which models to measure")
    args = parser.parse_args(argv)
    if args.quick:
        args.duration, args.warmup, args.repeats = 8.0, 4.0, 2
        args.requests = min(args.requests, 64)
    args.rounds = args.rounds or (1 if args.quick else 3)
    print(f"each round, as measured:\n{HEADER}", flush=True)
    measured, medians = asyncio.run(run(args))
    print(f"\nmedians of {args.rounds} round(s); x b1: req/s over the model's at max batch 1\n{HEADER}")
    print("\n".join(map(format_row, medians)))
    out = FleetSettings().home / "bench" / f"tasks-{datetime.now():%Y%m%d-%H%M%S}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"rows": as_json(medians), "rounds": as_json(measured)}, indent=2))
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
