"""The cache benchmark's pure parts: the seeded query workload, the hit-rate accounting and the
targets of issue 4 (no Kafka, Redis or model needed, so they are unit-tested on their own).

The workload is a Zipf draw over a query set built from the project's own customer-support
texts: the faq-intent training and test examples and both sides of the semantic cache's
paraphrase and near-miss pairs, each also in a few light variants ("hi ...", "... thanks").
Repeats of a query are exact-cache hits; variants and paraphrases of a query seen before are
what the semantic cache may serve. The Zipf exponent is calibrated (bisection on the expected
number of distinct base texts) so the share of N draws repeating a base text is a chosen figure; the
semantic tier's share comes on top and is measured, not predicted.
"""

from __future__ import annotations

import bisect
import json
import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path
from typing import Any

from fleet.tables import format_table

ROOT = Path(__file__).parents[2]
FAQ_FILE = ROOT / "models" / "build" / "data" / "faq-intents-v1.json"
PAIRS_FILE = ROOT / "workers" / "cache" / "data" / "semantic_pairs.json"
# Light variants of each text: "hi, <text>" is a near repeat only the semantic tier can serve;
# repeats of the same variant are exact hits. Two variants keep most repeats exact, as in real
# support traffic where the popular questions recur word for word.
OPENERS = ("", "hi, ")
CLOSERS = ("",)
MAX_EXPONENT = 4.0
TARGET_EXACT_HITS_PER_S = 10_000.0
TARGET_HIT_P99_OVER_BARE_MS = 2.0
TARGET_CACHE_SPEEDUP = 1.8
TARGET_COMBINED_HIT_RATE = 0.50
COMBINED_HIT_RATE_TOLERANCE = 0.10  # the speedup target only means something near a 50% hit rate


def base_texts(faq_file: Path = FAQ_FILE, pairs_file: Path = PAIRS_FILE) -> list[str]:
    """Every distinct support text the project ships, in file order."""
    faq = json.loads(faq_file.read_text())
    pairs = json.loads(pairs_file.read_text())
    texts = [text for intent in faq["intents"] for split in ("train", "test") for text in intent.get(split, [])]
    texts += [pair[side] for kind in ("paraphrases", "near_misses") for pair in pairs[kind] for side in ("a", "b")]
    return list(dict.fromkeys(text.strip() for text in texts if text.strip()))


def query_groups(texts: Sequence[str], seed: int) -> list[tuple[int, str]]:
    """(index of the base text, query): each text in every opener x closer variant, in a seeded
    order (the order is the Zipf rank)."""
    variants = {f"{opener}{text}{closer}": base for base, text in enumerate(texts)
                for opener in OPENERS for closer in CLOSERS}
    pairs = [(base, query) for query, base in variants.items()]
    random.Random(seed).shuffle(pairs)
    return pairs


def query_set(texts: Sequence[str], seed: int) -> list[str]:
    return [query for _, query in query_groups(texts, seed)]


def zipf_weights(size: int, exponent: float) -> list[float]:
    """Probability of each rank (0 = most popular) under Zipf(exponent) over `size` items."""
    if size < 1 or exponent < 0:
        raise ValueError(f"need size >= 1 and exponent >= 0, got {size} and {exponent}")
    raw = [1.0 / (rank + 1) ** exponent for rank in range(size)]
    total = sum(raw)
    return [weight / total for weight in raw]


def zipf_draw(size: int, exponent: float, count: int, seed: int) -> list[int]:
    """`count` ranks drawn from Zipf(exponent) over `size` items: the same list for the same seed."""
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    cumulative = list(accumulate(zipf_weights(size, exponent)))
    rng = random.Random(seed)
    top = cumulative[-1]
    return [min(bisect.bisect_right(cumulative, rng.random() * top), size - 1) for _ in range(count)]


def expected_repeat_share(size: int, exponent: float, count: int, groups: Sequence[int] | None = None) -> float:
    """Expected share of `count` draws that repeat an earlier draw: 1 - E[distinct] / count; with
    `groups` (a group per rank), draws repeat when their group was drawn before."""
    if count <= 0:
        return 0.0
    weights = zipf_weights(size, exponent)
    if groups is not None:
        merged: dict[int, float] = {}
        for group, weight in zip(groups, weights, strict=True):
            merged[group] = merged.get(group, 0.0) + weight
        weights = list(merged.values())
    distinct = sum(-math.expm1(count * math.log1p(-p)) if p < 1 else 1.0 for p in weights)
    return 1.0 - distinct / count


def calibrate_exponent(size: int, count: int, repeat_share: float, *, groups: Sequence[int] | None = None,
                       iterations: int = 40) -> float:
    """The Zipf exponent whose expected repeat share over `count` draws is `repeat_share`
    (clamped to what [0, MAX_EXPONENT] can give); the share grows with the exponent."""
    def share(exponent: float) -> float:
        return expected_repeat_share(size, exponent, count, groups)

    low, high = 0.0, MAX_EXPONENT
    if share(low) >= repeat_share:
        return low
    if share(high) <= repeat_share:
        return high
    for _ in range(iterations):
        middle = (low + high) / 2
        if share(middle) < repeat_share:
            low = middle
        else:
            high = middle
    return (low + high) / 2


@dataclass(frozen=True)
class Workload:
    texts: list[str]  # the requests, in send order
    exponent: float
    query_set_size: int
    seed: int

    @property
    def repeat_share(self) -> float:
        """Share of requests that repeat an earlier request exactly (what an unbounded exact cache serves)."""
        return 1.0 - len(set(self.texts)) / len(self.texts) if self.texts else 0.0


def cache_workload(count: int, *, seed: int, repeat_share: float, texts: Sequence[str] | None = None) -> Workload:
    """`count` requests whose expected share repeating an earlier request's base text (the same
    text, or a variant of it: what exact + semantic caches could serve) is `repeat_share`."""
    pairs = query_groups(base_texts() if texts is None else texts, seed)
    exponent = calibrate_exponent(len(pairs), count, repeat_share, groups=[base for base, _ in pairs])
    ranks = zipf_draw(len(pairs), exponent, count, seed + 1)
    return Workload([pairs[rank][1] for rank in ranks], exponent, len(pairs), seed)


@dataclass(frozen=True)
class TierShares:
    """Who answered the requests of one run, as counts; the shares divide by `requests`.

    exact = results with cache=exact, split into local and Redis by the tier's lookup hits;
    semantic = results with cache=semantic; in_batch = cache=miss results the model did not
    compute (followers of an identical input computed in the same micro-batch); model = rows
    the model ran (sampled semantic verifications included).
    """

    requests: int
    exact_local: float
    exact_redis: float
    semantic: int
    in_batch: int
    model: int
    errors: int

    def share(self, count: float) -> float:
        return count / self.requests if self.requests else math.nan

    @property
    def combined(self) -> float:
        """Share answered without a model run."""
        return self.share(self.exact_local + self.exact_redis + self.semantic + self.in_batch)

    def as_dict(self) -> dict[str, float]:
        return {"requests": self.requests, "exact_local": self.share(self.exact_local),
                "exact_redis": self.share(self.exact_redis), "semantic": self.share(self.semantic),
                "in_batch": self.share(self.in_batch), "model": self.share(self.model),
                "combined": self.combined, "errors": self.errors}


def tier_shares(result_tiers: Mapping[str, int], *, computed: int, local_hits: float, redis_hits: float,
                errors: int = 0) -> TierShares:
    """Combine the results' cache tiers, the rows the model computed, and the exact tiers' lookup
    hit counters (worker metrics) into one accounting of the run."""
    exact = result_tiers.get("exact", 0)
    misses = result_tiers.get("miss", 0)
    if computed > misses:
        raise ValueError(f"the model computed {computed} rows but only {misses} results say miss")
    lookups = local_hits + redis_hits
    local = exact * local_hits / lookups if lookups else float(exact)
    requests = exact + misses + result_tiers.get("semantic", 0) + errors
    return TierShares(requests, local, exact - local, result_tiers.get("semantic", 0), misses - computed, computed,
                      errors)


@dataclass(frozen=True)
class Verdict:
    scenario: str
    figure: str
    target: str
    met: bool | None  # None: reported, not judged (or could not be measured)


def _judged(value: float, ok: bool) -> bool | None:
    return None if math.isnan(value) else ok


def verdicts(*, exact_per_s: float, hit_p99_ms: float, bare_p99_ms: float, speedup: float,
             combined_hit_rate: float) -> list[Verdict]:
    over = hit_p99_ms - bare_p99_ms
    near = abs(combined_hit_rate - TARGET_COMBINED_HIT_RATE) <= COMBINED_HIT_RATE_TOLERANCE
    return [
        Verdict("exact hits, burst", f"{exact_per_s:,.0f} req/s", f">= {TARGET_EXACT_HITS_PER_S:,.0f} req/s",
                _judged(exact_per_s, exact_per_s >= TARGET_EXACT_HITS_PER_S)),
        Verdict("hit vs bare round trip", f"p99 {hit_p99_ms:.2f} vs {bare_p99_ms:.2f} ms (+{over:.2f})",
                f"<= bare + {TARGET_HIT_P99_OVER_BARE_MS:g} ms",
                _judged(over, over <= TARGET_HIT_P99_OVER_BARE_MS)),
        Verdict("cache scenario hit rate", f"{combined_hit_rate:.1%} combined",
                f"~{TARGET_COMBINED_HIT_RATE:.0%} (+-{COMBINED_HIT_RATE_TOLERANCE:.0%})",
                _judged(combined_hit_rate, near)),
        Verdict("cache scenario throughput", f"{speedup:.2f}x with vs without caches", f">= {TARGET_CACHE_SPEEDUP}x",
                _judged(speedup, speedup >= TARGET_CACHE_SPEEDUP)),
    ]


def failed(checks: Iterable[Verdict]) -> list[Verdict]:
    """Targets missed or not measured (a missing figure is a failure, not a pass)."""
    return [check for check in checks if check.met is not True]


def cache_table(runs: Sequence[dict[str, Any]]) -> str:
    """One row per cache configuration of the scenario: throughput, latency, who answered (shares)."""
    def cells(run: dict[str, Any]) -> list[str]:
        shares: TierShares = run["shares"]
        return [run["caches"], f"{run['requests_per_s']:,.0f}", f"{run['latency']['p50_ms']:,.0f}",
                f"{run['latency']['p99_ms']:,.0f}", *(f"{shares.share(x):.1%}" for x in (
                    shares.exact_local, shares.exact_redis, shares.semantic, shares.in_batch)),
                f"{shares.combined:.1%}", f"{shares.share(shares.model):.1%}"]
    return format_table(("caches", "req/s", "p50 ms", "p99 ms", "exact local", "exact redis", "semantic", "in-batch",
                         "combined", "model"), [cells(run) for run in runs])


def format_verdicts(checks: Sequence[Verdict]) -> str:
    marks = {True: "met", False: "NOT met", None: "-"}
    return format_table(("scenario", "figure", "target", "verdict"),
                        [(c.scenario, c.figure, c.target, marks[c.met]) for c in checks])
