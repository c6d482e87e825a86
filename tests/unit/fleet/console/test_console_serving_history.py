"""The overview's serving plots: one point per sample from version figures and heartbeats, bounded."""

from __future__ import annotations

import json
import math

from common.heartbeats import WorkerInfo
from fleet.console.serving_history import MAX_MODELS, ServingHistory, ServingPoint, serving_point
from fleet.console.settings import ConsoleSettings
from fleet.console.throughput import VersionFigures


def worker(name: str, batch: int, max_batch: int) -> WorkerInfo:
    return WorkerInfo(worker=name, model="m1", role="primary", device="cpu", state="healthy", reason="", version="v1",
                      lag=0, beat_ms=0, age_s=0.1, drained=False, batch=batch, max_batch=max_batch)


def test_a_point_adds_the_versions_rates_takes_the_worst_p99_and_averages_the_batches() -> None:
    figures = [VersionFigures("v1", 100, 12.5, 0.0, 40.0), VersionFigures("v2", 10, 2.5, None, 90.0),
               VersionFigures("v3", 5, None, None, None)]  # no window yet: left out
    workers = [worker("a", 8, 32), worker("b", 3, 64), worker("old", 0, 0)]  # max_batch 0: not reported
    assert serving_point(7.0, figures, workers) == ServingPoint(7.0, 15.0, 90.0, 5.5, 64)


def test_a_point_without_windows_or_batch_reports_is_empty_not_zero() -> None:
    assert serving_point(1.0, [VersionFigures("v1", 3, None, None, None)], [worker("old", 0, 0)]) == \
        ServingPoint(1.0, None, None, None, None)


def test_the_history_keeps_the_last_points_per_model_as_plot_columns() -> None:
    history = ServingHistory(ConsoleSettings(console_history_points=10))
    for second in range(25):
        history.record("m1", ServingPoint(float(second), float(second), None, 2.0, 8))
    series = history.series("m1")
    assert series["t"] == [float(s) for s in range(15, 25)]
    assert series["per_s"] == series["t"] and series["p99_ms"] == [None] * 10
    assert series["batch"] == [2.0] * 10 and series["max_batch"] == [8.0] * 10
    assert history.series("unknown") == {"t": [], "per_s": [], "p99_ms": [], "batch": [], "max_batch": []}


def test_models_no_longer_sampled_are_forgotten_once_there_are_too_many() -> None:
    history = ServingHistory(ConsoleSettings(console_history_points=10))
    for index in range(MAX_MODELS + 1):
        history.record(f"m{index}", ServingPoint(0.0, 1.0, 1.0, 1.0, 1))
    history.forget_all_but({"m1", "m2"})
    assert set(history.history) == {"m1", "m2"}


def test_a_p99_past_the_last_latency_bound_is_a_gap_json_can_carry() -> None:
    history = ServingHistory(ConsoleSettings(console_history_points=10))
    history.record("m1", ServingPoint(1.0, 3.0, math.inf, None, None))
    history.record("m1", ServingPoint(2.0, 3.0, 40.0, None, None))
    series = history.series("m1")
    assert series["p99_ms"] == [None, 40.0]
    assert json.loads(json.dumps(series, allow_nan=False)) == series  # the page's JSON.parse reads it
