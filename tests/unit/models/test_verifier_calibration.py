"""Calibration of the verifier's threshold and the gate that refuses a verifier missing its target."""

from __future__ import annotations

import numpy as np
import pytest

from models.build.verifier_calibration import (
    MIN_SHOULD_HIT,
    calibrate,
    gate,
    max_false_hits_from_env,
    measure,
    upper_bound,
)


def test_the_threshold_serves_at_most_the_target_share_of_traps() -> None:
    rng = np.random.default_rng(0)
    traps = rng.uniform(0, 0.9, 1000).astype(np.float32)
    hits = rng.uniform(0.5, 1.0, 500).astype(np.float32)
    point = calibrate(traps, hits, 0.01)
    assert point.false_hits <= 0.01
    assert np.sum(traps >= point.threshold) == 10  # exactly the allowed number: the lowest such threshold
    assert point.should_hit == pytest.approx(float(np.mean(hits >= point.threshold)))


def test_a_zero_target_sits_above_every_trap() -> None:
    traps = np.array([0.2, 0.7, 0.95], dtype=np.float32)
    point = calibrate(traps, np.array([0.99, 0.5], dtype=np.float32), 0.0)
    assert point.threshold > 0.95 and point.false_hits == 0.0 and point.should_hit == 0.5


def test_ties_at_the_threshold_count_as_served() -> None:
    traps = np.array([0.9] * 10 + [0.1] * 90, dtype=np.float32)
    point = calibrate(traps, np.array([0.95], dtype=np.float32), 0.05)
    assert point.false_hits == 0.0  # the ten tied traps cannot be split: the threshold goes above them all


def test_the_gate_passes_a_verifier_at_target_and_refuses_one_that_serves_too_little() -> None:
    good = measure(np.array([0.1, 0.2], dtype=np.float32), np.array([0.9, 0.95, 0.3], dtype=np.float32), 0.5)
    assert gate(good, 0.01).passed and gate(good, 0.01).figures["operating_threshold"] == 0.5
    weak = measure(np.array([0.1], dtype=np.float32), np.array([0.9, 0.2, 0.3], dtype=np.float32), 0.5)
    assert weak.should_hit < MIN_SHOULD_HIT and not gate(weak, 0.01).passed


def test_the_gate_refuses_a_verifier_over_its_false_hit_target() -> None:
    over = measure(np.array([0.9, 0.1], dtype=np.float32), np.array([0.95], dtype=np.float32), 0.5)
    assert over.false_hits == 0.5 and not gate(over, 0.01).passed


def test_the_target_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FLEET_SEMANTIC_MAX_FALSE_HITS", raising=False)
    assert max_false_hits_from_env() == 0.01
    monkeypatch.setenv("FLEET_SEMANTIC_MAX_FALSE_HITS", "0.02")
    assert max_false_hits_from_env() == 0.02
    monkeypatch.setenv("FLEET_SEMANTIC_MAX_FALSE_HITS", "2")
    with pytest.raises(SystemExit):
        max_false_hits_from_env()


def test_with_kinds_every_kind_weighs_the_same() -> None:
    # 100 easy traps of one kind, 10 hard ones of another: pooled, two hard traps served are 1.8%;
    # per kind they are 20% of theirs.
    traps = np.array([0.1] * 100 + [0.9, 0.8] + [0.2] * 8, dtype=np.float32)
    kinds = ["negation"] * 100 + ["antonym"] * 10
    hits = np.array([0.85, 0.95], dtype=np.float32)
    pooled = calibrate(traps, hits, 0.02)
    per_kind = calibrate(traps, hits, 0.02, trap_kinds=kinds)
    assert pooled.threshold <= 0.8 and pooled.should_hit == 1.0
    assert per_kind.threshold > 0.9 and per_kind.false_hits == 0.0 and per_kind.should_hit == 0.5


def test_the_margin_keeps_the_upper_confidence_bound_within_the_target() -> None:
    # 1000 traps: without the margin the 1% target allows 10 of them; the pooled rate's 95% upper
    # bound must also be within 1%, which allows 4 (upper bound 0.89% for 4, 1.02% for 5).
    traps = np.linspace(0.0, 0.99, 1000).astype(np.float32)
    hits = np.array([0.995, 0.5], dtype=np.float32)
    plain = calibrate(traps, hits, 0.01)
    margin = calibrate(traps, hits, 0.01, margin_z=1.645)
    assert np.sum(traps >= plain.threshold) == 10
    assert np.sum(traps >= margin.threshold) == 4 and margin.threshold > plain.threshold
    assert upper_bound(4, 1000) <= 0.01 < upper_bound(5, 1000)


def test_the_upper_bound_is_above_the_rate_and_shrinks_with_more_pairs() -> None:
    assert upper_bound(0, 100) > 0 and upper_bound(10, 100) > 0.1
    assert upper_bound(10, 1000) < upper_bound(1, 100)


def test_each_language_is_held_to_the_target_not_only_their_pool() -> None:
    from models.build.verifier_calibration import calibrate_by_language
    from models.build.verifier_pairs import PairExample

    english = [PairExample(f"q{i}", f"r{i}", "entity", "calibration") for i in range(200)]
    chinese = [PairExample(f"问{i}", f"答{i}", "negation", "calibration") for i in range(20)]
    hits = [PairExample(f"a{i}", f"b{i}", "paraphrase", "calibration") for i in range(10)] + \
        [PairExample(f"甲{i}", f"乙{i}", "paraphrase", "calibration") for i in range(10)]
    pairs = [*english, *chinese, *hits]
    # The Chinese traps score high: pooled, 1% of 220 traps would let two of them through.
    scores = np.array([0.1] * 200 + [0.5 + 0.02 * i for i in range(20)] + [0.99] * 20, dtype=np.float32)
    point, figures = calibrate_by_language(pairs, scores, 0.01)
    assert point.threshold > 0.88 and figures["heldout_false_hits_zh"] == 0.0
    assert figures["heldout_should_hit_en"] == 1.0 and figures["heldout_should_hit_zh"] == 1.0
    alone, none = calibrate_by_language([*english, *hits[:10]], scores[[*range(200), *range(220, 230)]], 0.01)
    assert alone.threshold <= 0.1 + 1e-6 and none == {}, "one language: as before, no per-language figures"
