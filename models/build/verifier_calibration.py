"""Where the verifier operates: the lowest score threshold whose false-hit rate on held-out
traps is within the target, and the gate a verifier version must pass to be registered.

The rates are per pair: the share of held-out traps whose score reaches the threshold
(served wrongly) and the share of held-out should-hit pairs that reach it (served).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from models.pair_language import pair_language
from models.registry import AccuracyCheck

DEFAULT_MAX_FALSE_HITS = 0.01
MIN_SHOULD_HIT = 0.40
MAX_FALSE_HITS_ENV = "FLEET_SEMANTIC_MAX_FALSE_HITS"
# The one-sided 95% confidence of the optional safety margin (`calibrate(margin_z=...)`). The build
# does not use it: on the outsider pair sets it cost should-hit pairs and stopped no trap
# (docs/concepts/semantic-cache.md).
MARGIN_Z = 1.645

Scores = npt.NDArray[np.float32]


def max_false_hits_from_env() -> float:
    """FLEET_SEMANTIC_MAX_FALSE_HITS, the workers' setting of the same name (default 1%)."""
    raw = os.environ.get(MAX_FALSE_HITS_ENV, "")
    value = float(raw) if raw.strip() else DEFAULT_MAX_FALSE_HITS
    if not 0 <= value < 1:
        raise SystemExit(f"{MAX_FALSE_HITS_ENV}={raw!r}: expected a share in [0, 1)")
    return value


@dataclass(frozen=True)
class OperatingPoint:
    threshold: float
    false_hits: float  # share of held-out traps served (the mean over kinds, where kinds were given)
    should_hit: float  # share of held-out should-hit pairs served
    traps: int
    should_hits: int
    pooled_false_hits: float = 0.0  # share of all held-out traps served, whatever their kind


def calibrate(trap_scores: Scores, hit_scores: Scores, max_false_hits: float,
              trap_kinds: Sequence[str] | None = None, margin_z: float = 0.0) -> OperatingPoint:
    """The lowest threshold serving at most `max_false_hits` of the traps. With `trap_kinds`, the
    rate is the mean of the per-kind rates: every kind weighs the same, so a set rich in easy
    traps (negations the guards catch anyway) cannot buy a low threshold for the hard ones. With
    `margin_z`, the upper confidence bound of the pooled rate (`upper_bound`) must be within the
    target as well: a margin for traps the held-out set does not hold."""
    if len(trap_scores) == 0 or len(hit_scores) == 0:
        raise ValueError("calibration needs held-out traps and should-hit pairs")
    traps = np.asarray(trap_scores, dtype=np.float32)
    # Scores are float32 (the graph's output): the next float32 above a trap's score is the
    # smallest threshold that trap misses, whatever precision it is later compared in.
    options = np.concatenate([[np.float32(0.0)], np.nextafter(np.unique(traps), np.float32(np.inf))])
    for threshold in options:  # ascending: the first within the target is the lowest
        within = trap_rate(traps, float(threshold), trap_kinds) <= max_false_hits + 1e-12
        served = int(np.sum(traps >= threshold))
        if within and (margin_z <= 0 or upper_bound(served, len(traps), margin_z) <= max_false_hits + 1e-12):
            return measure(traps, hit_scores, float(threshold), trap_kinds)
    raise AssertionError("unreachable: above the highest trap score no trap is served")


class LabelledPair(Protocol):
    @property
    def a(self) -> str: ...
    @property
    def b(self) -> str: ...
    @property
    def should_hit(self) -> bool: ...


def language_of(pair: LabelledPair) -> str:
    return pair_language(pair.a, pair.b)


def calibrate_by_language(pairs: Sequence[LabelledPair], scores: Scores,
                          max_false_hits: float) -> tuple[OperatingPoint, dict[str, float]]:
    """Each language's own lowest threshold that holds `max_false_hits` on its traps, and the rates
    of all pairs, each served at its language's threshold. Pooled, a language with few pairs could
    be served far more traps than the target while the rest hide it; one threshold for all, the
    strictest language's, cost the Chinese pairs most of their hits (a fine-tuned multilingual
    encoder's scores are not on one scale across languages). With more than one language the
    figures hold each one's threshold (`operating_threshold_zh`, ...) and rates; the point's
    threshold is the highest, which the worker serves at, shifting each language's scores onto it
    (workers/cache/verifier.py)."""
    should = np.array([p.should_hit for p in pairs])
    languages = np.array([language_of(p) for p in pairs])
    names = sorted(set(languages.tolist()))
    own = {name: calibrate(scores[(languages == name) & ~should], scores[(languages == name) & should],
                           max_false_hits).threshold for name in names}
    if len(names) == 1:
        return measure(scores[~should], scores[should], own[names[0]]), {}
    thresholds = np.array([own[language] for language in languages], dtype=np.float32)
    served = np.asarray(scores, dtype=np.float32) >= thresholds
    figures: dict[str, float] = {}
    for name in names:
        rows = languages == name
        figures |= {f"operating_threshold_{name}": own[name],
                    f"heldout_false_hits_{name}": float(np.mean(served[rows & ~should])),
                    f"heldout_should_hit_{name}": float(np.mean(served[rows & should]))}
    rate = float(np.mean(served[~should]))
    point = OperatingPoint(max(own.values()), rate, float(np.mean(served[should])), int((~should).sum()),
                           int(should.sum()), rate)
    return point, figures


def upper_bound(served: int, total: int, z: float = MARGIN_Z) -> float:
    """One-sided Wilson upper bound of a rate seen as `served` of `total`."""
    rate = served / total
    centre = rate + z * z / (2 * total)
    spread = z * math.sqrt(rate * (1 - rate) / total + z * z / (4 * total * total))
    return (centre + spread) / (1 + z * z / total)


def trap_rate(trap_scores: Scores, threshold: float, trap_kinds: Sequence[str] | None = None) -> float:
    served = np.asarray(trap_scores, dtype=np.float32) >= threshold
    if trap_kinds is None:
        return float(np.mean(served))
    kinds = np.asarray(trap_kinds)
    return float(np.mean([np.mean(served[kinds == kind]) for kind in np.unique(kinds)]))


def measure(trap_scores: Scores, hit_scores: Scores, threshold: float,
            trap_kinds: Sequence[str] | None = None) -> OperatingPoint:
    hits = np.asarray(hit_scores, dtype=np.float32)
    return OperatingPoint(threshold, trap_rate(trap_scores, threshold, trap_kinds), float(np.mean(hits >= threshold)),
                          len(trap_scores), len(hits), trap_rate(trap_scores, threshold))


def gate(point: OperatingPoint, max_false_hits: float, name: str = "verifier-heldout") -> AccuracyCheck:
    """Passes when the held-out false-hit rate is within the target and the should-hit rate
    at least MIN_SHOULD_HIT: a verifier that serves almost nothing does not pay its cost."""
    passed_false_hits = point.false_hits <= max_false_hits + 1e-12
    value = point.should_hit if passed_false_hits else -point.false_hits
    return AccuracyCheck.evaluate(
        name=name, metric="heldout_should_hit_at_target", value=value, threshold=MIN_SHOULD_HIT, comparison=">=",
        figures={"operating_threshold": point.threshold, "heldout_false_hits": point.false_hits,
                 "heldout_should_hit": point.should_hit, "max_false_hits": max_false_hits,
                 "heldout_traps": float(point.traps), "heldout_should_hit_pairs": float(point.should_hits),
                 "heldout_pooled_false_hits": point.pooled_false_hits,
                 "heldout_pooled_false_hits_upper_bound": upper_bound(round(point.pooled_false_hits * point.traps),
                                                                      point.traps) if point.traps else 0.0})
