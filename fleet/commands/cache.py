"""`fleet cache`: invalidate and inspect a model's result caches.

    fleet cache clear <model> [--version V]   drop the exact entries (Redis + every worker's
                                              in-process tier) and the semantic-cache topic(s)
    fleet cache stats <model>                 Redis entries per version, the cache generation,
                                              Redis memory and its eviction policy

Clearing bumps the model's cache generation first, so no worker serves an old exact entry from
Redis from that moment on, and each worker drops its in-process tier at its next generation
refresh. The bump is model-wide: clearing one version also retires the other versions' exact
entries (unread until they expire). Semantic entries live in one compacted Kafka topic per
model version; deleting the topic drops them, and workers start a fresh one.
"""

from __future__ import annotations

import asyncio
import sys
from collections import Counter

from aiokafka.errors import KafkaError

from common.redis_cluster import AnyRedis
from common.clients import new_admin
from common.settings import FleetSettings
from fleet.arguments import command_parser
from fleet.commands.redis_access import with_redis
from fleet.exits import Exit
from fleet.tables import format_table
from fleet.unreachable import unreachable
from models import parse_version_id
from schemas.names import TOPIC_PREFIX, cache_generation_key, exact_cache_pattern, semantic_cache_topic
from workers import CACHE_SCAN_BATCH, clear_model_cache


def semantic_topics_of(model: str, version: str | None, existing: list[str]) -> list[str]:
    """The semantic-cache topics of a model (or one version) among existing topics.

    Model names may contain dots, so a bare prefix match would also catch model `a.b` when
    clearing `a`; a version id is `<model>-YYYYMMDD-NNN`, which tells them apart.
    """
    if version is not None:
        wanted = semantic_cache_topic(model, version)
        return [wanted] if wanted in existing else []
    prefix = semantic_cache_topic(model, "")
    return sorted(t for t in existing
                  if t.startswith(prefix) and parse_version_id(model, t.removeprefix(prefix)) is not None)


async def delete_semantic_topics(settings: FleetSettings, model: str, version: str | None) -> list[str]:
    admin = new_admin(settings, request_timeout_ms=10_000)
    await admin.start()
    try:
        doomed = semantic_topics_of(model, version, await admin.list_topics())
        if doomed:
            await admin.delete_topics(doomed)
        return doomed
    finally:
        await admin.close()


def parse_entry_key(model: str, key: str) -> tuple[str, int] | None:
    """(version, generation) of `fleet:cache:<model>:<version>:g<gen>:<digest>`, None for other keys."""
    parts = key.removeprefix(f"{TOPIC_PREFIX}:cache:{model}:").split(":")
    if len(parts) != 3 or not parts[1].startswith("g") or not parts[1][1:].isdigit():
        return None
    return parts[0], int(parts[1][1:])


async def clear(redis: AnyRedis, settings: FleetSettings, model: str, version: str | None) -> int:
    what = f"{model} version {version}" if version else f"{model} (all versions)"
    deleted = await clear_model_cache(redis, model, version)
    generation = int(await redis.get(cache_generation_key(model)) or 0)
    print(f"exact cache of {what}: {deleted} Redis entries deleted; generation now {generation} "
          "(workers drop their in-process tier at their next refresh)")
    try:
        topics = await delete_semantic_topics(settings, model, version)
    except (KafkaError, OSError) as exc:
        print(f"semantic cache of {what}: {unreachable('Kafka', settings.kafka_bootstrap, exc)} "
              "The exact cache is cleared; rerun to delete the semantic topics.", file=sys.stderr)
        return Exit.UNAVAILABLE
    print(f"semantic cache of {what}: " + (f"deleted topic(s) {', '.join(topics)}" if topics else "no topic to delete"))
    return Exit.OK


async def stats(redis: AnyRedis, model: str) -> int:
    generation = int(await redis.get(cache_generation_key(model)) or 0)
    current: Counter[str] = Counter()
    stale: Counter[str] = Counter()
    async for raw in redis.scan_iter(match=exact_cache_pattern(model), count=CACHE_SCAN_BATCH):
        parsed = parse_entry_key(model, raw.decode() if isinstance(raw, bytes) else raw)
        if parsed is not None:
            (current if parsed[1] == generation else stale)[parsed[0]] += 1
    memory = await redis.info("memory")
    print(f"exact cache of {model}: generation {generation}")
    versions = sorted(set(current) | set(stale))
    if versions:
        print(format_table(("version", "entries", "stale"), [(v, str(current[v]), str(stale[v])) for v in versions],
                           indent="  "))
        print("  (stale: written before the last `fleet cache clear`; never read, gone at their TTL)")
    else:
        print("  no entries in Redis")
    print(f"redis memory: used {memory.get('used_memory_human', '?')}, "
          f"maxmemory {memory.get('maxmemory_human', '?')} ({memory.get('maxmemory', '?')} bytes), "
          f"policy {memory.get('maxmemory_policy', '?')}")
    return Exit.OK


def main(argv: list[str] | None = None) -> int:
    parser = command_parser("cache", __doc__)
    commands = parser.add_subparsers(dest="action", required=True)
    clear_parser = commands.add_parser("clear", help="drop a model's cached results (exact and semantic)")
    clear_parser.add_argument("model")
    clear_parser.add_argument("--version", help="only this model version (default: every version)")
    stats_parser = commands.add_parser("stats", help="Redis entries per version, generation, Redis memory")
    stats_parser.add_argument("model")
    args = parser.parse_args(argv)
    settings = FleetSettings()
    if args.action == "clear":
        return asyncio.run(with_redis(settings, lambda redis: clear(redis, settings, args.model, args.version)))
    return asyncio.run(with_redis(settings, lambda redis: stats(redis, args.model)))


if __name__ == "__main__":
    raise SystemExit(main())
