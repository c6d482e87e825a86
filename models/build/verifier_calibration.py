"""Where the verifier operates: the lowest score threshold whose false-hit rate on held-out
traps is within the target, and the gate a verifier version must pass to be registered.

The rates are per pair: the share of held-out traps whose score reaches the threshold
(served wrongly) and the share of held-out should-hit pairs that reach it (served).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from models.registry import AccuracyCheck

DEFAULT_MAX_FALSE_HITS = 0.01
MIN_SHOULD_HIT = 0.40
MAX_FALSE_HITS_ENV = "FLEET_SEMANTIC_MAX_FALSE_HITS"

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
    false_hits: float  # share of held-out traps served
    should_hit: float  # share of held-out should-hit pairs served
    traps: int
    should_hits: int


def calibrate(trap_scores: Scores, hit_scores: Scores, max_false_hits: float) -> OperatingPoint:
    """The lowest threshold serving at most `max_false_hits` of the traps: just above the
    k-th highest trap score, k = floor(max_false_hits x traps). Ties stay below it."""
    if len(trap_scores) == 0 or len(hit_scores) == 0:
        raise ValueError("calibration needs held-out traps and should-hit pairs")
    # Scores are float32 (the graph's output): the next float32 above a trap's score is the
    # smallest threshold that trap misses, whatever precision it is later compared in.
    ordered = np.sort(np.asarray(trap_scores, dtype=np.float32))[::-1]
    allowed = int(np.floor(max_false_hits * len(ordered) + 1e-9))
    threshold = float(np.nextafter(ordered[allowed], np.float32(np.inf))) if allowed < len(ordered) else 0.0
    return measure(trap_scores, hit_scores, threshold)


def measure(trap_scores: Scores, hit_scores: Scores, threshold: float) -> OperatingPoint:
    traps = np.asarray(trap_scores, dtype=np.float32)
    hits = np.asarray(hit_scores, dtype=np.float32)
    return OperatingPoint(threshold, float(np.mean(traps >= threshold)), float(np.mean(hits >= threshold)),
                          len(traps), len(hits))


def gate(point: OperatingPoint, max_false_hits: float, name: str = "verifier-heldout") -> AccuracyCheck:
    """Passes when the held-out false-hit rate is within the target and the should-hit rate
    at least MIN_SHOULD_HIT: a verifier that serves almost nothing does not pay its cost."""
    passed_false_hits = point.false_hits <= max_false_hits + 1e-12
    value = point.should_hit if passed_false_hits else -point.false_hits
    return AccuracyCheck.evaluate(
        name=name, metric="heldout_should_hit_at_target", value=value, threshold=MIN_SHOULD_HIT, comparison=">=",
        figures={"operating_threshold": point.threshold, "heldout_false_hits": point.false_hits,
                 "heldout_should_hit": point.should_hit, "max_false_hits": max_false_hits,
                 "heldout_traps": float(point.traps), "heldout_should_hit_pairs": float(point.should_hits)})
