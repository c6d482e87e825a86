"""The batching benchmark's pure parts: the seeded workload, percentiles, the Poisson
schedule, and the target checks (no Kafka, Redis or model needed)."""

from __future__ import annotations

import dataclasses
import math
import statistics

import numpy as np
import pytest

from fleet_dev.bench.batching import CONFIGS, BatchingConfig
from fleet_dev.bench.fleet_process import CpuCounters, CpuSplit
from fleet_dev.bench.raw import RawThroughput, chunks
from fleet_dev.bench.report import BenchRow, PhaseSummary, check_targets, format_cpu_split, results_table
from fleet_dev.bench.stats import LatencySummary, percentile, poisson_arrivals
from fleet_dev.bench.workload import (MAX_WORDS, format_histogram, length_histogram, support_queries,
                                  word_count)


def test_the_workload_is_the_same_for_the_same_seed() -> None:
    assert support_queries(500, seed=3) == support_queries(500, seed=3)
    assert support_queries(500, seed=3) != support_queries(500, seed=4)
    assert support_queries(100, seed=3) == support_queries(500, seed=3)[:100]


def test_the_workload_is_mostly_short_queries_with_a_long_tail() -> None:
    words = [word_count(text) for text in support_queries(4000, seed=7)]
    short = sum(3 <= n <= 15 for n in words) / len(words)
    assert 0.75 <= short <= 0.9, short
    assert min(words) >= 3 and max(words) <= MAX_WORDS
    assert sum(n > 30 for n in words) / len(words) >= 0.04  # the tail exists...
    assert max(words) >= 50  # ...and reaches far
    assert 7 <= statistics.median(words) <= 12


def test_the_workload_is_mostly_distinct_so_a_cache_would_rarely_hit() -> None:
    texts = support_queries(4000, seed=7)
    assert len(set(texts)) / len(texts) > 0.6
    assert all(text.strip() == text and "{" not in text for text in texts)


def test_no_queries_for_zero_and_an_error_for_a_negative_count() -> None:
    assert support_queries(0) == []
    with pytest.raises(ValueError):
        support_queries(-1)


def test_length_histogram_counts_every_length_once() -> None:
    bins = length_histogram([1, 8, 9, 12, 13, 200], edges=(1, 9, 13))
    assert [(b.label, b.count) for b in bins] == [("1-8", 2), ("9-12", 2), ("13+", 2)]
    assert length_histogram([0], edges=(1, 9))[0].count == 0  # below the first edge: not counted
    with pytest.raises(ValueError):
        length_histogram([1], edges=(9, 1))
    text = format_histogram(bins)
    assert len(text.splitlines()) == 3 and "33.3%" in text


@pytest.mark.parametrize("q", [0, 1, 25, 50, 90, 95, 99, 99.9, 100])
def test_percentile_matches_numpy_linear_interpolation(q: float) -> None:
    values = list(np.random.default_rng(5).lognormal(3, 1, size=997))
    assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))


def test_percentile_edge_cases() -> None:
    assert math.isnan(percentile([], 50))
    assert percentile([4.0], 99) == 4.0
    assert percentile([1.0, 2.0], 50) == 1.5
    assert percentile([3.0, 1.0, 2.0], 100) == 3.0  # input order does not matter
    with pytest.raises(ValueError):
        percentile([1.0], 101)
    summary = LatencySummary.of([float(n) for n in range(1, 101)])
    assert (summary.count, summary.p50_ms, summary.max_ms) == (100, 50.5, 100.0)
    assert math.isnan(LatencySummary.of([]).p99_ms)


def test_poisson_schedule_is_seeded_increasing_and_inside_the_window() -> None:
    schedule = poisson_arrivals(100, 20, seed=1)
    assert schedule == poisson_arrivals(100, 20, seed=1)
    assert schedule != poisson_arrivals(100, 20, seed=2)
    assert all(0 < a < b < 20 for a, b in zip(schedule, schedule[1:], strict=False))


def test_poisson_schedule_has_the_rate_and_exponential_gaps() -> None:
    rate, duration = 200.0, 50.0
    schedule = poisson_arrivals(rate, duration, seed=9)
    expected = rate * duration
    assert abs(len(schedule) - expected) < 4 * math.sqrt(expected)  # Poisson count: sd = sqrt(mean)
    gaps = np.diff(schedule)
    assert gaps.mean() == pytest.approx(1 / rate, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.05)  # exponential: cv = 1, not a fixed tick


def test_poisson_schedule_refuses_a_non_positive_rate() -> None:
    with pytest.raises(ValueError):
        poisson_arrivals(0, 10, seed=1)


def test_chunks_cover_the_workload_in_order() -> None:
    texts = [str(n) for n in range(10)]
    assert [list(c) for c in chunks(texts, 4)] == [["0", "1", "2", "3"], ["4", "5", "6", "7"], ["8", "9"]]
    with pytest.raises(ValueError):
        chunks(texts, 0)


def test_configurations_and_their_callers() -> None:
    assert [c.name for c in CONFIGS] == ["none", "8/10ms", "32/50ms", "64/100ms", "adaptive"]
    assert CONFIGS[0].env() == {"FLEET_MAX_BATCH_SIZE": "1", "FLEET_MAX_QUEUE_DELAY_MS": "0",
                                "FLEET_BATCH_POLICY": "fixed"}
    assert [c.callers(None, 16, 1) for c in CONFIGS] == [16, 16, 64, 128, 64]
    assert [c.callers(None, 16, 2) for c in CONFIGS] == [16, 24, 96, 192, 96]
    assert BatchingConfig("x", 8, 10, "fixed").callers(5, 16, 2) == 5


def test_cpu_split_per_request() -> None:
    before = CpuCounters(worker_s=1.0, bench_s=2.0, machine_busy_s=10.0, wall_s=100.0)
    after = CpuCounters(worker_s=2.0, bench_s=2.5, machine_busy_s=12.0, wall_s=102.0)
    split = CpuSplit.between(before, after, requests=500)
    assert split is not None
    assert (split.worker_ms, split.bench_client_ms, split.other_ms) == pytest.approx((2.0, 1.0, 1.0))
    assert CpuSplit.between(before, after, requests=0) is None


def _phase(rate: float, p99: float, inference_p99: float) -> PhaseSummary:
    return PhaseSummary(requests_per_s=rate, latency=LatencySummary(100, p99 / 2, p99 * 0.9, p99, p99),
                        completed=100, errors={}, mean_batch=4.0, stage_p99_ms={"inference_ms": inference_p99},
                        cache_tiers={"miss": 100}, workers={"w": 100}, send_lag_p99_ms=0.0)


def _row(config: str, delay: float, sat: float, raw: float, half_p99: float) -> BenchRow:
    return BenchRow(config=config, precision="fp32", version="v", policy="fixed", max_batch=32,
                    max_queue_delay_ms=delay, callers=64, intra_op_threads=0, saturation=_phase(sat, 100, 20),
                    half_load_target_per_s=sat / 2, half_load=_phase(sat / 2, half_p99, 10),
                    raw=RawThroughput(raw, (raw,), 1.0, 32, 256), saturation_cpu=None, notes=())


def test_targets_judge_efficiency_latency_bound_and_adaptive_vs_fixed() -> None:
    rows = [_row("none", 0, 100, 200, 20), _row("32/50ms", 50, 500, 550, 90), _row("adaptive", 20, 460, 500, 60)]
    checks = {check.name: check for check in check_targets(rows)}
    assert checks["fp32 adaptive pipeline efficiency >= 0.85"].met is True  # 460 / 500 = 0.92
    assert checks["fp32 none: 50%-load p99 <= delay + 3 x p99 batch compute"].met is True  # 20 <= 0 + 30
    assert checks["fp32 32/50ms: 50%-load p99 <= delay + 3 x p99 batch compute"].met is False  # 90 > 80
    assert checks["fp32 adaptive throughput within 10% of the best fixed row"].met is True  # 460 / 500 = 0.92
    assert "3.00x" in checks["fp32 adaptive 50%-load p99 vs none"].detail


def test_results_and_cpu_tables_line_up_each_row_under_its_header() -> None:
    rows = [_row("none", 0, 100, 200, 20), dataclasses.replace(_row("32/50ms", 50, 500, 550, 90),
                                                               saturation_cpu=CpuSplit(1.5, 0.25, 0.5, 0.9))]
    header, rule, none, fixed = results_table(rows).splitlines()[:4]
    assert len(rule) == len(header) == len(none) == len(fixed), "numbers right-aligned up to the last column"
    assert header.split()[:4] == ["config", "prec", "C", "sat"] and fixed.split()[-1] == "0.91"
    cpu = format_cpu_split(rows).splitlines()
    assert cpu[-2].split()[2:] == ["1.00", "-", "-", "-", "-"], "a row without CPU counters says so"
    assert cpu[-1].split()[2:] == ["1.00", "1.50", "0.25", "0.50", "90%"]

