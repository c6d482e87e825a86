"""`scripts/bench tasks`: does batching still pay for the newer tasks?

For a reranker (`bench-rerank`: MiniLM-sized cross-encoder, 8 passages a request) and a tensor
model (`bench-tensor`: a 256 -> 2048 -> 2048 -> 16 MLP, one row a request), made on the spot
by fleet/bench/task_models.py, and for max batch 1 and 32: one worker process serves the model
and closed-loop callers drive it end to end (client -> Kafka -> worker -> Redis reply) -> req/s
and p50; then the same backend in-process, fed the same requests in batches of that size, as
many at once as the worker runs -> raw req/s. Efficiency = fleet req/s / raw req/s.

Prints one row per (model, max batch) and writes them as JSON (<home>/bench/tasks-<time>.json).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import sys
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

import numpy as np

from common.settings import FleetSettings
from fleet.arguments import command_parser
from fleet.bench.fleet_process import WorkerProcess
from fleet.bench.load import TextCycle, closed_loop
from fleet.bench.raw import measure, worker_settings
from fleet.bench.stats import percentile
from fleet.bench.task_models import FEATURES, RERANK_MODEL, TENSOR_MODEL, bench_models
from fleet.bench.workload import support_queries
from gateway.client import FleetClient
from gateway.settings import ClientSettings
from models.loading import ModelLoader
from models.registry import ModelRegistry
from schemas.task_inputs import RerankInput, TensorInput
from workers.compute.parallelism import batches_in_flight

PASSAGES = 8
BATCH_SIZES = (1, 32)
READY_TIMEOUT_S = 120.0


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

    @property
    def efficiency(self) -> float:
        return self.fleet_per_s / self.raw_per_s if self.raw_per_s else float("nan")


def workload(model: str, count: int) -> tuple[list[dict[str, Any]], list[Any]]:
    """(request inputs for the client, the same inputs as the backend takes them)."""
    if model == RERANK_MODEL:
        texts = support_queries(count * (PASSAGES + 1), seed=23)
        inputs = [{"query": texts[i * (PASSAGES + 1)], "passages": texts[i * (PASSAGES + 1) + 1:(i + 1) * (PASSAGES + 1)]}
                  for i in range(count)]
        return inputs, [RerankInput(item["query"], tuple(item["passages"])) for item in inputs]
    rows = np.random.default_rng(23).normal(size=(count, 1, FEATURES)).astype(np.float32)
    return [{"x": row} for row in rows], [TensorInput({"x": row}, 1) for row in rows]


def worker_env(registry: ModelRegistry, model: str, max_batch: int, threads: int) -> dict[str, str]:
    return {"FLEET_MODEL": model, "FLEET_MODEL_DIR": str(registry.root.resolve()), "FLEET_MAX_BATCH_SIZE": str(max_batch),
            "FLEET_MAX_QUEUE_DELAY_MS": "5", "FLEET_EXACT_CACHE": "false", "FLEET_RESULT_TTL_S": "120",
            "FLEET_INTRA_OP_THREADS": str(threads), "FLEET_WORKER_ID": f"bench-{model}-{max_batch}"}


async def fleet_phase(client: FleetClient, env: dict[str, str], requests: list[dict[str, Any]], args: argparse.Namespace,
                      settings: FleetSettings) -> tuple[float, float, float, int]:
    max_batch = int(env["FLEET_MAX_BATCH_SIZE"])
    at_once = batches_in_flight("cpu", worker_settings(env).model_batches_in_flight)
    log_file = settings.home / "bench" / f"tasks-{env['FLEET_MODEL']}-{max_batch}.log"
    with WorkerProcess(env, log_file) as worker:
        await asyncio.to_thread(worker.wait_ready, READY_TIMEOUT_S)
        samples = await closed_loop(client, env["FLEET_MODEL"], TextCycle(requests),  # type: ignore[arg-type]
                                    callers=max((at_once + 1) * max_batch, 8), warmup_s=args.warmup,
                                    duration_s=args.duration)
    mean_batch = float(np.mean(samples.batch_sizes)) if samples.batch_sizes else 0.0
    p50 = percentile(samples.latencies_ms, 50) if samples.latencies_ms else float("nan")
    return samples.completed / args.duration, p50, mean_batch, sum(samples.errors.values())


def raw_phase(env: dict[str, str], payloads: list[Any], repeats: int) -> float:
    settings = worker_settings(env)
    backend = ModelLoader(settings.runtime()).load()
    try:
        at_once = batches_in_flight(backend.device, settings.model_batches_in_flight)
        return measure(backend.infer, payloads, settings.max_batch_size, repeats, at_once).sentences_per_s
    finally:
        del backend
        gc.collect()


async def run(args: argparse.Namespace) -> list[TaskRow]:
    settings = FleetSettings()
    bench_registry = ModelRegistry(settings.home / "bench" / "task-models")
    rerank, tensor = bench_models(ModelRegistry(settings.registry_dir), bench_registry)
    rows = []
    async with FleetClient(ClientSettings(default_timeout_s=60)) as client:
        for manifest in (m for m in (rerank, tensor) if m.task in args.tasks):
            requests, payloads = workload(manifest.name, args.requests)
            for max_batch in BATCH_SIZES:
                env = worker_env(bench_registry, manifest.name, max_batch, args.threads)
                fleet_per_s, p50, mean_batch, errors = await fleet_phase(client, env, requests, args, settings)
                raw_per_s = await asyncio.to_thread(raw_phase, env, payloads, args.repeats)
                row = TaskRow(manifest.name, manifest.task, max_batch, fleet_per_s, p50, mean_batch, errors, raw_per_s)
                print(format_row(row), flush=True)
                rows.append(row)
    return rows


HEADER = f"{'model':<14}{'task':<8}{'max batch':>10}{'fleet req/s':>13}{'p50 ms':>9}{'mean batch':>12}" \
         f"{'raw req/s':>11}{'efficiency':>12}{'errors':>8}"


def format_row(row: TaskRow) -> str:
    return (f"{row.model:<14}{row.task:<8}{row.max_batch:>10}{row.fleet_per_s:>13.1f}{row.p50_ms:>9.1f}"
            f"{row.mean_batch:>12.1f}{row.raw_per_s:>11.1f}{row.efficiency:>12.2f}{row.errors:>8}")


def main(argv: list[str] | None = None) -> int:
    parser = command_parser("bench tasks", __doc__)
    parser.add_argument("--quick", action="store_true", help="5 s windows, 2 raw repeats over at most 64 requests")
    parser.add_argument("--duration", type=float, default=15.0, help="seconds measured per row (after warm-up)")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--requests", type=int, default=256, help="distinct requests cycled through")
    parser.add_argument("--repeats", type=int, default=3, help="raw passes through the requests")
    parser.add_argument("--threads", type=int, default=0, help="FLEET_INTRA_OP_THREADS of the worker and raw runs")
    parser.add_argument("--tasks", nargs="+", choices=("rerank", "tensor"), default=["rerank", "tensor"],
                        help="which models to measure")
    args = parser.parse_args(argv)
    if args.quick:
        args.duration, args.warmup, args.repeats, args.requests = 5.0, 2.0, 2, min(args.requests, 64)
    print(HEADER, flush=True)
    rows = asyncio.run(run(args))
    out = FleetSettings().home / "bench" / f"tasks-{datetime.now():%Y%m%d-%H%M%S}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps([{**asdict(row), "efficiency": row.efficiency} for row in rows], indent=2))
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
