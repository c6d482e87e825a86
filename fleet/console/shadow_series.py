"""The Shadow page's plots and table, from the candidate's recent comparisons (already masked):
agreement over time, mean latency per version over time, and the worst disagreements."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fleet.commands.shadow_report import worst_first
from schemas.shadow import Comparison

MAX_POINTS = 60  # buckets per plot: enough to see a trend, few enough for a slow link


@dataclass(frozen=True)
class ShadowSeries:
    """Columns for uPlot: bucket times (Unix seconds) and one value per bucket (None: no timing)."""

    times: list[float]
    agreement: list[float]  # share of the bucket's comparisons that agreed, 0..1
    live_ms: list[float | None]  # mean latency of the live (stable) version
    shadow_ms: list[float | None]  # mean latency of the candidate

    def as_json(self) -> dict[str, list[float | None]] | None:
        if len(self.times) < 2:
            return None
        return {"t": list(self.times), "agreement": list(self.agreement), "live_ms": self.live_ms,
                "shadow_ms": self.shadow_ms}


def _mean(values: Sequence[float]) -> float | None:
    return round(sum(values) / len(values), 3) if values else None


def shadow_series(comparisons: Sequence[Comparison], max_points: int = MAX_POINTS) -> ShadowSeries:
    """Comparisons grouped into at most `max_points` equal time buckets; empty buckets are left out."""
    if not comparisons:
        return ShadowSeries([], [], [], [])
    first = min(c.time_ms for c in comparisons)
    span = max(c.time_ms for c in comparisons) - first
    width = max(span / max_points, 1.0)
    buckets: dict[int, list[Comparison]] = {}
    for comparison in comparisons:
        buckets.setdefault(min(int((comparison.time_ms - first) / width), max_points - 1), []).append(comparison)
    series = ShadowSeries([], [], [], [])
    for index in sorted(buckets):
        chosen = buckets[index]
        series.times.append(round((first + index * width) / 1000, 3))
        series.agreement.append(round(sum(c.agreed for c in chosen) / len(chosen), 4))
        series.live_ms.append(_mean([c.live_ms for c in chosen if c.live_ms is not None]))
        series.shadow_ms.append(_mean([c.shadow_ms for c in chosen]))
    return series


def worst_rows(comparisons: Sequence[Comparison], count: int = 10) -> list[dict[str, str]]:
    """The worst disagreements as table rows; `input` is the masked excerpt the comparisons carry."""
    rows = []
    for c in worst_first(comparisons, count):
        how = f"cosine {c.cosine:.4f}" if c.cosine is not None else f"{c.live_label} vs {c.shadow_label}"
        rows.append({"id": str(c.id), "how": how, "agreed": "yes" if c.agreed else "no", "input": c.input})
    return rows
