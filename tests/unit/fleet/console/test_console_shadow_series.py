"""The Shadow page's plot columns and worst-disagreements table, from comparisons."""

from __future__ import annotations

from schemas.shadow import Comparison, ComparisonKind, LiveSource
from fleet.console.shadow_series import shadow_series, worst_rows


def comparison(time_ms: int, agreed: bool, cosine: float, live_ms: float | None = 10.0,
               text: str = "hello") -> Comparison:
    return Comparison(id=f"{time_ms:032x}", model="m", live_version="v1", shadow_version="v2",
                      kind=ComparisonKind.embedding, cosine=cosine, agreed=agreed, live_ms=live_ms, shadow_ms=20.0,
                      live_source=LiveSource.live_result, input=text, time_ms=time_ms)


def test_comparisons_are_bucketed_by_time_with_agreement_and_latency_per_version() -> None:
    found = [comparison(0, True, 0.99), comparison(10, False, 0.5, live_ms=None),
             comparison(1000, True, 0.99, live_ms=30.0)]
    series = shadow_series(found, max_points=2)
    assert series.times == [0.0, 0.5]
    assert series.agreement == [0.5, 1.0]
    assert series.live_ms == [10.0, 30.0] and series.shadow_ms == [20.0, 20.0]
    assert series.as_json() is not None


def test_one_moment_is_no_plot() -> None:
    assert shadow_series([]).as_json() is None
    assert shadow_series([comparison(5, True, 1.0), comparison(5, True, 1.0)]).as_json() is None


def test_the_worst_disagreements_come_first_with_their_inputs() -> None:
    rows = worst_rows([comparison(1, True, 0.99, text="fine"), comparison(2, False, 0.2, text="[EMAIL] wrote")], 1)
    assert rows == [{"id": f"{2:032x}", "how": "cosine 0.2000", "agreed": "no", "input": "[EMAIL] wrote"}]
