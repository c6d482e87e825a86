"""The console's line for each learned bound of the versions a model's workers serve, read from the
hash the workers share in the real Redis."""

from __future__ import annotations

import secrets

from redis.asyncio import Redis

from fleet.console.semantic_bounds import bound_lines
from schemas.names import semantic_bound_key, semantic_bounds_index_key
from workers.cache.learned_bound import LearnedBound, SharedBound


async def test_the_console_says_what_each_served_versions_bound_serves(redis: Redis) -> None:
    model = f"bounds-{secrets.token_hex(4)}"
    keys = [semantic_bound_key(model, version, "cosine-e") for version in ("v1", "v2", "old")]
    try:
        for version, labels in (("v1", 400), ("v2", 10), ("old", 400)):
            shared = SharedBound(redis, semantic_bound_key(model, version, "cosine-e"), LearnedBound(0.01, floor=0.5),
                                 index=(semantic_bounds_index_key(model), f"{version}:cosine-e"))
            assert shared.least_rate == 1.0, "no labels read yet"
            shared.add([(0.97, True)] * labels)
            await shared.sync()
            assert shared.least_rate == shared.bound.least_rate < 1.0, "kept from the read, for the metrics"
        lines = await bound_lines(redis, model, ["v1", "v2"])
    finally:
        await redis.delete(*keys, semantic_bounds_index_key(model))
    assert lines == [
        "semantic hits of v1 (scores of cosine-e): at most 1.00% wrong with 95% confidence: serves scores >= 0.96 "
        "(400 labels, 0 wrong)",
        "semantic hits of v2 (scores of cosine-e): at most 1.00% wrong with 95% confidence: cold, serves nothing yet "
        "(10 labels, 0 wrong; about 299 right ones at a score are needed; its labels allow 25.89% now)",
    ], "the version no worker serves is left out"
    assert await bound_lines(redis, f"{model}-none", ["v1"]) == [], "no bound, no line"
