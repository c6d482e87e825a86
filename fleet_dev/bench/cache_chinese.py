"""`scripts/bench cache-zh`: the semantic tier on Chinese customer-service traffic, the article's own.

One in-process worker of faq-intent-multilingual (INT8; a bench alias, so no other consumer shares
its topic) with the semantic cache on, fed the stream of fleet_dev/bench/cache_chinese_stream.py
one request at a time through the Python client, under four settings, each from an empty cache;
the encoder is e5-embed in each, the one that reads with the model's tokenizer:

    shipped default       what a worker of the model does unconfigured: e5-embed and the verifier
                          trained through it, cache-verifier-multilingual
    English verifier      cache-verifier decides (FLEET_SEMANTIC_VERIFIER_MODEL=cache-verifier): it
                          cannot read Chinese, so nothing is served (the default before 2026-12-07)
    verifier under the bound
                          the shipped default with FLEET_SEMANTIC_MAX_WRONG_RATE=0.01: the learned bound
                          (δ 1%, 95%) over the verifier's scores, never below its calibrated point
    verifier, bound at 5% the same for an operator who accepts δ = 5% of the answers served wrong
    learned bound         no verifier; the learned bound (δ 1%, 95%) over e5-embed's cosine decides
    cosine and guards     no verifier, no bound: cosine >= 0.90 and the guards (what used to happen)

Every semantic hit is recomputed offline by the same model version, and a hit whose label differs
is a wrong answer served. Printed per setting: the share answered by the semantic tier (goal
>= 10%), the wrong answers served among all answers (goal <= 1%), exact hits; then the wrong answers
themselves, each with the question it was most likely served from (the nearest earlier question,
as the encoder reads them, that the model answered with the label served). The learned bound's
threshold and labels are sampled as the stream goes and drawn beside the shares
(<home>/bench/cache-zh.png, the figures and every wrong answer in cache-zh.json).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from common.clients import redis_client
from common.redis_cluster import AnyRedis
from common.settings import FleetSettings
from fleet.tables import format_table
from fleet_dev.bench.cache_chinese_stream import Query, chinese_stream, fresh_questions, load_groups
from fleet_dev.bench.cache_setup import check_stack
from fleet_dev.bench.fleet_process import bench_alias
from gateway.client import FleetClient
from models.loading import ModelLoader
from models.registry import ModelNotFound, ModelRegistry
from schemas.names import semantic_bound_key, semantic_bounds_index_key
from schemas.wire import CacheTier
from workers import WorkerSettings, bound_from_fields, clear_model_cache
from workers.worker import Worker

MODEL, ENCODER = "faq-intent-multilingual", "e5-embed"
VERIFIERS = ("cache-verifier-multilingual", "cache-verifier")
BENCH_MODEL = "faq-intent-multilingual-bench"
SETTINGS: dict[str, dict[str, Any]] = {
    "shipped default": {},
    "English verifier": {"semantic_verifier_model": "cache-verifier"},
    "verifier under the bound": {"semantic_max_wrong_rate": 0.01},
    "verifier, bound at 5%": {"semantic_max_wrong_rate": 0.05},
    "learned bound": {"semantic_verifier": False, "semantic_max_wrong_rate": 0.01},
    "cosine and guards": {"semantic_verifier": False},
}
MIN_SEMANTIC_SHARE, MAX_WRONG_SHARE = 0.10, 0.01
SAMPLE_EVERY = 50  # requests between two readings of the learned bound


@dataclass(frozen=True)
class Answer:
    index: int  # position in the stream, from 1
    query: Query
    tier: CacheTier
    label: str
    similarity: float | None


@dataclass(frozen=True)
class WrongAnswer:
    index: int
    kind: str
    text: str
    served: str
    right: str
    similarity: float
    likely_from: str  # the earlier computed question nearest to it that the model answered `served`


@dataclass
class Run:
    setting: str
    requests: int = 0
    semantic: int = 0
    semantic_wrong: int = 0
    exact: int = 0
    traps_served: int = 0
    errors: int = 0
    # (requests so far, labels, threshold or NaN, the least δ its labels would serve under now)
    bound: list[tuple[int, int, float, float]] = field(default_factory=list)
    wrong: list[WrongAnswer] = field(default_factory=list)

    @property
    def semantic_share(self) -> float:
        return self.semantic / self.requests if self.requests else math.nan

    @property
    def wrong_share(self) -> float:
        return self.semantic_wrong / self.requests if self.requests else math.nan


def worker_settings(settings: FleetSettings, aliases: ModelRegistry, changes: dict[str, Any]) -> WorkerSettings:
    base = WorkerSettings(model=BENCH_MODEL, model_dir=aliases.root.resolve(), precision="int8",
                          kafka_bootstrap=settings.kafka_bootstrap, redis_url=settings.redis_url, home=settings.home,
                          semantic_cache=True, semantic_only_when_paying=False,
                          max_queue_delay_ms=5, session_timeout_ms=6000)
    return base.model_copy(update=changes)


async def bound_keys(redis: AnyRedis, model: str) -> list[str]:
    """The hashes of the model's learned bounds, from the index its workers keep."""
    members = [m.decode() if isinstance(m, bytes) else m for m in await redis.smembers(semantic_bounds_index_key(model))]
    return [semantic_bound_key(model, *member.split(":", 1)) for member in members]


async def forget(redis: AnyRedis, model: str) -> None:
    """An empty cache and unlearnt bounds: each setting starts cold."""
    await clear_model_cache(redis, model, None)
    await redis.delete(*await bound_keys(redis, model), semantic_bounds_index_key(model))


async def bound_now(redis: AnyRedis, model: str) -> tuple[int, float, float] | None:
    for key in await bound_keys(redis, model):
        bound = bound_from_fields(await redis.hgetall(key))
        if bound is not None:
            threshold = bound.threshold
            return bound.labels, math.nan if threshold is None else threshold, bound.least_rate
    return None


async def run_setting(name: str, settings: WorkerSettings, stream: Sequence[Query], client: FleetClient,
                      redis: AnyRedis) -> tuple[Run, list[Answer]]:
    """The stream through one worker; returns the run and every answer."""
    await forget(redis, BENCH_MODEL)
    run, answers = Run(name), []
    worker = Worker(settings)
    await worker.start()
    task = asyncio.create_task(worker.run())
    try:
        for index, query in enumerate(stream, start=1):
            result = await client.infer(BENCH_MODEL, query.text, timeout=60)
            run.requests += 1
            if result.outputs is None:
                run.errors += 1
            else:
                answers.append(Answer(index, query, result.cache, str(result.outputs["label"]), result.similarity))
            if result.cache is CacheTier.semantic:
                run.semantic += 1
                run.traps_served += query.kind == "trap"
            elif result.cache is CacheTier.exact:
                run.exact += 1
            if index % SAMPLE_EVERY == 0:
                if (reading := await bound_now(redis, BENCH_MODEL)) is not None:
                    run.bound.append((index, *reading))
                print(f"  {name}: {index}/{len(stream)} requests, {run.semantic} semantic hits", flush=True)
    finally:
        worker.request_stop()
        await task
        await worker.stop()
    return run, answers


def count_wrong(run: Run, answers: Sequence[Answer], settings: WorkerSettings) -> None:
    """Recompute every semantic hit with the served version: a different label is a wrong answer,
    itemised with the question it was most likely served from."""
    hits = [answer for answer in answers if answer.tier is CacheTier.semantic]
    if not hits:
        return
    backend = ModelLoader(settings.runtime()).load()
    labels = backend.manifest.labels
    assert labels is not None
    rows = backend.infer([hit.query.text for hit in hits])
    wrong = [(hit, labels[int(i)]) for hit, i in zip(hits, np.argmax(rows, axis=1), strict=True)
             if hit.label != labels[int(i)]]
    run.semantic_wrong = len(wrong)
    if not wrong:
        return
    computed = [answer for answer in answers if answer.tier is CacheTier.miss]
    encoder = ModelLoader(settings.model_copy(update={"model": settings.semantic_encoder_model or ENCODER}).runtime()).load()
    vectors = encoder.infer([answer.query.text for answer in computed])
    wrong_vectors = encoder.infer([hit.query.text for hit, _ in wrong])
    for (hit, right), vector in zip(wrong, wrong_vectors, strict=True):
        earlier = [at for at, answer in enumerate(computed) if answer.index < hit.index and answer.label == hit.label]
        source = max(earlier, key=lambda at: float(vectors[at] @ vector), default=None)
        run.wrong.append(WrongAnswer(hit.index, hit.query.kind, hit.query.text, hit.label, right,
                                     hit.similarity or math.nan, "?" if source is None else computed[source].query.text))


def table(runs: Sequence[Run]) -> str:
    rows = [(r.setting, str(r.requests), f"{r.semantic_share:.1%}", f"{r.semantic_wrong} ({r.wrong_share:.2%})",
             str(r.traps_served), f"{r.exact / r.requests:.1%}" if r.requests else "-",
             "yes" if r.semantic_share >= MIN_SEMANTIC_SHARE and r.wrong_share <= MAX_WRONG_SHARE else "no")
            for r in runs]
    header = ("setting", "requests", "semantic", "wrong served", "traps served", "exact", "goals met")
    return (f"goals: semantic >= {MIN_SEMANTIC_SHARE:.0%} of answers, wrong answers served <= {MAX_WRONG_SHARE:.0%}\n"
            + format_table(header, rows, right=header[1:6]))


def wrong_table(run: Run, shown: int = 15) -> str:
    """The first `shown` wrong answers of a setting, and how many there were of each kind of request."""
    kinds = ", ".join(f"{sum(w.kind == kind for w in run.wrong)} {kind}" for kind in ("new", "repeat", "paraphrase", "trap"))
    rows = [(str(w.index), w.kind, w.text, w.likely_from, f"{w.similarity:.3f}", f"{w.served} -> {w.right}")
            for w in run.wrong[:shown]]
    header = ("#", "kind", "asked", "likely served from", "cosine", "label served -> right")
    more = f"\n... {len(run.wrong) - shown} more in the JSON" if len(run.wrong) > shown else ""
    return (f"{run.setting}: {len(run.wrong)} wrong answers served ({kinds})\n"
            + format_table(header, rows, right=("#", "cosine")) + more)


def draw(runs: Sequence[Run], path: Path) -> Path | None:
    try:
        from fleet_dev.bench.plots import pyplot
        plt = pyplot()
    except ImportError:
        print("no plot: matplotlib is not installed (pip install -e '.[plots]')", file=sys.stderr)
        return None
    figure, (shares, bound) = plt.subplots(1, 2, figsize=(11, 4))
    x = np.arange(len(runs))
    shares.bar(x - 0.2, [100 * r.semantic_share for r in runs], 0.4, label="answered by the semantic tier", color="#26a69a")
    shares.bar(x + 0.2, [100 * r.wrong_share for r in runs], 0.4, label="wrong answers served", color="#e57373")
    shares.axhline(100 * MIN_SEMANTIC_SHARE, color="#26a69a", linestyle=":", linewidth=1)
    shares.axhline(100 * MAX_WRONG_SHARE, color="#e57373", linestyle=":", linewidth=1)
    shares.set_xticks(x, [textwrap.fill(r.setting, 12) for r in runs], fontsize=8)
    shares.set_ylabel("% of requests")
    shares.legend(fontsize=8)
    learning = [r for r in runs if r.bound]
    for run, colour in zip(learning, ("#3f51b5", "#ff9800", "#8e24aa", "#43a047"), strict=False):
        steps = [step for step, *_ in run.bound]
        bound.plot(steps, [100 * least for *_, least in run.bound], color=colour,
                   label=f"{run.setting}: {run.bound[-1][1]} labels")
        delta = SETTINGS[run.setting]["semantic_max_wrong_rate"]
        bound.axhline(100 * delta, color=colour, linestyle=":", linewidth=1)
        warm = next(((step, least) for step, _, threshold, least in run.bound if not math.isnan(threshold)), None)
        if warm is not None:
            bound.scatter([warm[0]], [100 * warm[1]], color=colour, zorder=3,
                          label=f"{run.setting}: under δ = {delta:.0%}, serves from here")
    if learning:
        bound.set_yscale("log")
        bound.set_ylabel("least δ its labels allow now (%)")
        bound.set_xlabel("requests")
        bound.legend(fontsize=7)
        bound.set_title("the learned bound converging: 95% upper bound of the wrong rate at its top score",
                        fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def _newest_precision(registry: ModelRegistry, name: str) -> str | None:
    return "int8" if any(m.precision == "int8" for m in registry.versions(name)) else None


async def main_async(args: argparse.Namespace) -> int:
    settings = FleetSettings()
    await check_stack(settings)
    registry, aliases = ModelRegistry(settings.registry_dir), ModelRegistry(settings.home / "bench" / "models-zh")
    try:
        bench_alias(registry, registry.resolve(MODEL, None, "int8"), aliases, BENCH_MODEL)
        bench_alias(registry, registry.resolve(ENCODER, None, "int8"), aliases, ENCODER)
        for verifier in VERIFIERS:  # INT8 where built, else FP32, as a worker picks
            bench_alias(registry, registry.resolve(verifier, None, _newest_precision(registry, verifier)), aliases,
                        verifier)
    except ModelNotFound as missing:
        raise SystemExit(f"{missing}; build the models with scripts/build-models") from None
    stream = chinese_stream(load_groups(), fresh_questions(), args.requests, args.seed)
    kinds = {kind: sum(q.kind == kind for q in stream) for kind in ("new", "repeat", "paraphrase", "trap")}
    print(f"stream of {len(stream)} Chinese requests (seed {args.seed}): " + ", ".join(f"{n} {k}" for k, n in kinds.items()))
    redis = redis_client(settings)
    runs = []
    try:
        async with FleetClient() as client:
            for name in args.setting or list(SETTINGS):
                served = worker_settings(settings, aliases, SETTINGS[name])
                run, answers = await run_setting(name, served, stream, client, redis)
                count_wrong(run, answers, served)
                runs.append(run)
    finally:
        await forget(redis, BENCH_MODEL)
        await redis.aclose()
    print(table(runs))
    for run in runs:
        if run.wrong:
            print(wrong_table(run))
    out = args.json or settings.home / "bench" / "cache-zh.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"started": datetime.now().isoformat(timespec="seconds"), "stream": kinds,
                               "seed": args.seed, "runs": [asdict(r) for r in runs]}, indent=1, ensure_ascii=False))
    print(f"figures: {out}")
    if (plot := draw(runs, out.with_suffix(".png"))) is not None:
        print(f"plot: {plot}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench cache-zh", description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1200, help="requests of the stream (default 1200)")
    parser.add_argument("--quick", action="store_true", help="400 requests")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--setting", action="append", choices=list(SETTINGS), help="only this one (repeatable)")
    parser.add_argument("--json", type=Path, help="default <home>/bench/cache-zh.json")
    args = parser.parse_args(argv)
    if args.quick:
        args.requests = 400
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
