"""`scripts/bench batch`: a batch job of N lines against the fleet's saturated rate (issue 38).

Two workers serve a bench-only alias of minilm-embed (caches off, so every line costs the model):

  saturated  N requests produced straight to the bulk lane, drained: the fleet's saturated rate
  job        a JSONL file of N lines (other texts) run as a batch job (gateway/batch_jobs.py): submit,
             status every second with its progress bar, then the output written as `fleet batch
             results` writes it; the job's rate is N over the time from the submit's start until its
             last line is answered
  exactly    the same job again, the workers started again with FLEET_EXACTLY_ONCE=bulk: results and
             offsets in one Kafka transaction per partition and batch (workers/delivery/transactions.py)

The table: the rates, each job's against the saturated one (the issue's target: >= 0.9), what
transactions cost (exactly against job; the target: <= 10%), and the output's check: one line per
custom_id, none twice, every line answered or in the errors file, and as many records on the results
topic for a read_committed reader as lines. JSON beside it in `<home>/bench/batch.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path

from common.settings import FleetSettings
from common.topics import ensure_topics
from fleet.commands.batch import progress_line
from fleet.tables import format_table
from fleet_dev.bench.fleet_process import GroupWatch, WorkerProcess, bench_alias
from fleet_dev.bench.workload import support_queries
from gateway import BatchJobs, BatchSettings, FleetClient, JobState
from gateway.main import run_loop
from models.registry import ModelRegistry
from schemas.wire import ReplyTo

MODEL = "minilm-embed"
BENCH_MODEL = "minilm-embed-batchbench"
TENANT = "bench-batch"
PARTITIONS = 4


def write_file(path: Path, lines: int, texts: list[str]) -> None:
    with path.open("w", encoding="utf-8") as out:
        for i in range(lines):
            text = f"{texts[i % len(texts)]} (batch job line {i})"
            out.write(json.dumps({"custom_id": f"line-{i}", "inputs": {"text": text}}, ensure_ascii=False) + "\n")


async def saturated(client: FleetClient, settings: FleetSettings, lines: int, texts: list[str]) -> float:
    """req/s of the same workers draining N requests produced straight to the bulk lane."""
    topic = settings.lane_plan.topics(BENCH_MODEL)[-1]
    async with GroupWatch(settings, BENCH_MODEL, topic) as watch:
        sends = []
        for i in range(lines):
            request = client.build_request(BENCH_MODEL, f"{texts[i % len(texts)]} (saturated row {i})",
                                           timeout=3600, reply=ReplyTo())
            sends.append(await client.producer.send(topic, request.encode(), key=request.id.encode()))
        await asyncio.gather(*sends)
        started = time.monotonic()
        while (left := await watch.lag()) > 0:
            print(f"\r  saturated: {lines - left:,} / {lines:,}", end="", file=sys.stderr, flush=True)
            await asyncio.sleep(1.0)
        print(file=sys.stderr)
        return lines / (time.monotonic() - started)


async def job(client: FleetClient, path: Path, lines: int, output: Path) -> dict[str, float]:
    jobs = BatchJobs(client, BatchSettings())
    started = time.monotonic()
    status = await jobs.create(TENANT, BENCH_MODEL, name=path.name, size_bytes=path.stat().st_size)
    with path.open("rb") as file:
        status = await jobs.submit(status.id, TENANT, file)
    submitted_s = time.monotonic() - started
    while not (status.state is JobState.completed and status.answered >= lines):
        await asyncio.sleep(1.0)
        status = await jobs.status(status.id, TENANT)
        print("\r  job: " + progress_line(status), end="", file=sys.stderr, flush=True)
    elapsed = time.monotonic() - started
    print(file=sys.stderr)
    seen: set[str] = set()
    repeated = 0
    with output.open("w", encoding="utf-8") as out:
        async for row in jobs.output(status.id, TENANT):
            repeated += row.custom_id in seen
            seen.add(row.custom_id)
            out.write(json.dumps({"custom_id": row.custom_id, "line": row.line}) + "\n")
    errors = [row async for row in jobs.errors(status.id, TENANT)]
    records = 0
    async for batch, _ in jobs.results.read(status.id, {}):
        records += len(batch)
    return {"rate": lines / elapsed, "elapsed_s": elapsed, "submit_s": submitted_s, "output_lines": len(seen),
            "repeated": repeated, "errors": len(errors), "done": status.done, "topic_records": records}


@asynccontextmanager
async def serving(env: dict[str, str], count: int, home: Path, tag: str) -> AsyncIterator[None]:
    workers = [WorkerProcess({**env, "FLEET_WORKER_ID": f"batchbench-{tag}{i}"}, home / f"worker-{tag}{i}.log")
               for i in range(count)]
    try:
        for worker in workers:
            worker.__enter__()
        for worker in workers:
            await asyncio.to_thread(worker.wait_ready, 120)
        yield
    finally:
        for worker in workers:
            worker.stop()


def row(name: str, ran: dict[str, float], rate: float, lines: int) -> tuple[str, ...]:
    once = ran["output_lines"] + ran["errors"] == lines and ran["repeated"] == 0 and ran["topic_records"] == lines
    return (name, f"{ran['rate']:.1f}", f"{ran['rate'] / rate:.2f}", f"{ran['elapsed_s']:.0f}",
            f"{ran['output_lines']:,}", str(ran["repeated"]), f"{ran['topic_records']:,}", str(ran["errors"]),
            "yes" if once else "NO")


async def main_async(args: argparse.Namespace) -> int:
    settings = FleetSettings()
    source = ModelRegistry(settings.registry_dir)
    alias = ModelRegistry(settings.home / "bench" / "models")
    bench_alias(source, source.resolve(MODEL, precision="fp32"), alias, BENCH_MODEL)
    await ensure_topics(settings, [*settings.lane_plan.topics(BENCH_MODEL)], PARTITIONS)
    home = settings.home / "bench" / f"batch-{datetime.now():%Y%m%d-%H%M%S}"
    home.mkdir(parents=True, exist_ok=True)
    texts = support_queries(2000)
    env = {"FLEET_MODEL": BENCH_MODEL, "FLEET_MODEL_DIR": str(alias.root), "FLEET_EXACT_CACHE": "false",
           "FLEET_SEMANTIC_CACHE": "false", "FLEET_SESSION_TIMEOUT_MS": "6000", "FLEET_RESULT_TTL_S": "120",
           "FLEET_MAX_BATCH_SIZE": str(args.max_batch)}
    file = home / "job.jsonl"
    write_file(file, args.lines, texts)
    async with FleetClient() as client:
        async with serving(env, args.workers, home, ""):
            print(f"saturated: {args.lines:,} requests straight to the bulk lane", file=sys.stderr)
            rate = await saturated(client, settings, args.lines, texts)
            print(f"job: {args.lines:,} lines from {file}", file=sys.stderr)
            ran = await job(client, file, args.lines, home / "out.jsonl")
        async with serving({**env, "FLEET_EXACTLY_ONCE": "bulk"}, args.workers, home, "exactly-"):
            print(f"job, exactly once: {args.lines:,} lines from {file}", file=sys.stderr)
            exactly = await job(client, file, args.lines, home / "out-exactly-once.jsonl")
    ratio, cost = ran["rate"] / rate, 1 - exactly["rate"] / ran["rate"]
    rows = [row("batch job", ran, rate, args.lines), row("batch job, FLEET_EXACTLY_ONCE=bulk", exactly, rate, args.lines)]
    exact = all(r[-1] == "yes" for r in rows)
    print(f"\n{args.workers} workers, max batch {args.max_batch}, {args.lines:,} lines; logs and files in {home}\n")
    print(format_table(("run", "req/s", "x saturated", "s", "output lines", "repeated", "topic records", "errors",
                        "every line once"),
                       [("saturated (straight to Kafka)", f"{rate:.1f}", "1.00", f"{args.lines / rate:.0f}",
                         "-", "-", "-", "-", "-"), *rows]))
    print(f"\nsubmit took {ran['submit_s']:.1f} s of the job's {ran['elapsed_s']:.0f} s (the workers start on the "
          "first chunk)")
    print(f"exactly once (results and offsets in one transaction per partition and batch) cost {cost:.1%} of the "
          f"job's rate ({exactly['rate']:.1f} against {ran['rate']:.1f} req/s)")
    out = settings.home / "bench" / "batch.json"
    out.write_text(json.dumps({"meta": {"started": f"{datetime.now():%Y-%m-%d %H:%M}", "args": vars(args)},
                               "saturated_rate": rate, "job": ran, "ratio": ratio, "exactly_once": exactly,
                               "exactly_once_cost": cost}))
    print(out)
    return 0 if exact else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench batch", description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--max-batch", type=int, default=32)
    parser.add_argument("--quick", action="store_const", const=10_000, dest="lines", help="10,000 lines")
    return run_loop(main_async(parser.parse_args(argv)))


if __name__ == "__main__":
    raise SystemExit(main())
