"""The semantic tier's guarantee that learns: serve a candidate only where the evidence says that
at most `max_wrong_rate` (δ) of the answers served at its score are wrong, with confidence 1 - α.

The fleet can always tell whether a cached answer was right: recompute it. Every candidate the
tier did not serve is computed by the model anyway, so comparing its cached answer with the
computed one is a free label; a sampled share of the served hits is recomputed too. A candidate in
an ambiguous neighbourhood (workers/cache/choice.py) gives none: it is never served. Each label is
(score, right or wrong), the score being the verifier's P(same) or, without a verifier, the
cosine. Labels are counted in score bins, shared by the workers of a version (Redis), so their
number is bounded by the bins whatever the traffic.

The threshold is found by fixed-sequence testing ("Learn then Test", Angelopoulos et al. 2021):
from the highest bin edge down, each edge t is accepted while an exact binomial test rejects
"more than δ of the labelled candidates scoring >= t are wrong" at level α; the first edge not
rejected ends the descent, and an edge whose own bin holds no label is passed over, never accepted. Testing in that fixed order keeps the chance of accepting any edge
whose true wrong rate is above δ at α, without a correction for the number of edges. With no
labels nothing is accepted: a cold tier serves nothing until the evidence allows, in any language
and without a word list.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from redis.exceptions import RedisError

from common.redis_cluster import AnyRedis

log = logging.getLogger(__name__)

DEFAULT_BINS = 50
DEFAULT_CONFIDENCE = 0.95


# Above this many labels the exact sum (one term per wrong label, per bin tested) gives way to the
# Chernoff bound: O(1), and never below the exact value, so a threshold it accepts the exact test accepts too.
EXACT_LABELS = 2000


def binomial_cdf(wrong: int, labelled: int, rate: float) -> float:
    """P(X <= wrong) for X ~ Binomial(labelled, rate), summed in log space (no scipy in a worker);
    beyond EXACT_LABELS an upper bound of it (`chernoff_cdf_bound`)."""
    if wrong >= labelled:
        return 1.0
    if rate <= 0.0:
        return 1.0
    if rate >= 1.0:
        return 0.0
    if labelled > EXACT_LABELS:
        return chernoff_cdf_bound(wrong, labelled, rate)
    log_p, log_q = math.log(rate), math.log1p(-rate)
    log_terms = [math.lgamma(labelled + 1) - math.lgamma(k + 1) - math.lgamma(labelled - k + 1)
                 + k * log_p + (labelled - k) * log_q for k in range(wrong + 1)]
    top = max(log_terms)
    return min(1.0, math.exp(top) * sum(math.exp(term - top) for term in log_terms))


def chernoff_cdf_bound(wrong: int, labelled: int, rate: float) -> float:
    """exp(-n KL(k/n || p)) >= P(X <= k) for k/n < p (1.0 otherwise): conservative for the test."""
    observed = wrong / labelled
    if observed >= rate:
        return 1.0
    divergence = (observed * math.log(observed / rate) if observed > 0 else 0.0) \
        + (1 - observed) * math.log((1 - observed) / (1 - rate))
    return math.exp(-labelled * divergence)


@dataclass
class LearnedBound:
    """Label counts per score bin and the threshold they allow (see the module docstring)."""

    max_wrong_rate: float = 0.01
    confidence: float = DEFAULT_CONFIDENCE
    bins: int = DEFAULT_BINS
    floor: float = 0.0  # no threshold below this (the verifier's own calibrated point, where one decides)
    labelled: list[int] = field(default_factory=list)
    wrong: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not 0 < self.max_wrong_rate < 1 or not 0 < self.confidence < 1 or self.bins < 1:
            raise ValueError("max_wrong_rate and confidence in (0, 1), bins >= 1")
        self.labelled = self.labelled or [0] * self.bins
        self.wrong = self.wrong or [0] * self.bins
        if len(self.labelled) != self.bins or len(self.wrong) != self.bins:
            raise ValueError(f"counts must have {self.bins} bins")

    def bin_of(self, score: float) -> int:
        return min(self.bins - 1, max(0, int(score * self.bins)))

    def edge(self, index: int) -> float:
        return index / self.bins

    def merge(self, labelled: Sequence[int], wrong: Sequence[int]) -> None:
        """Take counts read from the shared store (they replace this worker's view)."""
        self.labelled, self.wrong = list(labelled), list(wrong)

    @property
    def labels(self) -> int:
        return sum(self.labelled)

    @property
    def threshold(self) -> float | None:
        """The lowest bin edge the fixed-sequence test accepts, or None while none is (cold)."""
        alpha = 1 - self.confidence
        accepted: float | None = None
        labelled = wrong = 0
        for index in range(self.bins - 1, -1, -1):
            if self.edge(index) < self.floor - 1e-12:
                break
            labelled += self.labelled[index]
            wrong += self.wrong[index]
            if not self.labelled[index]:
                continue  # no evidence about this bin's own scores: not accepted, and the descent goes on
            if binomial_cdf(wrong, labelled, self.max_wrong_rate) > alpha:
                break
            accepted = self.edge(index)
        return accepted

    @property
    def least_rate(self) -> float:
        """The least δ under which these labels would serve now: the descent starts at the highest bin
        holding labels (above the floor), so its upper confidence bound decides. Falls toward the true
        wrong rate there as labels come; 1.0 without any."""
        for index in range(self.bins - 1, -1, -1):
            if self.edge(index) < self.floor - 1e-12:
                break
            if self.labelled[index]:
                labelled, wrong = sum(self.labelled[index:]), sum(self.wrong[index:])
                return upper_wrong_rate(wrong, labelled, self.confidence)
        return 1.0


def upper_wrong_rate(wrong: int, labelled: int, confidence: float = DEFAULT_CONFIDENCE) -> float:
    """The one-sided upper confidence bound of a wrong rate: the least rate p at which `wrong` or fewer
    of `labelled` has probability <= 1 - confidence under `binomial_cdf` (Clopper-Pearson up to
    EXACT_LABELS, the Chernoff bound's, never lower, beyond); 1.0 without labels."""
    if labelled <= 0 or wrong >= labelled:
        return 1.0
    low, high = 0.0, 1.0
    for _ in range(50):  # bisection to well below any δ an operator sets
        middle = (low + high) / 2
        low, high = (low, middle) if binomial_cdf(wrong, labelled, middle) <= 1 - confidence else (middle, high)
    return high


def labels_needed(max_wrong_rate: float, confidence: float = DEFAULT_CONFIDENCE) -> int:
    """Labels without a wrong one that a threshold needs before it is accepted (about 3/δ at 95%)."""
    n = 1
    while binomial_cdf(0, n, max_wrong_rate) > 1 - confidence:
        n += 1
    return n


def counts_from_fields(fields: Mapping[bytes | str, bytes | str | int], bins: int) -> tuple[list[int], list[int]]:
    """Counts as the shared store keeps them: fields "n:<bin>" and "w:<bin>"; unknown fields are ignored."""
    labelled, wrong = [0] * bins, [0] * bins
    for raw_name, raw_value in fields.items():
        name = raw_name.decode() if isinstance(raw_name, bytes) else raw_name
        kind, _, index = name.partition(":")
        if kind in ("n", "w") and index.isdigit() and int(index) < bins:
            (labelled if kind == "n" else wrong)[int(index)] = max(0, int(raw_value))
    return labelled, wrong


def bound_params(bound: LearnedBound) -> dict[str, str]:
    """What a reader of the shared counts (the console) needs beside them to learn the same threshold."""
    return {"delta": repr(bound.max_wrong_rate), "confidence": repr(bound.confidence), "floor": repr(bound.floor),
            "bins": str(bound.bins)}


def bound_from_fields(fields: Mapping[bytes | str, bytes | str | int]) -> LearnedBound | None:
    """The bound a shared hash holds (its parameters and counts); None without its parameters."""
    named = {(k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else str(v))
             for k, v in fields.items()}
    try:
        bins = int(named["bins"])
        bound = LearnedBound(float(named["delta"]), float(named["confidence"]), bins, floor=float(named["floor"]))
    except (KeyError, ValueError):
        return None
    bound.merge(*counts_from_fields(fields, bins))
    return bound


def describe(bound: LearnedBound) -> str:
    """One line for people: what the bound promises, what it serves now, on how much evidence."""
    wrong = sum(bound.wrong)
    promise = f"at most {bound.max_wrong_rate:.2%} wrong with {bound.confidence:.0%} confidence"
    threshold = bound.threshold
    if threshold is None:
        least = bound.least_rate
        allowed = f"; its labels allow {least:.2%} now" if least < 1.0 else ""
        return (f"{promise}: cold, serves nothing yet ({bound.labels} labels, {wrong} wrong; about "
                f"{labels_needed(bound.max_wrong_rate, bound.confidence)} right ones at a score are needed{allowed})")
    return f"{promise}: serves scores >= {threshold:.2f} ({bound.labels} labels, {wrong} wrong)"


def increments(labels: Iterable[tuple[float, bool]], bound: LearnedBound) -> dict[str, int]:
    """The store's field increments for a batch of labels."""
    out: dict[str, int] = {}
    for score, right in labels:
        index = bound.bin_of(score)
        out[f"n:{index}"] = out.get(f"n:{index}", 0) + 1
        if not right:
            out[f"w:{index}"] = out.get(f"w:{index}", 0) + 1
    return out


class SharedBound:
    """One version's bound, its counts shared by the workers through a Redis hash (fields "n:<bin>",
    "w:<bin>": at most 2 x bins, whatever the traffic, and the bound's parameters). Labels are added locally and flushed with
    HINCRBY and the counts read back, at most every `refresh_s`. While Redis is away the last counts
    read stay in force and the increments wait (they are bounded by the bins too)."""

    def __init__(self, redis: AnyRedis, key: str, bound: LearnedBound, *, refresh_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic, index: tuple[str, str] | None = None) -> None:
        """`index`: (the set listing the model's bounds, this bound's member in it), for the console."""
        self._redis = redis
        self.key = key
        self._index = index
        self.bound = bound
        self._refresh_s = refresh_s
        self._clock = clock
        self._read_at: float | None = None
        self._pending: dict[str, int] = {}
        self.threshold: float | None = None
        self.least_rate = 1.0  # LearnedBound.least_rate at the last read, for the metrics
        self.waiting_since: float | None = None  # when Redis last failed, until it answers again

    def add(self, labels: Iterable[tuple[float, bool]]) -> None:
        for name, count in increments(labels, self.bound).items():
            self._pending[name] = self._pending.get(name, 0) + count

    async def sync(self) -> None:
        """Once the counts are older than `refresh_s`: flush the pending labels and read the counts back
        (one round trip, and the threshold computed again, per refresh, not per batch)."""
        now = self._clock()
        if self._read_at is not None and now - self._read_at < self._refresh_s:
            return
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                for name, count in self._pending.items():
                    pipe.hincrby(self.key, name, count)
                pipe.hset(self.key, mapping=bound_params(self.bound))
                if self._index is not None:
                    pipe.sadd(*self._index)
                pipe.hgetall(self.key)
                replies = await pipe.execute()
        except (RedisError, OSError) as error:
            if self.waiting_since is None:
                self.waiting_since = now
                log.warning("semantic bound %s: Redis unreachable (%s); serving under the last counts read, "
                            "%d label fields waiting", self.key, error, len(self._pending))
            return
        if self.waiting_since is not None:
            log.info("semantic bound %s: Redis answers again after %.1f s", self.key, now - self.waiting_since)
            self.waiting_since = None
        self._pending.clear()
        self.bound.merge(*counts_from_fields(replies[-1], self.bound.bins))
        self.threshold = self.bound.threshold
        self.least_rate = self.bound.least_rate
        self._read_at = now
