"""The cache benchmark's pure parts: the seeded Zipf workload, the hit-rate accounting and the
target verdicts (no Kafka, Redis or model needed)."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from fleet_dev.bench.cache_workload import (CLOSERS, OPENERS, TierShares, base_texts, cache_workload, calibrate_exponent,
                                        expected_repeat_share, failed, format_verdicts, query_groups, query_set,
                                        tier_shares, verdicts, zipf_draw, zipf_weights)


def test_the_query_set_is_the_projects_support_texts_in_light_variants() -> None:
    texts = base_texts()
    assert len(texts) > 500 and len(set(texts)) == len(texts)
    assert "How do I reset my password?" in texts  # a paraphrase pair's side
    queries = query_set(texts, seed=1)
    assert len(queries) == len(texts) * len(OPENERS) * len(CLOSERS)
    assert queries == query_set(texts, seed=1) and queries != query_set(texts, seed=2)
    assert "hi, How do I reset my password?" in queries


def test_zipf_draws_are_the_same_for_the_same_seed_and_favour_low_ranks() -> None:
    first = zipf_draw(1000, 1.1, 5000, seed=3)
    assert first == zipf_draw(1000, 1.1, 5000, seed=3)
    assert first != zipf_draw(1000, 1.1, 5000, seed=4)
    assert all(0 <= rank < 1000 for rank in first)
    counts = Counter(first)
    assert counts[0] > counts[1] > counts[9] and counts[0] > 5000 * 0.1


def test_zipf_weights_sum_to_one_and_an_exponent_of_zero_is_uniform() -> None:
    assert math.isclose(sum(zipf_weights(500, 0.8)), 1.0)
    assert zipf_weights(4, 0.0) == [0.25] * 4
    with pytest.raises(ValueError):
        zipf_weights(0, 1.0)
    with pytest.raises(ValueError):
        zipf_draw(10, 1.0, -1, seed=1)


def test_the_expected_repeat_share_matches_a_large_draw() -> None:
    expected = expected_repeat_share(2000, 0.9, 3000)
    observed = [1 - len(set(zipf_draw(2000, 0.9, 3000, seed))) / 3000 for seed in range(5)]
    assert abs(sum(observed) / len(observed) - expected) < 0.02
    assert expected_repeat_share(2000, 1.2, 3000) > expected  # steeper: more repeats


def test_calibration_hits_the_requested_repeat_share_and_clamps() -> None:
    exponent = calibrate_exponent(5000, 2000, 0.4)
    assert abs(expected_repeat_share(5000, exponent, 2000) - 0.4) < 1e-3
    assert calibrate_exponent(5000, 2000, 0.0) == 0.0
    assert calibrate_exponent(10, 2000, 0.2) == 0.0  # 10 queries in 2000 draws repeat anyway


def test_the_workload_is_seeded_and_near_its_share_of_base_text_repeats() -> None:
    workload = cache_workload(1500, seed=5, repeat_share=0.5)
    assert workload.texts == cache_workload(1500, seed=5, repeat_share=0.5).texts
    base_of = {query: base for base, query in query_groups(base_texts(), seed=5)}
    seen: set[int] = set()
    repeats = 0
    for text in workload.texts:
        repeats += base_of[text] in seen
        seen.add(base_of[text])
    assert abs(repeats / len(workload.texts) - 0.5) < 0.04
    assert workload.repeat_share < repeats / len(workload.texts)  # exact repeats are a part of them


def test_tier_shares_split_exact_hits_by_tier_and_count_in_batch_followers() -> None:
    shares = tier_shares({"exact": 40, "semantic": 10, "miss": 50}, computed=45, local_hits=30, redis_hits=10)
    assert shares == TierShares(requests=100, exact_local=30.0, exact_redis=10.0, semantic=10, in_batch=5, model=45,
                                errors=0)
    assert math.isclose(shares.combined, 0.55)
    assert shares.as_dict()["model"] == 0.45 and shares.as_dict()["in_batch"] == 0.05


def test_tier_shares_without_caches_and_with_errors() -> None:
    off = tier_shares({"miss": 98}, computed=98, local_hits=0, redis_hits=0, errors=2)
    assert off.requests == 100 and off.combined == 0.0 and off.share(off.model) == 0.98
    assert math.isnan(tier_shares({}, computed=0, local_hits=0, redis_hits=0).combined)
    with pytest.raises(ValueError):  # the model cannot compute more rows than there are misses
        tier_shares({"miss": 3}, computed=4, local_hits=0, redis_hits=0)


def test_verdicts_judge_each_target_at_its_edge() -> None:
    met = verdicts(exact_per_s=10_000, hit_p99_ms=7.0, bare_p99_ms=5.0, speedup=1.8, combined_hit_rate=0.5)
    assert [check.met for check in met] == [True, True, True, True] and failed(met) == []
    missed = verdicts(exact_per_s=9_999, hit_p99_ms=7.01, bare_p99_ms=5.0, speedup=1.79, combined_hit_rate=0.61)
    assert [check.met for check in missed] == [False, False, False, False]
    assert len(failed(missed)) == 4
    table = format_verdicts(missed)
    assert "NOT met" in table and "9,999 req/s" in table


def test_a_figure_that_could_not_be_measured_fails_instead_of_passing() -> None:
    checks = verdicts(exact_per_s=math.nan, hit_p99_ms=1.0, bare_p99_ms=1.0, speedup=2.0, combined_hit_rate=0.5)
    assert checks[0].met is None and failed(checks) == [checks[0]]
    assert "-" in format_verdicts(checks).splitlines()[2]
