"""`scripts/bench redis-memory`: what one result, one cache entry and one reply cost in Redis.

    python -m fleet_dev.bench.redis_memory [--count N]

Writes N entries of each kind into the stack's Redis exactly as the fleet writes them (the
worker's result payload under `fleet:result:<id>` with its TTL, the exact cache's packed outputs
under its key, a reply-stream entry as the deliver script adds it), measures what they hold with
`MEMORY USAGE` (SAMPLES 0: every element), and deletes them again. `MEMORY USAGE` counts a key, its
value and the allocator's size classes for both, but not a TTL's entry in the expiry table (about
32 B more a key). It is summed over the keys written, so other clients' writes and frees meanwhile
do not count: a `used_memory` delta did, and expiring keys of earlier runs once made a label's cache
entry measure -70 B. Kinds: a 384-float embedding result (minilm-embed) and a
label-and-score result (faq-intent). The figures feed the "Sizing" arithmetic of
docs/how-to/scale.md: Redis memory = results per TTL x bytes per result + cache entries x bytes
per entry + unread replies.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass


from common.redis_cluster import AnyRedis
from common.clients import redis_client
from common.settings import FleetSettings
from fleet_dev.arguments import script_parser
from fleet.exits import Exit
from fleet.tables import format_table
from schemas.names import exact_cache_key, reply_stream, result_key
from schemas.wire import CacheTier, Result, Status, new_request_id, now_ms
from workers.cache.exact import pack_outputs

PIPELINE = 500
TTL_S = 3600
BENCH_PREFIX_MODEL = "bench-redis-memory"
TIMINGS = ("queue_ms", "topic_ms", "batch_wait_ms", "tokenize_ms", "inference_ms", "since_submit_ms")


@dataclass(frozen=True)
class Kind:
    name: str
    outputs: Callable[[random.Random], dict[str, object]]


def _embedding(rng: random.Random) -> dict[str, object]:
    return {"embedding": list(struct.unpack("384f", struct.pack("384f", *(rng.gauss(0, 0.05) for _ in range(384)))))}


def _label(rng: random.Random) -> dict[str, object]:
    return {"label": f"intent_{rng.randrange(23):02d}", "score": rng.random()}


KINDS = (Kind("embedding (384 floats)", _embedding), Kind("label + score", _label))


def result_payload(rng: random.Random, kind: Kind) -> tuple[str, bytes]:
    """A result as a worker delivers it: outputs, provenance, timings, tenant."""
    request_id = new_request_id()
    result = Result(id=request_id, model=BENCH_PREFIX_MODEL, version=f"{BENCH_PREFIX_MODEL}-20261201-001",
                    status=Status.ok, outputs=kind.outputs(rng), cache=CacheTier.miss, device="cuda:0",
                    batch_size=64, timings={name: rng.uniform(0, 200) for name in TIMINGS},
                    worker="worker-7f3a9c", finished_ms=now_ms(), tenant="acme")
    return request_id, result.encode()


async def _memory_usage(redis: AnyRedis, keys: list[str]) -> int:
    """Bytes the keys hold, every element counted."""
    total = 0
    for start in range(0, len(keys), PIPELINE):
        async with redis.pipeline(transaction=False) as pipe:
            for key in keys[start:start + PIPELINE]:
                pipe.memory_usage(key, samples=0)
            total += sum(int(used or 0) for used in await pipe.execute())
    return total


async def _measure(redis: AnyRedis, count: int, write: Callable[[object, int], None], keys: list[str]) -> float:
    """Bytes per entry that `write` adds, `count` times, in pipelines, into `keys`."""
    for start in range(0, count, PIPELINE):
        async with redis.pipeline(transaction=False) as pipe:
            for i in range(start, min(start + PIPELINE, count)):
                write(pipe, i)
            await pipe.execute()
    held = await _memory_usage(redis, keys)
    for start in range(0, len(keys), PIPELINE):
        await redis.unlink(*keys[start:start + PIPELINE])
    return held / count


async def measure_kind(redis: AnyRedis, kind: Kind, count: int, seed: int = 7) -> dict[str, float]:
    rng = random.Random(seed)
    payloads = [result_payload(rng, kind) for _ in range(count)]
    outputs = [pack_outputs(kind.outputs(rng)) for _ in range(count)]
    result_keys = [result_key(request_id) for request_id, _ in payloads]
    cache_keys = [exact_cache_key(BENCH_PREFIX_MODEL, "v1", f"{i:032x}") for i in range(count)]
    stream = reply_stream(f"bench-{new_request_id()}")
    per_result = await _measure(redis, count, lambda pipe, i: pipe.set(result_keys[i], payloads[i][1], ex=TTL_S),
                                result_keys)
    per_entry = await _measure(redis, count, lambda pipe, i: pipe.set(cache_keys[i], outputs[i], ex=TTL_S),
                               cache_keys)
    per_reply = await _measure(
        redis, count,
        lambda pipe, i: pipe.xadd(stream, {"id": payloads[i][0], "result": payloads[i][1]}, maxlen=count + 1,
                                  approximate=True),
        [stream])
    return {"payload": sum(len(p) for _, p in payloads) / count, "result": per_result, "cache": per_entry,
            "reply": per_reply}


def _kib(value: float) -> str:
    return f"{value / 1024:,.2f} KiB"


async def run(settings: FleetSettings, count: int) -> int:
    redis = redis_client(settings)
    try:
        rows = []
        for kind in KINDS:
            print(f"writing {count:,} results, cache entries and replies of kind {kind.name} ...", file=sys.stderr)
            figures = await measure_kind(redis, kind, count)
            rows.append((kind.name, f"{figures['payload']:,.0f} B", _kib(figures["result"]), _kib(figures["cache"]),
                         _kib(figures["reply"])))
    finally:
        await redis.aclose()
    print(format_table(("result kind", "payload", "per result key", "per exact-cache entry", "per unread reply"),
                       rows))
    print(f"\n(MEMORY USAGE / {count:,} entries, a TTL's expiry entry (~32 B) not counted; results and cache "
          f"entries with a {TTL_S} s TTL; replies in one reply stream)")
    return Exit.OK


def main(argv: list[str] | None = None) -> int:
    parser = script_parser("bench redis-memory", __doc__)
    parser.add_argument("--count", type=int, default=20_000, help="entries of each kind (default 20,000)")
    args: argparse.Namespace = parser.parse_args(argv)
    return asyncio.run(run(FleetSettings(), args.count))


if __name__ == "__main__":
    raise SystemExit(main())
