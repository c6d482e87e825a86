"""`scripts/bench cache`: the result caches measured through the real worker, Kafka and Redis (issue 4).

One in-process Worker serves `faq-intent` under a bench-only name (`faq-intent-bench`, the
same registered bytes symlinked into <home>/bench/models, so its own topic, consumer group and
cache keys); requests come from Kafka and replies go to a Redis waiter stream. Each scenario
starts from `clear_model_cache` and a fresh worker.

1. Exact hits: K inputs computed once, then N repeats pre-produced and drained in burst mode;
   throughput = N / wall time of `run(burst=True)` (the worker already started and joined; the
   time includes its first fetch and the final drained check). Then ~300 sequential requests
   to the running worker (all hits), alternating with a bare round trip (produce -> a minimal
   aiokafka consumer in this process -> XADD -> read), same producer, same waiter.
2. Caches at ~50% combined hit rate: a seeded Zipf workload (fleet_dev/bench/cache_workload.py)
   drained in burst mode with caches off, exact only, and exact + semantic (the target compares
   the last with the first), otherwise equal settings.
3. The semantic tier's A/B (fleet_dev/bench/cache_tier.py): the same workload on faq-intent (2.
   gives its runs) and on `faq-intent-dear`, a twin several times dearer than the encoder
   (fleet_dev/bench/cache_dear.py), exact only vs exact + semantic. The rounds of 2. and 3. are
   interleaved (--rounds, 3 by default): each round runs every configuration of both models
   once, so a shared machine's load falls on all alike; ratios are taken within a round.

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
from fleet_dev.bench.batching import Progress
from fleet_dev.bench.cache_dear import describe_prices, price_list
from fleet_dev.bench.cache_setup import BENCH_MODEL, check_stack, parse_args, served_models
from fleet_dev.bench.cache_report import Results, document, report
from fleet_dev.bench.cache_tier import ALWAYS, CONFIGS, OFF, ON, TIER_CONFIGS, median_run, tier_summary
from fleet_dev.bench.cache_verifier import verifier_cost, verifier_ms_per_candidate
from fleet_dev.bench.cache_workload import Workload, base_texts, cache_workload, failed, query_set, tier_shares
from fleet_dev.bench.plots import plot_beside
from fleet_dev.bench.stats import LatencySummary
from fleet.exits import Exit
from common.clients import new_consumer, new_producer, redis_client
from common.settings import FleetSettings
from common.topics import ensure_topics, partitions_of
from gateway.waiter import ReplyWaiter
from schemas.names import consumer_group, reply_stream, requests_topic
from schemas.wire import ReplyTo, Request, Result, Status, new_request_id, now_ms
from workers.cache.exact import clear_model_cache
from workers.worker import Worker
from workers.settings import WorkerSettings

BARE_TOPIC = "fleet_dev.bench.batching.bare-echo"
REQUEST_TIMEOUT_S = 600.0  # backlog requests must not expire while they wait
ROUND_TRIP_TIMEOUT_S = 10.0
# The cache scenario's rows (settings in CONFIGS); the target compares the last with the first.
CACHE_CONFIGS = ("off", OFF, ON)


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
        return [Request(id=new_request_id(), model=self.base.model, inputs={"text": text}, reply=ReplyTo(redis=waiter),
                        deadline_ms=submitted + int(REQUEST_TIMEOUT_S * 1000), submitted_ms=submitted)
                for text in texts]

    async def produce(self, requests: Sequence[Request], topic: str | None = None) -> None:
        topic = topic or requests_topic(self.base.model)
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
    registry, model = worker.metrics.cache.registry, worker.settings.model
    values = {tier: registry.get_sample_value("fleet_cache_hits_total", {"model": model, "tier": tier}) or 0.0
              for tier in ("local", "redis", "semantic")}
    values["semantic_misses"] = registry.get_sample_value("fleet_cache_misses_total",
                                                          {"model": model, "tier": "semantic"}) or 0.0
    for accepted in ("true", "false"):
        values["verifier_accepted" if accepted == "true" else "verifier_refused"] = registry.get_sample_value(
            "fleet_cache_verifier_candidates_total", {"model": model, "accepted": accepted}) or 0.0
    values["dedupe"] = registry.get_sample_value("fleet_cache_dedupe_total", {"model": model}) or 0.0
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
            hits, bare = await round_trips(bench, waiter, [worker.topics[0], BARE_TOPIC], inputs, sizes.round_trips)
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
    """One burst drain of the workload with `caches` in CONFIGS."""
    model = bench.base.model
    label = f"{model}: caches {caches}"
    await clear_model_cache(bench.redis, model, None)
    settings = bench.worker_settings(**CONFIGS[caches])
    worker = await bench.fresh_worker(settings)
    try:
        warm = f"bench-{bench.stamp}-{model}-warm-{caches.replace('+', '-')}"
        await bench.produce(bench.requests([f"zz warm-up probe {bench.stamp}"], warm))
        await bench.burst(worker, f"{label} warm-up")  # loads the semantic encoder and rebuilds its index
        await bench.replies(warm, 1)
        waiter_id = f"bench-{bench.stamp}-{model}-zipf-{caches.replace('+', '-')}"
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
    return {"model": model, "caches": caches, "requests": len(requests), "wall_s": wall_s, "requests_per_s": per_s,
            "latency": asdict(latency), "tiers": shares.as_dict(), "counters": counters,
            "max_batch_size": settings.max_batch_size, "shares": shares, "verifier": verifier}


async def interleaved_rounds(bench: Bench, dear: Bench, workload: Workload, rounds: int) -> list[list[dict[str, Any]]]:
    """Each round: faq-intent with every cache configuration, then the dear model off and on."""
    plan = [(bench, caches) for caches in (*CACHE_CONFIGS, ALWAYS)] + [(dear, caches) for caches in TIER_CONFIGS]
    done = []
    for index in range(rounds):
        bench.progress.say(f"round {index + 1} of {rounds}")
        done.append([await cache_run(served, workload, caches) for served, caches in plan])
    return done


def tier_rounds(rounds: Sequence[Sequence[dict[str, Any]]], model: str) -> list[dict[str, dict[str, Any]]]:
    """Each round's semantic-off and -on runs of `model`, by configuration."""
    return [{run["caches"]: run for run in done if run["model"] == model and run["caches"] in TIER_CONFIGS}
            for done in rounds]


async def skip_leftovers(settings: WorkerSettings) -> None:
    """Requests an interrupted bench left on the model's topic: its group moves past them, unread
    (a worker's warm-up would otherwise drain them and fill the cache before the timed run)."""
    topic = requests_topic(settings.model)
    consumer = new_consumer(settings, group_id=consumer_group(settings.model, settings.role.value),
                            enable_auto_commit=False)
    await consumer.start()
    try:
        partitions = await partitions_of(settings, topic)
        consumer.assign(partitions)
        await consumer.seek_to_end(*partitions)
        await consumer.commit({tp: await consumer.position(tp) for tp in partitions})
    finally:
        await consumer.stop()


async def measure(args: argparse.Namespace, sizes: Sizes, settings: FleetSettings, served: Any, workload: Workload,
                  progress: Progress, stamp: str) -> tuple[dict[str, Any], list[list[dict[str, Any]]]]:
    """Scenario 1, then the interleaved rounds of scenarios 2 and 3."""
    redis = redis_client(settings)
    producer = new_producer(settings, linger_ms=0, max_batch_size=512 * 1024)
    await producer.start()
    try:
        await ensure_topics(settings, [requests_topic(BENCH_MODEL), requests_topic(served.dear.model)],
                            served.base.partitions)
        for model in (served.base, served.dear):
            await skip_leftovers(model)
        bench = Bench(args, sizes, settings, served.base, redis, producer, progress, stamp)
        exact = await exact_scenario(bench)
        dear = Bench(args, sizes, settings, served.dear, redis, producer, progress, stamp)
        return exact, await interleaved_rounds(bench, dear, workload, args.rounds or sizes.rounds)
    finally:
        await producer.stop()
        await redis.aclose()


async def run(args: argparse.Namespace) -> int:
    sizes = QUICK if args.quick else FULL
    settings = FleetSettings()
    await check_stack(settings)
    served = served_models(settings, args)
    base, dear = served.base, served.dear
    progress, stamp = Progress(), time.strftime("%Y%m%d-%H%M%S")
    workload = cache_workload(args.workload or sizes.workload, seed=args.seed, repeat_share=args.repeat_share)
    print(f"cache bench ({'quick' if args.quick else 'full'}): {BENCH_MODEL} = {base.model_version} "
          f"({args.precision}), {dear.model} = {dear.model_version}, {os.cpu_count()} CPUs; Zipf "
          f"workload: {len(workload.texts):,} requests over {workload.query_set_size:,} queries, exponent "
          f"{workload.exponent:.3f}, exact repeats {workload.repeat_share:.1%}, seed {args.seed}", flush=True)
    texts = query_set(base_texts(), args.seed)[:256]
    prices = price_list({"encoder": (served.registry.root, served.encoder),
                         "faq-intent": (served.registry.root, served.model),
                         dear.model: (served.aliases.root, served.dear_model)}, texts)
    print(describe_prices(prices, len(texts)), flush=True)
    exact, rounds = await measure(args, sizes, settings, served, workload, progress, stamp)
    tier = [tier_summary("faq-intent", tier_rounds(rounds, BENCH_MODEL), prices["faq-intent"]),
            tier_summary(dear.model, tier_rounds(rounds, dear.model), prices[dear.model])]
    results = Results(exact, [median_run([done[i] for done in rounds]) for i in range(len(CACHE_CONFIGS))], rounds,
                      tier, prices, verifier_ms_per_candidate(base.registry_dir, base_texts()))
    checks = report(results, workload, base, args.precision)
    path: Path = args.json or settings.home / "bench" / "cache.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {"started": stamp, "quick": args.quick, "seed": args.seed, "cpus": os.cpu_count(),
            "version": base.model_version, "dear_version": dear.model_version, "precision": args.precision,
            "sizes": asdict(sizes), "rounds": len(rounds), "wall_s": progress.elapsed_s}
    path.write_text(json.dumps(document(results, checks, meta, workload), indent=2, default=lambda v: None) + "\n")
    plot_beside(path)
    missed = failed(checks)
    print(f"\n{progress.elapsed_s:.0f} s; JSON: {path}")
    for check in missed:
        print(f"target NOT met: {check.scenario}: {check.figure} (target {check.target})")
    return Exit.FAILED if missed else Exit.OK


def main(argv: list[str] | None = None) -> int:
    return asyncio.run(run(parse_args(argv, __doc__)))


if __name__ == "__main__":
    raise SystemExit(main())
