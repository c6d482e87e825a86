"""A model's cache hit rates per tier, summed over its workers' heartbeats."""

from __future__ import annotations

from common.heartbeats import WorkerInfo
from fleet.console.cache_rates import cache_words, tier_rates


def worker(name: str, *cache: tuple[str, int]) -> WorkerInfo:
    return WorkerInfo(worker=name, model="m", role="primary", device="cpu", state="healthy", reason="", version="v",
                      lag=0, beat_ms=0, age_s=0.0, cache=tuple(cache))


def test_tiers_are_summed_over_workers_in_lookup_order() -> None:
    workers = [worker("w1", ("redis_hits", 1), ("redis_misses", 3), ("local_hits", 2), ("local_misses", 8)),
               worker("w2", ("local_hits", 3), ("local_misses", 7))]
    assert [(r.tier, r.hits, r.lookups) for r in tier_rates(workers)] == [("local", 5, 20), ("redis", 1, 4)]
    assert cache_words(workers) == "cache hits since the workers started: local 25% of 20, redis 25% of 4 lookups"


def test_tiers_without_lookups_and_old_heartbeats_show_no_rate() -> None:
    workers = [worker("w1", ("semantic_hits", 0), ("semantic_misses", 0)), worker("old")]
    assert tier_rates(workers) == []
    assert cache_words(workers).startswith("cache: no lookups reported")
