"""Live counters per model version, which the rollout gates compare candidate against stable.

Worker side: `VersionStatsRecorder.record` adds one delivered batch's figures to the hash
`version_stats_key(model, version)` with a single pipelined round trip. Fields:

- `requests`, `errors`: counts (errors are included in requests);
- `le_<bound>`: a latency histogram in milliseconds, NOT cumulative: `le_20` counts the
  latencies in (15, 20], `le_inf` those above the last bound. Non-cumulative buckets let a
  batch touch only the buckets its latencies fall in.

Neighbouring bounds are at most 1.5x apart, so a p99 that moves up by one bucket never by
itself breaches the default `max_p99_ratio` of 1.5; a p99 read off bucket upper bounds is
accurate to that factor.

Reader side: `VersionStats.snapshot` reads the counters; two snapshots make a `StatsWindow`
(the deltas between them), which is what a rollout stage is judged on. `read_shadow` reads
the shadow consumers' comparison counters of a candidate (`shadow_stats_key`).
"""

from __future__ import annotations

import logging
import math
import time
from bisect import bisect_left
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


from common.redis_cluster import AnyRedis
from schemas.names import shadow_stats_key, version_stats_key

log = logging.getLogger(__name__)

LATENCY_BOUNDS_MS: tuple[float, ...] = (
    1, 1.5, 2, 3, 4, 5, 7.5, 10, 15, 20, 30, 40, 50, 75, 100, 150, 200, 300, 400, 500, 750,
    1000, 1500, 2000, 3000, 4000, 5000, 7500, 10000, math.inf,
)
STATS_TTL_S = 7 * 24 * 3600  # refreshed by every record; a version nobody serves for a week drops its counters


def bucket_field(bound: float) -> str:
    return "le_inf" if math.isinf(bound) else f"le_{bound:g}"


BUCKET_FIELDS: tuple[str, ...] = tuple(bucket_field(bound) for bound in LATENCY_BOUNDS_MS)


def bucket_index(latency_ms: float) -> int:
    """Index of the first bound >= latency (NaN and negatives land in the first bucket)."""
    return bisect_left(LATENCY_BOUNDS_MS, latency_ms) if latency_ms > 0 else 0


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class VersionStatsRecorder:
    """Worker side. `record` never raises: a stats write must not fail or slow a delivered batch."""

    def __init__(self, redis: AnyRedis, model: str) -> None:
        self.redis = redis
        self.model = model
        self.failures = 0

    async def record(self, version: str, ok: int, errors: int, latencies_ms: Sequence[float]) -> bool:
        """Add one batch's figures; False (and a log line) when Redis did not take them."""
        counts = Counter(map(bucket_index, latencies_ms))
        key = version_stats_key(self.model, version)
        try:
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.hincrby(key, "requests", ok + errors)
                if errors:
                    pipe.hincrby(key, "errors", errors)
                for index, count in counts.items():
                    pipe.hincrby(key, BUCKET_FIELDS[index], count)
                pipe.expire(key, STATS_TTL_S)
                await pipe.execute()
            return True
        except Exception as exc:  # noqa: BLE001 - fire and forget, by contract
            self.failures += 1
            if self.failures == 1 or self.failures % 100 == 0:
                log.warning("version stats of %s %s not recorded (%d failures so far): %s",
                            self.model, version, self.failures, exc)
            return False


@dataclass(frozen=True)
class StatsWindow:
    """What happened to one version between two snapshots."""

    requests: int
    errors: int
    buckets: tuple[int, ...]
    seconds: float

    @property
    def error_rate(self) -> float:
        return self.errors / self.requests if self.requests else 0.0

    @property
    def latency_count(self) -> int:
        return sum(self.buckets)

    def quantile_ms(self, q: float) -> float | None:
        """Upper bound of the bucket holding the q-quantile; None without latencies; inf above the last bound."""
        total = self.latency_count
        if total == 0:
            return None
        rank = max(1, math.ceil(q * total))
        seen = 0
        for bound, count in zip(LATENCY_BOUNDS_MS, self.buckets, strict=True):
            seen += count
            if seen >= rank:
                return bound
        return LATENCY_BOUNDS_MS[-1]

    @property
    def p99_ms(self) -> float | None:
        return self.quantile_ms(0.99)


@dataclass(frozen=True)
class StatsSnapshot:
    """A version's counters at one moment (`taken_s` by the reader's clock)."""

    requests: int
    errors: int
    buckets: tuple[int, ...]
    taken_s: float

    @classmethod
    def from_hash(cls, raw: Mapping[bytes | str, bytes | str], taken_s: float) -> StatsSnapshot:
        fields = {_text(k): int(_text(v)) for k, v in raw.items()}
        return cls(requests=fields.get("requests", 0), errors=fields.get("errors", 0),
                   buckets=tuple(fields.get(name, 0) for name in BUCKET_FIELDS), taken_s=taken_s)

    @classmethod
    def empty(cls, taken_s: float = 0.0) -> StatsSnapshot:
        return cls(0, 0, (0,) * len(BUCKET_FIELDS), taken_s)

    def since(self, earlier: StatsSnapshot) -> StatsWindow:
        """The deltas from `earlier`; when a counter went down (the hash expired or was reset) the
        window is everything counted since the reset, i.e. this snapshot's totals."""
        deltas = [self.requests - earlier.requests, self.errors - earlier.errors,
                  *(now - then for now, then in zip(self.buckets, earlier.buckets, strict=True))]
        seconds = max(0.0, self.taken_s - earlier.taken_s)
        if min(deltas) < 0:
            return StatsWindow(self.requests, self.errors, self.buckets, seconds)
        return StatsWindow(deltas[0], deltas[1], tuple(deltas[2:]), seconds)

    def total(self) -> StatsWindow:
        """Everything counted so far, as a window."""
        return StatsWindow(self.requests, self.errors, self.buckets, 0.0)


class VersionStats:
    """Reader side of the per-version counters."""

    @staticmethod
    async def snapshot(redis: AnyRedis, model: str, version: str, *, now_s: float | None = None) -> StatsSnapshot:
        raw = await redis.hgetall(version_stats_key(model, version))  # type: ignore[misc]
        return StatsSnapshot.from_hash(raw, time.monotonic() if now_s is None else now_s)


@dataclass(frozen=True)
class ShadowSnapshot:
    """The shadow consumers' comparison counters of a candidate against stable (cumulative)."""

    compared: int = 0
    agreed: int = 0
    cosine_sum: float | None = None
    label_agreed: int | None = None
    live_ms_sum: float = 0.0
    shadow_ms_sum: float = 0.0
    errors: int = 0  # requests the candidate failed on in shadow: not compared, so not in `compared`
    live_timed: int | None = None  # comparisons with a live timing (cache hits have none); None: all
    recomputed: int = 0  # comparisons whose stable answer the shadow computed itself (no live result)

    @property
    def agreement(self) -> float | None:
        return self.agreed / self.compared if self.compared else None

    @property
    def mean_cosine(self) -> float | None:
        return self.cosine_sum / self.compared if self.compared and self.cosine_sum is not None else None

    @property
    def error_rate(self) -> float | None:
        attempts = self.compared + self.errors
        return self.errors / attempts if attempts else None

    @property
    def mean_live_ms(self) -> float | None:
        live_timed = self.compared if self.live_timed is None else self.live_timed
        return self.live_ms_sum / live_timed if live_timed else None

    @property
    def mean_shadow_ms(self) -> float | None:
        return self.shadow_ms_sum / self.compared if self.compared else None

    @property
    def latency_delta_ms(self) -> float | None:
        """Mean shadow latency minus mean live latency."""
        live, shadow = self.mean_live_ms, self.mean_shadow_ms
        return None if live is None or shadow is None else shadow - live

    @classmethod
    def from_hash(cls, raw: Mapping[bytes | str, bytes | str]) -> ShadowSnapshot:
        fields = {_text(k): _text(v) for k, v in raw.items()}

        def number(name: str) -> float | None:
            return float(fields[name]) if name in fields else None

        label_agreed = number("label_agreed")
        return cls(compared=int(float(fields.get("compared", 0))), agreed=int(float(fields.get("agreed", 0))),
                   cosine_sum=number("cosine_sum"),
                   label_agreed=None if label_agreed is None else int(label_agreed),
                   live_ms_sum=number("live_ms_sum") or 0.0, shadow_ms_sum=number("shadow_ms_sum") or 0.0,
                   errors=int(number("errors") or 0),
                   live_timed=None if "live_timed" not in fields else int(float(fields["live_timed"])),
                   recomputed=int(number("recomputed") or 0))


async def read_shadow(redis: AnyRedis, model: str, candidate: str) -> ShadowSnapshot:
    return ShadowSnapshot.from_hash(await redis.hgetall(shadow_stats_key(model, candidate)))  # type: ignore[misc]
