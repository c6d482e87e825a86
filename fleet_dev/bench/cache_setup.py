"""`scripts/bench cache`'s setup: the stack check, the models it serves (faq-intent and its dear
twin under bench-only names, the semantic encoder and verifier aliased beside them in
<home>/bench/models), their worker settings, and the command line."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from common.settings import FleetSettings
from fleet_dev.arguments import script_parser
from fleet_dev.bench.cache_dear import DEAR_MODEL, TILES, dear_model
from fleet_dev.bench.fleet_process import bench_alias
from fleet_dev.stack.cli import wait_for_kafka, wait_for_redis
from models.registry import ModelManifest, ModelNotFound, ModelRegistry
from workers.settings import WorkerSettings

MODEL, ENCODER, VERIFIER = "faq-intent", "minilm-embed", "cache-verifier"
BENCH_MODEL = "faq-intent-bench"
STACK_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Served:
    """The worker settings of faq-intent and of its dear twin, and the manifests the price list weighs."""

    base: WorkerSettings
    dear: WorkerSettings
    registry: ModelRegistry  # the built models
    aliases: ModelRegistry  # the bench's: what the workers load
    encoder: ModelManifest
    model: ModelManifest
    dear_model: ModelManifest


async def check_stack(settings: FleetSettings) -> None:
    try:
        await wait_for_kafka(settings, STACK_TIMEOUT_S)
        await wait_for_redis(settings, STACK_TIMEOUT_S)
    except Exception as exc:
        raise SystemExit(f"the stack does not answer ({exc}); start it with `scripts/stack up`") from None


def served_models(settings: FleetSettings, args: argparse.Namespace) -> Served:
    """faq-intent, its dear twin and the semantic cache's encoder and verifier, in the bench registry."""
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
    dear = dear_model(registry, model, aliases, args.dear_tiles)
    base = WorkerSettings(model=BENCH_MODEL, model_dir=aliases.root.resolve(), model_version=served.id,
                          precision=args.precision, kafka_bootstrap=settings.kafka_bootstrap,
                          redis_url=settings.redis_url, home=settings.home, max_batch_size=args.batch,
                          intra_op_threads=args.threads,
                          **({} if args.spinning is None else {"intra_op_spinning": args.spinning == "on"}),
                          session_timeout_ms=6000)
    return Served(base, base.model_copy(update={"model": DEAR_MODEL, "model_version": dear.id}), registry, aliases,
                  encoder, model, dear)


def parse_args(argv: list[str] | None, doc: str | None) -> argparse.Namespace:
    parser = script_parser("bench cache", doc)
    parser.add_argument("--quick", action="store_true", help="CI-sized run (a few minutes)")
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
    parser.add_argument("--rounds", type=int, help="interleaved rounds of the cache scenario and the semantic "
                        "tier's A/B; medians count (default 3; 1 quick)")
    parser.add_argument("--dear-tiles", type=int, default=TILES, help="the dear model's sequence is faq-intent's "
                        "this many times over (8: about 25x the INT8 encoder's cost per row; 3: about 7x)")
    parser.add_argument("--json", type=Path, help="default <home>/bench/cache.json")
    return parser.parse_args(argv)
