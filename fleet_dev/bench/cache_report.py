"""`scripts/bench cache`'s report: the tables it prints and the JSON document it writes, from the
figures of its scenarios (fleet_dev/bench/cache.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from fleet_dev.bench.cache_setup import BENCH_MODEL
from fleet_dev.bench.cache_tier import describe
from fleet_dev.bench.cache_verifier import describe_standalone, describe_verifier
from fleet_dev.bench.cache_workload import Verdict, Workload, cache_table, format_verdicts, verdicts
from workers.settings import WorkerSettings


@dataclass
class Results:
    exact: dict[str, Any]
    runs: list[dict[str, Any]]  # the median run of each of CACHE_CONFIGS on faq-intent
    rounds: list[list[dict[str, Any]]]
    tier: list[dict[str, Any]]  # the semantic tier's A/B per model
    prices: dict[str, Any]
    standalone: dict[str, Any] | None

    @property
    def speedups(self) -> tuple[float, float]:
        """exact+semantic and exact only over caches off."""
        off, exact_only, on = (run["requests_per_s"] for run in self.runs)
        return on / off, exact_only / off


def report(results: Results, workload: Workload, base: WorkerSettings, precision: str) -> list[Verdict]:
    exact, runs, rounds = results.exact, results.runs, results.rounds
    speedup, exact_only = results.speedups
    checks = verdicts(exact_per_s=exact["requests_per_s"], hit_p99_ms=exact["hit_round_trip"]["p99_ms"],
                      bare_p99_ms=exact["bare_round_trip"]["p99_ms"], speedup=speedup,
                      combined_hit_rate=runs[-1]["shares"].combined)
    print(f"\ncache scenario (faq-intent {precision}, max_batch_size {base.max_batch_size}, burst drain of "
          f"{len(workload.texts):,} requests; latency = result finished_ms - submitted_ms, backlog included):")
    print(cache_table(runs))
    if len(rounds) > 1:
        print("rounds (req/s): " + "; ".join(", ".join(f"{run['caches']} {run['requests_per_s']:,.0f}"
                                                      for run in done if run["model"] == BENCH_MODEL)
                                         for done in rounds) + " (the table shows each configuration's median)")
    print(f"speedup vs off: exact+semantic {speedup:.2f}x, exact only {exact_only:.2f}x")
    print("\n" + describe(results.tier, len(workload.texts)))
    print(describe_verifier(results.tier[-1]["on_run"]))
    print(describe_standalone(results.standalone))
    print(f"\nexact hits: max_batch_size {exact['max_batch_size']}, {exact['requests']:,} repeats of "
          f"{exact['distinct_inputs']} inputs; req/s over the wall time of run(burst=True)")
    print("\n" + format_verdicts(checks))
    return checks


def document(results: Results, checks: Sequence[Verdict], meta: dict[str, Any], workload: Workload) -> dict[str, Any]:
    speedup, exact_only = results.speedups
    return {"meta": meta, "workload": {"requests": len(workload.texts), "query_set": workload.query_set_size,
                                       "exponent": workload.exponent, "repeat_share": workload.repeat_share},
            "exact": results.exact, "cache_scenario": [{k: v for k, v in r.items() if k != "shares"} for r in results.runs],
            "row_costs": results.prices, "semantic_tier": results.tier, "verifier_alone": results.standalone,
            "speedup": speedup, "speedup_exact_only": exact_only, "targets": [asdict(check) for check in checks]}
