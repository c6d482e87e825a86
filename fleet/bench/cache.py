"""`fleet bench-cache`: the result caches measured through the real worker, Kafka and Redis (issue 4).

One in-process Worker serves `faq-intent` under a bench-only name (`faq-intent-bench`, the
same registered bytes symlinked into <home>/bench/models, so its own topic, consumer group and
cache keys); requests come from Kafka and replies go to a Redis waiter stream. Each scenario
starts from `clear_model_cache` and a fresh worker.

1. Exact hits: K inputs computed once, then N repeats pre-produced and drained in burst mode;
   throughput = N / wall time of `run(burst=True)` (the worker already started and joined; the
   time includes its first fetch and the final drained check). Then ~300 sequential requests
   to the running worker (all hits), alternating with a bare round trip (produce -> a minimal
   aiokafka consumer in this process -> XADD -> read), same producer, same waiter.
2. Caches at ~50% combined hit rate: a seeded Zipf workload (fleet/bench/cache_workload.py)
   drained in burst mode with caches off, exact only, and exact + semantic (the target compares
   the last with the first), otherwise equal settings.

Prints progress and tables, writes every figure to <home>/bench/cache.json; exit 1 names the
targets missed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer

from common.redis_cluster import AnyRedis
from fleet.arguments import command_parser
from fleet.bench.batching import Progress
from fleet.bench.cache_verifier import describe_standalone, describe_verifier, verifier_cost, verifier_ms_per_candidate
from fleet.bench.cache_workload import (Workload, base_texts, cache_table, cache_workload, failed, format_verdicts,
                                        query_set, tier_shares, verdicts)
from fleet.bench.fleet_process import bench_alias
from fleet.bench.plots import plot_beside
from fleet.bench.stats import LatencySummary
from fleet.exits import Exit
from common.clients import new_consumer, new_producer, redis_client
from common.settings import FleetSettings
from fleet.stack.cli import wait_for_kafka, wait_for_redis
from common.topics import ensure_topics, partitions_of
from gateway.waiter import ReplyWaiter
from schemas.names import reply_stream, requests_topic
from schemas.wire import ReplyTo, Request, Result, Status, new_request_id, now_ms
from workers.cache.exact import clear_model_cache
from workers.worker import Worker
from models.registry import ModelNotFound, ModelRegistry
from workers.settings import WorkerSettings

MODEL, ENCODER, VERIFIER = "faq-intent", "minilm-embed", "cache-verifier"
BENCH_MODEL = "faq-intent-bench"
BARE_TOPIC = "fleet.bench.batching.bare-echo"
REQUEST_TIMEOUT_S = 600.0  # backlog requests must not expire while they wait
ROUND_TRIP_TIMEOUT_S = 10.0
STACK_TIMEOUT_S = 10.0
# Cache scenario rows: (exact_cache, semantic_cache); the target compares the last with the first.
CACHE_CONFIGS = {"off": (False, False), "exact": (True, False), "exact+semantic": (True, True)}


@dataclass(frozen=True)
class Sizes:
    distinct_inputs: int  # K, scenario 1
    exact_requests: int  # N, scenario 1
    round_trips: int
    workload: int  # scenario 2
    burst_timeout_s: float
    rounds: int = 1  # scenario 2 runs its configurations this many times, interleaved; medians count


QUICK = Sizes(distinct_inputs=200, exact_requests=10_000, round_trips=100, workload=1_500, burst_timeout_s=60)
FULL = Sizes(distinct_inputs=200, exact_requests=50_000, round_trips=1_000, workload=4_000, burst_timeout_s=180, rounds=3)


@dataclass
class Bench:
    args: argparse.Namespace
    sizes: Sizes
    settings: FleetSettings
    base: WorkerSettings
    redis: AnyRedis
    producer: AIOKafkaProducer
    progress: Progress
    stamp: str

    def worker_settings(self, **changes: Any) -> WorkerSettings:
        return self.base.model_copy(update={**changes, "worker_id": f"bench-cache-{self.stamp}"})

    def requests(self, texts: Sequence[str], waiter: str) -> list[Request]:
        submitted = now_ms()
        return [Request(id=new_request_id(), model=BENCH_MODEL, inputs={"text": text}, reply=ReplyTo(redis=waiter),
                        deadline_ms=submitted + int(REQUEST_TIMEOUT_S * 1000), submitted_ms=submitted)
                for text in texts]

    async def produce(self, requests: Sequence[Request], topic: str = requests_topic(BENCH_MODEL)) -> None:
        futures = [await self.producer.send(topic, r.encode(), key=r.id.encode()) for r in requests]
        await asyncio.gather(*futures)

    async def burst(self, worker: Worker, label: str) -> float:
        """Drain the backlog; wall seconds of run(burst=True)."""
        started = time.perf_counter()
        try:
            await asyncio.wait_for(worker.run(burst=True), self.sizes.burst_timeout_s)
        except TimeoutError:
            raise SystemExit(f"{label}: the worker did not drain its backlog within {self.sizes.burst_timeout_s:g} s")
        return time.perf_counter() - started

    async def replies(self, waiter: str, expected: int) -> list[tuple[int, Result]]:
        """(XADD ms, result) of every reply on the waiter's stream, which is then deleted."""
        stream, start, out = reply_stream(waiter), "-", []
        while entries := await self.redis.xrange(stream, min=start, count=5000):
            for entry_id, fields in entries:
                out.append((int(entry_id.split(b"-")[0]), Result.decode(fields[b"result"])))
            start = "(" + entries[-1][0].decode()
        await self.redis.delete(stream)
        if len(out) < expected:
            raise SystemExit(f"only {len(out)} of {expected} replies arrived on {stream}")
        return out

    async def fresh_worker(self, settings: WorkerSettings) -> Worker:
        """A started worker whose exact cache follows the generation `clear_model_cache` just bumped."""
        worker = Worker(settings, redis=self.redis)
        await worker.start()
        if worker.unavailable:
            raise SystemExit(f"the worker could not load its model: {worker.unavailable}")
        if worker.caches.exact is not None:
            await worker.caches.exact.refresh_generation()  # else it reads generation 0 until its first refresh
        return worker


def cache_counters(worker: Worker) -> dict[str, float]:
    registry = worker.metrics.cache.registry
    values = {tier: registry.get_sample_value("fleet_cache_hits_total", {"model": BENCH_MODEL, "tier": tier}) or 0.0
              for tier in ("local", "redis", "semantic")}
    values["dedupe"] = registry.get_sample_value("fleet_cache_dedupe_total", {"model": BENCH_MODEL}) or 0.0
    values["computed"] = float(worker.computed)
    return values


def delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {key: after[key] - before.get(key, 0.0) for key in after}


async def round_trips(bench: Bench, waiter: ReplyWaiter, topics: Sequence[str], texts: Sequence[str],
                      count: int) -> list[list[float]]:
    """Sequential produce -> reply latencies in ms per topic, the topics taking turns request by
    request so machine noise falls on each alike (10 untimed rounds first)."""
    latencies: list[list[float]] = [[] for _ in topics]
    for index in range(count + 10):
        for turn, topic in enumerate(topics):
            [request] = bench.requests([texts[index % len(texts)]], waiter.waiter_id)
            reply = waiter.expect(request.id)
            started = time.perf_counter()
            await bench.producer.send_and_wait(topic, request.encode(), key=request.id.encode())
            try:
                await asyncio.wait_for(reply, ROUND_TRIP_TIMEOUT_S)
            except TimeoutError:
                raise SystemExit(f"no reply on {topic} within {ROUND_TRIP_TIMEOUT_S:g} s") from None
            if index >= 10:
                latencies[turn].append((time.perf_counter() - started) * 1000)
    return latencies


async def bare_echo(bench: Bench, ready: asyncio.Event) -> None:
    """The baseline's far end: a group-less consumer that answers each request with an XADD."""
    await ensure_topics(bench.settings, [BARE_TOPIC], bench.base.partitions)
    consumer = new_consumer(bench.settings, enable_auto_commit=False, fetch_max_wait_ms=100)
    await consumer.start()
    try:
        partitions = await partitions_of(bench.settings, BARE_TOPIC)
        consumer.assign(partitions)
        await consumer.seek_to_end(*partitions)
        for tp in partitions:
            await consumer.position(tp)
        ready.set()
        while True:
            for records in (await consumer.getmany(timeout_ms=100)).values():
                pipe = bench.redis.pipeline(transaction=False)
                for record in records:
                    request = Request.decode(record.value or b"")
                    result = Result(id=request.id, model=request.model, status=Status.ok, outputs={})
                    pipe.xadd(reply_stream(request.reply.redis or ""), {"id": request.id, "result": result.encode()})
                await pipe.execute()
    finally:
        await consumer.stop()


async def exact_scenario(bench: Bench) -> dict[str, Any]:
    sizes, say = bench.sizes, bench.progress.say
    batch = bench.args.exact_batch
    await clear_model_cache(bench.redis, BENCH_MODEL, None)
    inputs = query_set(base_texts(), bench.args.seed)[:sizes.distinct_inputs]
    worker = await bench.fresh_worker(bench.worker_settings(max_batch_size=batch, semantic_cache=False))
    try:
        await bench.produce(bench.requests(inputs, f"bench-{bench.stamp}-warm"))
        await bench.burst(worker, "exact pre-warm")
        await bench.replies(f"bench-{bench.stamp}-warm", len(inputs))
        say(f"exact: {len(inputs)} distinct inputs computed and cached (max_batch_size {batch})")
        waiter_id = f"bench-{bench.stamp}-exact"
        requests = bench.requests([inputs[i % len(inputs)] for i in range(sizes.exact_requests)], waiter_id)
        started = time.perf_counter()
        await bench.produce(requests)
        say(f"exact: {len(requests):,} repeats produced in {time.perf_counter() - started:.1f} s; draining")
        before = cache_counters(worker)
        wall_s = await bench.burst(worker, "exact burst")
        counters = delta(cache_counters(worker), before)
        replies = await bench.replies(waiter_id, len(requests))
        tiers = Counter(result.cache.value for _, result in replies)
        span_s = (max(at for at, _ in replies) - min(at for at, _ in replies)) / 1000
        per_s = len(requests) / wall_s
        say(f"exact: {per_s:,.0f} req/s over run(burst=True) {wall_s:.2f} s ({len(requests) / span_s:,.0f} req/s "
            f"between first and last XADD); tiers {dict(tiers)}; model rows {counters['computed']:.0f}")
        waiter, ready = ReplyWaiter(bench.redis), asyncio.Event()
        waiter.start()
        echo = asyncio.create_task(bare_echo(bench, ready))
        serving = asyncio.create_task(worker.run())
        try:
            await asyncio.wait_for(ready.wait(), 30)
            hits, bare = await round_trips(bench, waiter, [worker.topic, BARE_TOPIC], inputs, sizes.round_trips)
        finally:
            worker.request_stop()
            echo.cancel()
            await asyncio.gather(serving, echo, return_exceptions=True)
            await waiter.stop()
    finally:
        await worker.stop()
    hit, base = LatencySummary.of(hits), LatencySummary.of(bare)
    say(f"round trip, {len(hits)} sequential each, alternating: cache hit p50 {hit.p50_ms:.2f} / p99 "
        f"{hit.p99_ms:.2f} ms; bare Kafka -> XADD p50 {base.p50_ms:.2f} / p99 {base.p99_ms:.2f} ms")
    return {"max_batch_size": batch, "distinct_inputs": len(inputs), "requests": len(requests), "wall_s": wall_s,
            "requests_per_s": per_s, "delivery_span_s": span_s, "tiers": dict(tiers), "counters": counters,
            "hit_round_trip": asdict(hit), "bare_round_trip": asdict(base)}


async def cache_run(bench: Bench, workload: Workload, caches: str) -> dict[str, Any]:
    """One burst drain of the workload with `caches` in CACHE_CONFIGS."""
    label = f"caches {caches}"
    exact, semantic = CACHE_CONFIGS[caches]
    await clear_model_cache(bench.redis, BENCH_MODEL, None)
    settings = bench.worker_settings(exact_cache=exact, semantic_cache=semantic)
    worker = await bench.fresh_worker(settings)
    try:
        warm = f"bench-{bench.stamp}-warm-{caches.replace('+', '-')}"
        await bench.produce(bench.requests([f"zz warm-up probe {bench.stamp}"], warm))
        await bench.burst(worker, f"{label} warm-up")  # loads the semantic encoder and rebuilds its index
        await bench.replies(warm, 1)
        waiter_id = f"bench-{bench.stamp}-zipf-{caches.replace('+', '-')}"
        requests = bench.requests(workload.texts, waiter_id)
        await bench.produce(requests)
        before = cache_counters(worker)
        wall_s = await bench.burst(worker, label)
        counters = delta(cache_counters(worker), before)
        verifier = verifier_cost(worker)
    finally:
        await worker.stop()
    replies = await bench.replies(waiter_id, len(requests))
    submitted = {request.id: request.submitted_ms for request in requests}
    ok = [result for _, result in replies if result.status is Status.ok]
    errors = len(replies) - len(ok)
    shares = tier_shares(Counter(result.cache.value for result in ok), computed=int(counters["computed"]),
                         local_hits=counters["local"], redis_hits=counters["redis"], errors=errors)
    latency = LatencySummary.of([float(r.finished_ms - submitted[r.id]) for r in ok])
    per_s = len(requests) / wall_s
    bench.progress.say(f"{label}: {per_s:,.0f} req/s (drained {len(requests):,} in {wall_s:.2f} s), p99 submitted->"
                       f"finished {latency.p99_ms:,.0f} ms, combined hit rate {shares.combined:.1%}"
                       + (f", {errors} errors" if errors else ""))
    return {"caches": caches, "requests": len(requests), "wall_s": wall_s, "requests_per_s": per_s,
            "latency": asdict(latency), "tiers": shares.as_dict(), "counters": counters,
            "max_batch_size": settings.max_batch_size, "shares": shares, "verifier": verifier}


def median_run(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median throughput: machine noise hits interleaved rounds alike."""
    return sorted(runs, key=lambda run: run["requests_per_s"])[len(runs) // 2]


async def check_stack(settings: FleetSettings) -> None:
    try:
        await wait_for_kafka(settings, STACK_TIMEOUT_S)
        await wait_for_redis(settings, STACK_TIMEOUT_S)
    except Exception as exc:
        raise SystemExit(f"the stack does not answer ({exc}); start it with `scripts/stack up`") from None


def base_settings(settings: FleetSettings, args: argparse.Namespace) -> WorkerSettings:
    """faq-intent and the semantic cache's encoder, aliased into the bench registry."""
    registry, aliases = ModelRegistry(settings.registry_dir), ModelRegistry(settings.home / "bench" / "models")
    try:
        model = registry.resolve(MODEL, None, args.precision)
        encoder = registry.resolve(ENCODER, None, WorkerSettings.model_fields["semantic_encoder_precision"].default)
    except ModelNotFound as missing:
        raise SystemExit(f"{missing}; build the models with scripts/build-models") from None
    served = bench_alias(registry, model, aliases, BENCH_MODEL)
    bench_alias(registry, encoder, aliases, ENCODER)
    for precision in ("int8", "fp32"):  # the semantic tier's verifier, where one is built
        verifier = next((m for m in reversed(registry.versions(VERIFIER)) if m.precision == precision), None)
        if verifier is not None:
            bench_alias(registry, verifier, aliases, VERIFIER)
    return WorkerSettings(model=BENCH_MODEL, model_dir=aliases.root.resolve(), model_version=served.id,
                          precision=args.precision, kafka_bootstrap=settings.kafka_bootstrap,
                          redis_url=settings.redis_url, home=settings.home, max_batch_size=args.batch,
                          intra_op_threads=args.threads,
                          **({} if args.spinning is None else {"intra_op_spinning": args.spinning == "on"}),
                          session_timeout_ms=6000)


async def run(args: argparse.Namespace) -> int:
    sizes = QUICK if args.quick else FULL
    settings = FleetSettings()
    await check_stack(settings)
    base = base_settings(settings, args)
    progress, stamp = Progress(), time.strftime("%Y%m%d-%H%M%S")
    workload = cache_workload(args.workload or sizes.workload, seed=args.seed, repeat_share=args.repeat_share)
    print(f"cache bench ({'quick' if args.quick else 'full'}): {BENCH_MODEL} = {base.model_version} "
          f"({args.precision}), {os.cpu_count()} CPUs; Zipf workload: {len(workload.texts):,} requests over "
          f"{workload.query_set_size:,} queries, exponent {workload.exponent:.3f}, exact repeats "
          f"{workload.repeat_share:.1%}, seed {args.seed}", flush=True)
    redis = redis_client(settings)
    producer = new_producer(settings, linger_ms=0, max_batch_size=512 * 1024)
    await producer.start()
    try:
        await ensure_topics(settings, [requests_topic(BENCH_MODEL)], base.partitions)
        bench = Bench(args, sizes, settings, base, redis, producer, progress, stamp)
        exact = await exact_scenario(bench)
        rounds = [[await cache_run(bench, workload, caches) for caches in CACHE_CONFIGS] for _ in range(sizes.rounds)]
        runs = [median_run([done[i] for done in rounds]) for i in range(len(CACHE_CONFIGS))]
    finally:
        await producer.stop()
        await redis.aclose()
    off, exact_only, on = runs
    speedup = on["requests_per_s"] / off["requests_per_s"]
    checks = verdicts(exact_per_s=exact["requests_per_s"], hit_p99_ms=exact["hit_round_trip"]["p99_ms"],
                      bare_p99_ms=exact["bare_round_trip"]["p99_ms"], speedup=speedup,
                      combined_hit_rate=on["shares"].combined)
    print(f"\ncache scenario (faq-intent {args.precision}, max_batch_size {base.max_batch_size}, burst drain of "
          f"{len(workload.texts):,} requests; latency = result finished_ms - submitted_ms, backlog included):")
    print(cache_table(runs))
    if len(rounds) > 1:
        print("rounds (req/s): " + "; ".join(", ".join(f"{run['caches']} {run['requests_per_s']:,.0f}" for run in done)
                                         for done in rounds) + " (the table shows each configuration's median)")
    print(f"speedup vs off: exact+semantic {speedup:.2f}x, exact only "
          f"{exact_only['requests_per_s'] / off['requests_per_s']:.2f}x")
    print(describe_verifier(on["verifier"]))
    standalone = verifier_ms_per_candidate(base.registry_dir, base_texts())
    print(describe_standalone(standalone))
    print(f"\nexact hits: max_batch_size {exact['max_batch_size']}, {exact['requests']:,} repeats of "
          f"{exact['distinct_inputs']} inputs; req/s over the wall time of run(burst=True)")
    print("\n" + format_verdicts(checks))
    path: Path = args.json or settings.home / "bench" / "cache.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {"meta": {"started": stamp, "quick": args.quick, "seed": args.seed, "cpus": os.cpu_count(),
                         "version": base.model_version, "precision": args.precision, "sizes": asdict(sizes),
                         "wall_s": progress.elapsed_s},
                "workload": {"requests": len(workload.texts), "query_set": workload.query_set_size,
                             "exponent": workload.exponent, "repeat_share": workload.repeat_share},
                "exact": exact, "cache_scenario": [{k: v for k, v in r.items() if k != "shares"} for r in runs],
                "verifier_alone": standalone,
                "speedup": speedup, "speedup_exact_only": exact_only["requests_per_s"] / off["requests_per_s"],
                "targets": [asdict(check) for check in checks]}
    path.write_text(json.dumps(document, indent=2, default=lambda v: None) + "\n")
    plot_beside(path)
    missed = failed(checks)
    print(f"\n{progress.elapsed_s:.0f} s; JSON: {path}")
    for check in missed:
        print(f"target NOT met: {check.scenario}: {check.figure} (target {check.target})")
    return Exit.FAILED if missed else Exit.OK


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = command_parser("bench-cache", __doc__)
    parser.add_argument("--quick", action="store_true", help="CI-sized run (under a minute)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--precision", default="fp32", choices=("fp32", "int8"), help="faq-intent version to serve")
    parser.add_argument("--batch", type=int, default=32, help="max_batch_size of the cache scenario")
    parser.add_argument("--exact-batch", type=int, default=256, help="max_batch_size of the exact-hit scenario")
    parser.add_argument("--threads", type=int, default=0, help="FLEET_INTRA_OP_THREADS; 0 lets ONNX Runtime decide")
    parser.add_argument("--spinning", choices=("on", "off"), help="FLEET_INTRA_OP_SPINNING (default: the "
                        "worker's, which is off where a semantic cache runs a second ONNX Runtime session)")
    parser.add_argument("--workload", type=int, help="requests of the cache scenario (default 4000; 1500 quick); "
                        "the query set has ~1,100 base texts: many more push the hit rate well above 50%%")
    parser.add_argument("--repeat-share", type=float, default=0.55, help="share of requests repeating an earlier "
                        "request's base text (exactly or in a variant) the Zipf exponent is calibrated to")
    parser.add_argument("--json", type=Path, help="default <home>/bench/cache.json")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    return asyncio.run(run(parse_args(argv)))


if __name__ == "__main__":
    raise SystemExit(main())
