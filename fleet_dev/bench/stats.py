"""Pure helpers of the benchmark: percentiles, latency summaries, a seeded Poisson schedule."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0 <= q <= 100) with linear interpolation between ranks (numpy's
    default); NaN for no values, so an empty phase prints as '-' instead of failing."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be within [0, 100], got {q}")
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    below = math.floor(rank)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (rank - below)


def median(values: Sequence[float]) -> float:
    return percentile(values, 50)


@dataclass(frozen=True)
class LatencySummary:
    count: int
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float

    @classmethod
    def of(cls, latencies_ms: Sequence[float]) -> LatencySummary:
        return cls(count=len(latencies_ms), p50_ms=percentile(latencies_ms, 50),
                   p95_ms=percentile(latencies_ms, 95), p99_ms=percentile(latencies_ms, 99),
                   max_ms=max(latencies_ms) if latencies_ms else math.nan)


def poisson_arrivals(rate_per_s: float, duration_s: float, seed: int) -> list[float]:
    """Send times (seconds from the start, increasing, all < duration_s) of a Poisson process:
    exponential gaps with mean 1/rate, the same list for the same seed."""
    if rate_per_s <= 0 or duration_s <= 0:
        raise ValueError(f"rate and duration must be > 0, got {rate_per_s} /s for {duration_s} s")
    rng = random.Random(seed)
    arrivals: list[float] = []
    at = rng.expovariate(rate_per_s)
    while at < duration_s:
        arrivals.append(at)
        at += rng.expovariate(rate_per_s)
    return arrivals
