"""The benchmark's results: one row per batching configuration and precision, the targets of
issue 3 checked against them, and the JSON file that keeps it all."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from fleet_dev.bench.fleet_process import CpuSplit
from fleet_dev.bench.load import PhaseSamples
from fleet_dev.bench.raw import LengthAwareComparison, RawThroughput
from fleet_dev.bench.stats import LatencySummary, percentile
from fleet.tables import format_table

TARGET_EFFICIENCY = 0.85
ADAPTIVE_THROUGHPUT_TOLERANCE = 0.10
QUEUE_DELAY_COMPUTE_FACTOR = 3
ADAPTIVE = "adaptive"
NO_BATCHING = "none"


@dataclass(frozen=True)
class PhaseSummary:
    requests_per_s: float
    latency: LatencySummary
    completed: int
    errors: dict[str, int]
    mean_batch: float
    stage_p99_ms: dict[str, float]  # p99 of each of the results' timings (queue_ms, tokenize_ms, inference_ms, ...)
    cache_tiers: dict[str, int]
    workers: dict[str, int]
    send_lag_p99_ms: float  # open loop: how far the client fell behind its schedule

    @classmethod
    def of(cls, samples: PhaseSamples) -> PhaseSummary:
        batches = samples.batch_sizes
        return cls(requests_per_s=samples.completed / samples.window_s if samples.window_s else math.nan,
                   latency=LatencySummary.of(samples.latencies_ms), completed=samples.completed,
                   errors=dict(samples.errors), mean_batch=sum(batches) / len(batches) if batches else math.nan,
                   stage_p99_ms={stage: percentile(values, 99) for stage, values in samples.stage_ms.items()},
                   cache_tiers=dict(samples.cache_tiers),
                   workers=dict(samples.workers), send_lag_p99_ms=percentile(samples.send_lag_ms, 99))

    @property
    def inference_p99_ms(self) -> float:
        """p99 over replies of their batch's model time (timings.inference_ms)."""
        return self.stage_p99_ms.get("inference_ms", math.nan)


@dataclass(frozen=True)
class BenchRow:
    config: str
    precision: str
    version: str
    policy: str
    max_batch: int
    max_queue_delay_ms: float
    callers: int
    intra_op_threads: int
    saturation: PhaseSummary
    half_load_target_per_s: float
    half_load: PhaseSummary
    raw: RawThroughput
    saturation_cpu: CpuSplit | None  # where the CPU went during the saturation window
    notes: tuple[str, ...]  # what makes this row's numbers suspect (errors, neighbours, a late client)

    @property
    def efficiency(self) -> float:
        return self.saturation.requests_per_s / self.raw.sentences_per_s if self.raw.sentences_per_s else math.nan


@dataclass(frozen=True)
class TargetCheck:
    name: str
    met: bool | None  # None: could not be judged (a row is missing)
    detail: str


def _num(value: float, digits: int = 0) -> str:
    return "-" if math.isnan(value) else f"{value:.{digits}f}"


TABLE_HEADERS = ("config", "prec", "C", "sat req/s", "p50", "p95", "p99", "batch", "50% req/s", "p50", "p95",
                 "p99", "raw req/s", "eff")


def table_cells(row: BenchRow) -> list[str]:
    sat, half = row.saturation, row.half_load
    return [row.config + ("*" if row.notes else ""), row.precision, str(row.callers), _num(sat.requests_per_s), _num(sat.latency.p50_ms),
            _num(sat.latency.p95_ms), _num(sat.latency.p99_ms), _num(sat.mean_batch, 1), _num(half.requests_per_s),
            _num(half.latency.p50_ms), _num(half.latency.p95_ms), _num(half.latency.p99_ms),
            _num(row.raw.sentences_per_s), _num(row.efficiency, 2)]


def results_table(rows: Sequence[BenchRow]) -> str:
    legend = ("sat = closed loop at saturation (C callers), 50% = open loop (Poisson) at half the row's saturation "
              "rate;\nlatencies in ms end to end (client -> Kafka -> worker -> Redis), batch = mean batch size "
              "at saturation,\nraw = in-process model at the same batch size, eff = sat req/s / raw req/s; "
              "* = see the notes below")
    return format_table(TABLE_HEADERS, [table_cells(row) for row in rows], right=TABLE_HEADERS[2:]) + "\n" + legend


CPU_HEADERS = ("config", "prec", "raw", "worker", "bench client", "Kafka+Redis+other", "machine busy")


def cpu_cells(row: BenchRow) -> tuple[str, ...]:
    cpu = row.saturation_cpu
    measured = ("-",) * 4 if cpu is None else (_num(cpu.worker_ms, 2), _num(cpu.bench_client_ms, 2),
                                               _num(cpu.other_ms, 2), f"{cpu.machine_busy:.0%}")
    return (row.config, row.precision, _num(row.raw.cpu_ms_per_sentence, 2), *measured)


def format_cpu_split(rows: Sequence[BenchRow]) -> str:
    """Per row at saturation: CPU ms per request by process, next to the raw model's ms per sentence."""
    return ("where the CPU goes at saturation (CPU ms per request; raw = the model alone, in-process; "
            "- = no CPU counters here):\n" + format_table(CPU_HEADERS, [cpu_cells(row) for row in rows], indent="  "))


def _by(rows: Sequence[BenchRow], config: str) -> BenchRow | None:
    return next((row for row in rows if row.config == config), None)


def check_targets(rows: Sequence[BenchRow]) -> list[TargetCheck]:
    """Issue 3's numbers, per precision: adaptive efficiency, 50%-load p99 bound per row,
    adaptive vs best fixed throughput, adaptive vs unbatched open-loop p99."""
    checks: list[TargetCheck] = []
    for precision in dict.fromkeys(row.precision for row in rows):
        mine = [row for row in rows if row.precision == precision]
        adaptive, unbatched = _by(mine, ADAPTIVE), _by(mine, NO_BATCHING)
        fixed = [row for row in mine if row.config != ADAPTIVE]
        if adaptive is not None:
            eff = adaptive.efficiency
            checks.append(TargetCheck(f"{precision} adaptive pipeline efficiency >= {TARGET_EFFICIENCY}",
                                      None if math.isnan(eff) else eff >= TARGET_EFFICIENCY,
                                      f"{_num(eff, 2)} ({_num(eff - TARGET_EFFICIENCY, 2)} vs target)"))
        for row in mine:
            bound = row.max_queue_delay_ms + QUEUE_DELAY_COMPUTE_FACTOR * row.half_load.inference_p99_ms
            p99 = row.half_load.latency.p99_ms
            judged = not (math.isnan(bound) or math.isnan(p99))
            checks.append(TargetCheck(
                f"{precision} {row.config}: 50%-load p99 <= delay + {QUEUE_DELAY_COMPUTE_FACTOR} x p99 batch compute",
                p99 <= bound if judged else None,
                f"p99 {_num(p99, 1)} ms vs {_num(row.max_queue_delay_ms)} + {QUEUE_DELAY_COMPUTE_FACTOR} x "
                f"{_num(row.half_load.inference_p99_ms, 1)} = {_num(bound, 1)} ms"))
        if adaptive is not None and fixed:
            best = max(fixed, key=lambda row: row.saturation.requests_per_s)
            ratio = adaptive.saturation.requests_per_s / best.saturation.requests_per_s
            checks.append(TargetCheck(
                f"{precision} adaptive throughput within {ADAPTIVE_THROUGHPUT_TOLERANCE:.0%} of the best fixed row",
                ratio >= 1 - ADAPTIVE_THROUGHPUT_TOLERANCE,
                f"{_num(adaptive.saturation.requests_per_s)} vs {best.config} {_num(best.saturation.requests_per_s)}"
                f" req/s ({ratio:.2f}x)"))
        if adaptive is not None and unbatched is not None:
            mine_p99, none_p99 = adaptive.half_load.latency.p99_ms, unbatched.half_load.latency.p99_ms
            checks.append(TargetCheck(
                f"{precision} adaptive 50%-load p99 vs none", None,
                f"{_num(mine_p99, 1)} ms vs {_num(none_p99, 1)} ms ({_num(mine_p99 / none_p99, 2)}x; "
                f"at {_num(adaptive.half_load_target_per_s)} vs {_num(unbatched.half_load_target_per_s)} req/s)"))
    return checks


def format_targets(checks: Sequence[TargetCheck], length_aware: LengthAwareComparison | str) -> str:
    marks = {True: "met    ", False: "NOT met", None: "info   "}
    lines = ["targets (issue 3):"] + [f"  {marks[check.met]}  {check.name}: {check.detail}" for check in checks]
    if isinstance(length_aware, str):
        lines.append(f"  info     length-aware batching: {length_aware}")
    else:
        lines.append(f"  info     length-aware batching, raw at batch {length_aware.batch_size}: "
                     f"{length_aware.bucketed_per_s:.0f}/s with sub-batches of 16 vs "
                     f"{length_aware.unsorted_per_s:.0f}/s unsorted ({length_aware.speedup:.2f}x)")
    return "\n".join(lines)


def _jsonable(value: Any) -> Any:
    """NaN is not JSON: write null instead."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {key: _jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(item) for item in value]
    return value


def write_json(path: Path, *, meta: dict[str, Any], workload: dict[str, Any], rows: Sequence[BenchRow],
               checks: Sequence[TargetCheck], length_aware: LengthAwareComparison | str) -> None:
    document = {
        "meta": meta,
        "workload": workload,
        "rows": [{**asdict(row), "efficiency": row.efficiency} for row in rows],
        "targets": [asdict(check) for check in checks],
        "length_aware": length_aware if isinstance(length_aware, str)
        else {**asdict(length_aware), "speedup": length_aware.speedup},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_jsonable(document), indent=2) + "\n")
