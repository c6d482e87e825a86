"""The semantic tier's A/B in `scripts/bench cache`: does it pay, on faq-intent and on a dearer model?

Each model runs the same customer-service workload with the exact cache alone ("off": the
semantic tier off) and with exact + semantic ("on"), in interleaved rounds (A/B/A/B...) so
the load of a shared machine falls on both alike. Per model: the median req/s of each side
with its spread over the rounds, the on/off ratio of each round (median and spread), who
answered in the median "on" run, how often lookups ran (the tier's cost model stops them
where they do not pay), the verifier's cost per lookup and per candidate, and what a hit
saves against what a lookup costs, as the tier itself measured them (workers/cache/lookup_cost.py, `LookupCost`).

Pure parts only: the runs come in as the dicts `fleet_dev.bench.cache.cache_run` returns.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from fleet_dev.bench.cache_workload import TierShares
from fleet.tables import format_table

OFF, ON, ALWAYS = "exact", "exact+semantic", "exact+semantic always"
# Worker settings of each cache configuration; ALWAYS looks up every batch, paying or not.
CONFIGS: dict[str, dict[str, bool]] = {
    "off": {"exact_cache": False, "semantic_cache": False}, OFF: {"exact_cache": True, "semantic_cache": False},
    ON: {"exact_cache": True, "semantic_cache": True},
    ALWAYS: {"exact_cache": True, "semantic_cache": True, "semantic_only_when_paying": False}}
TIER_CONFIGS = (OFF, ON, ALWAYS)
NOISE_BAND = 0.05  # on/off within 5% of 1.0 over the rounds' median: no gain, no loss that the machine can show


def spread(values: Sequence[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)} if values else \
        {"median": math.nan, "min": math.nan, "max": math.nan}


def median_run(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median throughput (the upper one of an even count)."""
    return sorted(runs, key=lambda run: run["requests_per_s"])[len(runs) // 2]


def tier_use(run: dict[str, Any]) -> dict[str, Any]:
    """Who answered one "on" run, how often the tier looked up, and its cost model's last figures."""
    shares: TierShares = run["shares"]
    counters, cost = run["counters"], run.get("verifier") or {}
    looked_up = counters.get("semantic", 0.0) + counters.get("semantic_misses", 0.0)
    exact_misses = shares.requests - shares.exact_local - shares.exact_redis
    judged = counters.get("verifier_accepted", 0.0) + counters.get("verifier_refused", 0.0)
    return {"exact": shares.share(shares.exact_local + shares.exact_redis), "semantic": shares.share(shares.semantic),
            "looked_up": looked_up / exact_misses if exact_misses else math.nan,
            "candidates_per_lookup": judged / looked_up if looked_up else math.nan,
            "refused": counters.get("verifier_refused", 0.0) / judged if judged else math.nan,
            **{key: cost.get(key) for key in ("version", "ms_per_lookup", "ms_per_candidate", "encoder_ms_per_lookup",
                                             "saved_ms_per_lookup", "cost_ms_per_lookup", "model_ms_per_row",
                                             "hit_rate", "paying")}}


def tier_summary(label: str, rounds: Sequence[dict[str, dict[str, Any]]], price: dict[str, Any] | None) -> dict[str, Any]:
    """One model's A/B: `rounds` holds each round's runs by configuration (OFF and ON)."""
    off = [done[OFF]["requests_per_s"] for done in rounds]
    on = [done[ON]["requests_per_s"] for done in rounds]
    always = [done[ALWAYS]["requests_per_s"] for done in rounds]
    return {"model": label, "price": price, "rounds": len(rounds), "off_per_s": spread(off), "on_per_s": spread(on),
            "ratio": spread([b / a for a, b in zip(off, on, strict=True)]), "off_rounds": off, "on_rounds": on,
            "always_per_s": spread(always), "always_rounds": always,
            "always_ratio": spread([b / a for a, b in zip(off, always, strict=True)]),
            "on_run": tier_use(median_run([done[ON] for done in rounds])),
            "always_run": tier_use(median_run([done[ALWAYS] for done in rounds]))}


def verdict(summary: dict[str, Any]) -> str:
    """What the A/B says: the tier pays (a gain beyond noise), stays off at no cost, or costs."""
    ratio, paying = summary["ratio"]["median"], summary["on_run"]["paying"]
    if ratio > 1 + NOISE_BAND:
        return "pays"
    if ratio >= 1 - NOISE_BAND:
        return "no gain, no loss" + ("" if paying else " (lookups off: they do not pay)")
    return "costs throughput"


def _spread_cell(values: dict[str, float], digits: int = 0, unit: str = "") -> str:
    return f"{values['median']:,.{digits}f}{unit} ({values['min']:,.{digits}f}-{values['max']:,.{digits}f})"


def _ms(value: float | None) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.3f}"


def throughput_table(summaries: Sequence[dict[str, Any]]) -> str:
    rows = []
    for summary in summaries:
        price = summary["price"] or {}
        rows.append([summary["model"], f"{price.get('ms_per_row', math.nan):.2f} ms "
                     f"({price.get('times_first', math.nan):.1f}x)",
                     _spread_cell(summary["off_per_s"]), _spread_cell(summary["on_per_s"]),
                     _spread_cell(summary["ratio"], 2, "x"), _spread_cell(summary["always_ratio"], 2, "x"),
                     verdict(summary)])
    return format_table(("model", "a row alone (x encoder)", "semantic off req/s", "semantic on req/s",
                         "on/off", "always/off", "verdict"), rows)


def use_table(summaries: Sequence[dict[str, Any]]) -> str:
    rows = []
    for summary in summaries:
        for name, use in (("on", summary["on_run"]), ("always", summary["always_run"])):
            rows.append([summary["model"], name, f"{use['exact']:.1%}", f"{use['semantic']:.1%}",
                         f"{use['looked_up']:.1%}", f"{use['candidates_per_lookup']:.2f}", f"{use['refused']:.1%}",
                         _ms(use["encoder_ms_per_lookup"]), _ms(use["ms_per_lookup"]), _ms(use["ms_per_candidate"]),
                         f"{use['hit_rate']:.1%}" if use["hit_rate"] is not None else "-",
                         _ms(use["saved_ms_per_lookup"]), _ms(use["cost_ms_per_lookup"]),
                         "-" if use["paying"] is None else ("yes" if use["paying"] else "no")])
    return format_table(("model", "semantic", "exact", "served", "misses looked up", "candidates / lookup",
                         "refused", "encoder ms", "verifier ms", "ms / candidate", "hit rate", "hit saves ms",
                         "lookup costs ms", "pays"), rows)


def describe(summaries: Sequence[dict[str, Any]], requests: int) -> str:
    head = (f"semantic tier A/B: exact cache alone (off) vs exact + semantic (on), {requests:,} requests a run, "
            f"{summaries[0]['rounds'] if summaries else 0} interleaved rounds; req/s median (min-max); the on/off "
            f"ratio is taken within each round:")
    notes = ("on: lookups while they pay (the default); always: on every batch (FLEET_SEMANTIC_ONLY_WHEN_PAYING="
             "false). Below, each one's median run: exact and served (semantic hits) are shares of all requests; "
             "\"misses looked up\": rows the tier encoded, of those the exact cache missed; \"refused\": of the "
             "candidates the verifier judged; encoder ms, verifier ms, hit rate, hit saves and lookup costs: the "
             "tier's cost model at the end of the run, per row looked up (hit saves = hit rate x model ms per row; "
             "lookups pay while it is at least what they cost)")
    return "\n".join([head, throughput_table(summaries), "", use_table(summaries), notes])
