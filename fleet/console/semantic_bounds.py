"""What each learned bound of a model's semantic tier serves now, read from the hashes its workers
share (workers/cache/learned_bound.py): the threshold is learnt again here from the same counts
and parameters, so the console says what the workers decide."""

from __future__ import annotations

from collections.abc import Iterable

from common.redis_cluster import AnyRedis
from schemas.names import semantic_bound_key, semantic_bounds_index_key
from workers import bound_from_fields, describe_bound

MAX_SHOWN = 8  # bounds per model: one per version and scorer the workers serve


async def bound_lines(redis: AnyRedis, model: str, versions: Iterable[str]) -> list[str]:
    """A line per learned bound of the versions the model's workers serve; none when the bound is off."""
    served = set(versions)
    members = sorted(m.decode() if isinstance(m, bytes) else m
                     for m in await redis.smembers(semantic_bounds_index_key(model)))
    lines = []
    for member in members:
        version, _, scorer = member.partition(":")
        if version not in served or len(lines) >= MAX_SHOWN:
            continue
        bound = bound_from_fields(await redis.hgetall(semantic_bound_key(model, version, scorer)))
        if bound is not None:
            lines.append(f"semantic hits of {version} (scores of {scorer}): {describe_bound(bound)}")
    return lines
