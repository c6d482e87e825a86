"""A model's cache hit rates per tier, summed over its live workers' heartbeats: each worker
reports its lookups since it started (`cache_<tier>_hits`, `cache_<tier>_misses`), the same
counts as its `fleet_cache_hits_total` / `fleet_cache_misses_total` metrics."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from common.heartbeats import WorkerInfo

TIER_ORDER = ("local", "redis", "semantic")  # the order a lookup tries them in


@dataclass(frozen=True)
class TierRate:
    tier: str
    hits: int
    lookups: int

    @property
    def words(self) -> str:
        return f"{self.tier} {self.hits / self.lookups:.0%} of {self.lookups}"


def tier_rates(workers: Iterable[WorkerInfo]) -> list[TierRate]:
    """Hit rate of each tier that saw lookups, in lookup order."""
    totals: Counter[str] = Counter()
    for worker in workers:
        totals.update(dict(worker.cache))
    tiers = {name.rsplit("_", 1)[0] for name in totals}
    rates = [TierRate(tier, totals[f"{tier}_hits"], totals[f"{tier}_hits"] + totals[f"{tier}_misses"])
             for tier in tiers]
    ranked = {tier: i for i, tier in enumerate(TIER_ORDER)}
    return sorted((r for r in rates if r.lookups), key=lambda r: (ranked.get(r.tier, len(ranked)), r.tier))


def cache_words(workers: Iterable[WorkerInfo]) -> str:
    rates = tier_rates(workers)
    if not rates:
        return "cache: no lookups reported by the live workers (caches off, or no traffic since they started)"
    return "cache hits since the workers started: " + ", ".join(r.words for r in rates) + " lookups"
