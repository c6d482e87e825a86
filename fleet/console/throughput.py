"""Throughput, error rate and p99 per served version, for the overview: the per-version counters
that `fleet rollout status` reads (versions/stats.py), turned into a recent window by keeping the
previous snapshot. A window spans at least MIN_WINDOW_S, so refreshes every 2 s still show a
rate over a few seconds rather than over one batch."""

from __future__ import annotations

import time
from dataclasses import dataclass

from common.redis_cluster import AnyRedis
from versions import StatsSnapshot, StatsWindow, VersionStats

MIN_WINDOW_S = 10.0
MAX_REMEMBERED = 1000


@dataclass(frozen=True)
class VersionFigures:
    version: str
    total_requests: int
    per_s: float | None  # None until a window exists
    error_rate: float | None
    p99_ms: float | None

    @property
    def words(self) -> str:
        total = f"{self.total_requests} requests in all"
        if self.per_s is None:
            return f"{self.version}: {total}; the recent rate shows after {MIN_WINDOW_S:g} s"
        recent = [f"{self.per_s:.1f} req/s"]
        if self.p99_ms is not None:
            recent.append(f"p99 {self.p99_ms:g} ms")
        if self.error_rate is not None:
            recent.append(f"{self.error_rate:.2%} errors")
        return f"{self.version}: {', '.join(recent)} over the last {MIN_WINDOW_S:g} s or more; {total}"


class ThroughputMemory:
    def __init__(self) -> None:
        self._base: dict[tuple[str, str], StatsSnapshot] = {}
        self._window: dict[tuple[str, str], StatsWindow] = {}

    async def figures(self, redis: AnyRedis, model: str, version: str) -> VersionFigures:
        now = await VersionStats.snapshot(redis, model, version, now_s=time.monotonic())
        key = (model, version)
        base = self._base.get(key)
        if base is None or now.taken_s - base.taken_s >= MIN_WINDOW_S:
            if base is not None:
                self._window[key] = now.since(base)
            if len(self._base) >= MAX_REMEMBERED:
                self._base.clear()
                self._window.clear()
            self._base[key] = now
        window = self._window.get(key)
        if window is None or window.seconds <= 0:
            return VersionFigures(version, now.requests, None, None, None)
        return VersionFigures(version, now.requests, window.requests / window.seconds,
                              window.error_rate if window.requests else None, window.p99_ms)
