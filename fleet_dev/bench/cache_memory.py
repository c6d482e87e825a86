"""`scripts/bench cache-memory`: does the exact cache keep a worker's memory within its bound?

    python -m fleet_dev.bench.cache_memory [--count N] [--bound-mib M] [--embedding-count N] [--redis]

Pushes N distinct inputs through ExactCache the way a worker does (look up a micro-batch,
miss, store the computed outputs) with the in-process tier bounded at M MiB, and samples the
process's resident memory (RSS, /proc/self/statm) all along. Two workloads: small
classifier outputs (a label and a score) and, with a smaller count, 384-float embeddings.
The figure that matters is the peak RSS growth over the bound: the issue asks for <= 1.10.

Redis is off by default: its memory is Redis's own (bounded by maxmemory), and leaving it
out isolates the worker. --redis also writes every entry through to the stack's Redis.
Also reports the local tier's get and put throughput.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from redis.asyncio import Redis

from common.clients import redis_client
from common.settings import FleetSettings
from fleet_dev.arguments import script_parser
from fleet.exits import Exit
from fleet.tables import format_table
from workers.cache.exact import ExactCache, LocalLRU, pack_outputs
from workers.cache.keys import input_digest

MiB = 1024 * 1024
BATCH = 64
PROGRESS_EVERY = 100_000
TARGET_RATIO = 1.10
VERSION = "bench-20250101-001"
PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * PAGE


def label_outputs(rng: random.Random, i: int) -> bytes:
    return pack_outputs({"label": f"intent_{i % 23:02d}", "score": rng.random()})


def embedding_outputs(rng: random.Random, i: int) -> bytes:
    vector = struct.unpack("384f", rng.randbytes(384 * 4))  # any 384 float32s: msgpack sizes them the same
    return pack_outputs({"embedding": [0.0 if v != v else v for v in vector]})


@dataclass
class Run:
    name: str
    count: int
    bound: int
    rss_growth: int
    peak_growth: int
    entries: int
    evictions: int
    seconds: float

    @property
    def ratio(self) -> float:
        return self.peak_growth / self.bound


async def fill(name: str, cache: ExactCache, count: int, make: Callable[[random.Random, int], bytes]) -> Run:
    rng = random.Random(7)
    gc.collect()
    start_rss = peak = rss_bytes()
    began = time.perf_counter()
    for first in range(0, count, BATCH):
        ids = range(first, min(first + BATCH, count))
        digests = [input_digest(f"customer question number {i}: how do I reset my password?", {"top_k": 1})
                   for i in ids]
        found = await cache.get_many(VERSION, digests)
        await cache.put_many(VERSION, [(d, make(rng, i)) for d, i, hit in zip(digests, ids, found, strict=True)
                                       if hit is None])
        if (first // BATCH) % 64 == 0:
            peak = max(peak, rss_bytes())
        done = first + len(ids)
        if done % PROGRESS_EVERY < BATCH and done >= PROGRESS_EVERY:
            peak = max(peak, rss_bytes())
            print(f"  {name}: {done:>9,} inputs  rss +{(rss_bytes() - start_rss) / MiB:6.1f} MiB  "
                  f"entries {cache.local.entries:>8,}  evictions {cache.local.evictions:>9,}", flush=True)
    seconds = time.perf_counter() - began
    end_rss = rss_bytes()
    peak = max(peak, end_rss)
    return Run(name, count, cache.local.max_bytes, end_rss - start_rss, peak - start_rss, cache.local.entries,
               cache.local.evictions, seconds)


def local_throughput(bound: int, n: int = 150_000) -> tuple[float, float]:
    """(puts/s, gets/s) of the bare LocalLRU, hits only, with keys precomputed."""
    lru = LocalLRU(bound)
    keys = [f"{VERSION}:g0:{i:032x}" for i in range(n)]
    value = pack_outputs({"label": "intent_01", "score": 0.5})
    began = time.perf_counter()
    for key in keys:
        lru.put(key, value)
    puts = n / (time.perf_counter() - began)
    began = time.perf_counter()
    for key in keys:
        lru.get(key)
    gets = n / (time.perf_counter() - began)
    return puts, gets


async def cache_throughput(bound: int, n: int = 150_000) -> float:
    """Lookups/s through ExactCache.get_many on local hits, in micro-batches of BATCH."""
    cache = ExactCache("bench", redis=None, local_max_bytes=bound, redis_ttl_s=60, redis_enabled=False)
    digests = [f"{i:032x}" for i in range(n)]
    value = pack_outputs({"label": "intent_01", "score": 0.5})
    for first in range(0, n, BATCH):
        await cache.put_many(VERSION, [(d, value) for d in digests[first:first + BATCH]])
    began = time.perf_counter()
    for first in range(0, n, BATCH):
        await cache.get_many(VERSION, digests[first:first + BATCH])
    return n / (time.perf_counter() - began)


def table(runs: list[Run]) -> str:
    headers = ("workload", "inputs", "bound MiB", "RSS end MiB", "RSS peak MiB", "peak/bound", "entries",
               "evictions", "inputs/s", "verdict")
    return format_table(headers, [
        (r.name, f"{r.count:,}", f"{r.bound / MiB:.1f}", f"{r.rss_growth / MiB:.1f}", f"{r.peak_growth / MiB:.1f}",
         f"{r.ratio:.3f}", f"{r.entries:,}", f"{r.evictions:,}", f"{r.count / r.seconds:,.0f}",
         "PASS" if r.ratio <= TARGET_RATIO else "FAIL") for r in runs])


WORKLOADS: dict[str, Callable[[random.Random, int], bytes]] = {"label+score": label_outputs,
                                                               "embedding": embedding_outputs}
RESULT_MARK = "RESULT "


async def bench_one(args: argparse.Namespace) -> int:
    """One workload in this process; the parent reads the Run from the RESULT line."""
    name = args.workload
    count = args.count if name == "label+score" else args.embedding_count
    redis = redis_client(FleetSettings()) if args.redis else None
    try:
        cache = ExactCache(f"bench-{name.replace('+', '-')}", redis=redis, local_max_bytes=int(args.bound_mib * MiB),
                           redis_ttl_s=300, redis_enabled=redis is not None)
        run = await fill(name, cache, count, WORKLOADS[name])
    finally:
        if redis is not None:
            await redis.aclose()
    print(RESULT_MARK + json.dumps(asdict(run)), flush=True)
    return Exit.OK


def run_child(args: argparse.Namespace, workload: str) -> Run:
    """A fresh interpreter per workload, so one run's freed-but-kept memory cannot flatter the next."""
    argv = [sys.executable, "-m", "fleet_dev.bench.cache_memory", "--workload", workload, "--count", str(args.count),
            "--embedding-count", str(args.embedding_count), "--bound-mib", str(args.bound_mib)]
    argv += ["--redis"] if args.redis else []
    result: Run | None = None
    with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) as child:
        assert child.stdout is not None
        for line in child.stdout:
            if line.startswith(RESULT_MARK):
                result = Run(**json.loads(line.removeprefix(RESULT_MARK)))
            else:
                print(line, end="", flush=True)
    if child.returncode != 0 or result is None:
        raise SystemExit(f"the {workload} run failed (exit {child.returncode})")
    return result


async def bench(args: argparse.Namespace) -> int:
    bound = int(args.bound_mib * MiB)
    runs = [run_child(args, name) for name, count in (("label+score", args.count),
                                                      ("embedding", args.embedding_count)) if count > 0]
    print(f"\nexact cache memory, local tier bound {args.bound_mib:g} MiB, Redis tier "
          f"{'on' if args.redis else 'off'} (target: peak RSS growth <= {TARGET_RATIO:.2f} x bound)")
    print(table(runs))
    puts, gets = local_throughput(bound)
    lookups = await cache_throughput(bound)
    print(f"\nlocal tier throughput: LocalLRU put {puts:,.0f}/s, get {gets:,.0f}/s; "
          f"ExactCache.get_many (batches of {BATCH}, all local hits) {lookups:,.0f} lookups/s")
    return Exit.OK if all(r.ratio <= TARGET_RATIO for r in runs) else Exit.FAILED


def main(argv: list[str] | None = None) -> int:
    parser = script_parser("bench cache-memory", __doc__)
    parser.add_argument("--count", type=int, default=1_000_000, help="distinct label+score inputs")
    parser.add_argument("--embedding-count", type=int, default=200_000, help="distinct embedding inputs (0: skip)")
    parser.add_argument("--bound-mib", type=float, default=64, help="local tier bound")
    parser.add_argument("--redis", action="store_true", help="also write through to the stack's Redis")
    parser.add_argument("--workload", choices=sorted(WORKLOADS), help=argparse.SUPPRESS)  # internal: one child run
    args = parser.parse_args(argv)
    return asyncio.run(bench_one(args) if args.workload else bench(args))


if __name__ == "__main__":
    raise SystemExit(main())
