"""What `fleet shadow report` shows: totals from the stats hash, figures from the recent comparisons.

The stats hash (`fleet:shadow:<model>:<candidate>`) holds running totals since the
candidate was first shadowed; the comparisons topic holds the per-request detail for
percentiles and the worst disagreements. Pure functions here, the reading is in
fleet/commands/shadow.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fleet.tables import format_table
from schemas.shadow import Comparison, ComparisonKind, LiveSource
from versions import ShadowSnapshot


@dataclass(frozen=True)
class Latency:
    mean: float
    p50: float
    p99: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Latency | None:
        if not values:
            return None
        array = np.asarray(values, dtype=np.float64)
        return cls(float(array.mean()), float(np.percentile(array, 50)), float(np.percentile(array, 99)))


@dataclass(frozen=True)
class RecentSummary:
    count: int
    agreed: int
    recomputed: int
    cosine_min: float | None
    cosine_mean: float | None
    label_agreement: float | None
    live: Latency | None
    shadow: Latency | None
    live_per_row_ms: float | None
    shadow_per_row_ms: float | None
    worst: tuple[Comparison, ...]

    @property
    def agreement(self) -> float | None:
        return self.agreed / self.count if self.count else None


def worst_first(comparisons: Sequence[Comparison], count: int) -> list[Comparison]:
    """Label mismatches first, then the lowest cosines; agreeing classifier answers are never "worst"."""
    def badness(c: Comparison) -> tuple[int, float]:
        return (0 if not c.agreed else 1, c.cosine if c.cosine is not None else -2.0)

    ranked = [c for c in comparisons if c.kind is ComparisonKind.embedding or not c.agreed]
    return sorted(ranked, key=badness)[:count]


def summarise(comparisons: Sequence[Comparison], *, worst: int = 10) -> RecentSummary:
    cosines = [c.cosine for c in comparisons if c.cosine is not None]
    labelled = [c for c in comparisons if c.kind is ComparisonKind.classification]
    timed = [c for c in comparisons if c.live_ms is not None]
    live_rows = [c.live_ms / c.live_batch for c in timed if c.live_ms is not None and c.live_batch]
    return RecentSummary(
        count=len(comparisons), agreed=sum(c.agreed for c in comparisons),
        recomputed=sum(c.live_source is LiveSource.recomputed for c in comparisons),
        cosine_min=min(cosines) if cosines else None,
        cosine_mean=float(np.mean(cosines)) if cosines else None,
        label_agreement=sum(c.agreed for c in labelled) / len(labelled) if labelled else None,
        live=Latency.of([c.live_ms for c in timed if c.live_ms is not None]),
        shadow=Latency.of([c.shadow_ms for c in comparisons]),
        live_per_row_ms=float(np.mean(live_rows)) if live_rows else None,
        shadow_per_row_ms=float(np.mean([c.shadow_ms / c.shadow_batch for c in comparisons])) if comparisons else None,
        worst=tuple(worst_first(comparisons, worst)),
    )


def _f(value: float | None, digits: int = 2, suffix: str = "") -> str:
    return "-" if value is None else f"{value:.{digits}f}{suffix}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.2%}"


def format_report(model: str, candidate: str, stable: str | None, totals: ShadowSnapshot, recent: RecentSummary,
                  *, last: int) -> str:
    lines = [f"shadow report: {model}  candidate {candidate}  vs  stable {stable or '?'}", ""]
    lines.append(format_table(["", "compared", "agreement", "mean cosine", "recomputed", "errors"], [
        ["all time (stats hash)", str(totals.compared), _pct(totals.agreement), _f(totals.mean_cosine, 6),
         str(totals.recomputed), str(totals.errors)],
        [f"recent (last {last}/partition)", str(recent.count), _pct(recent.agreement), _f(recent.cosine_mean, 6),
         str(recent.recomputed), "-"],
    ]))
    if recent.cosine_min is not None:
        lines.append(f"recent cosine: min {recent.cosine_min:.6f}  mean {_f(recent.cosine_mean, 6)}")
    if recent.label_agreement is not None:
        lines.append(f"recent label agreement: {_pct(recent.label_agreement)}")
    lines.append("")
    rows = []
    for name, latency, per_row in (("live", recent.live, recent.live_per_row_ms),
                                   ("shadow", recent.shadow, recent.shadow_per_row_ms)):
        rows.append([name, _f(latency and latency.mean), _f(latency and latency.p50), _f(latency and latency.p99),
                     _f(per_row, 3)])
    if recent.live and recent.shadow:
        rows.append(["delta (shadow - live)", f"{recent.shadow.mean - recent.live.mean:+.2f}",
                     f"{recent.shadow.p50 - recent.live.p50:+.2f}", f"{recent.shadow.p99 - recent.live.p99:+.2f}",
                     _f(None if recent.live_per_row_ms is None or recent.shadow_per_row_ms is None
                        else recent.shadow_per_row_ms - recent.live_per_row_ms, 3)])
    lines.append(format_table(["inference ms (batch)", "mean", "p50", "p99", "per row"], rows))
    lines.append(f"all time: live mean {_f(totals.mean_live_ms)} ms, shadow mean {_f(totals.mean_shadow_ms)} ms")
    lines += ["", f"worst {len(recent.worst)} (lowest cosine / label mismatches):"]
    if recent.worst:
        labelled = any(c.kind is ComparisonKind.classification for c in recent.worst)
        headers = ["request", "live -> shadow label" if labelled else "cosine", "agreed", "source", "input"]
        lines.append(format_table(headers, [
            [c.id, f"{c.live_label} -> {c.shadow_label}" if c.live_label is not None else _f(c.cosine, 6),
             "yes" if c.agreed else "NO", c.live_source.value, repr(c.input)] for c in recent.worst]))
    else:
        lines.append("  none")
    return "\n".join(lines)
