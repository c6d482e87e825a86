"""The learned bound: a cold tier serves nothing, the threshold it learns keeps the wrong answers
served at or under δ on streams with a known trap rate, and its counts survive a round trip
through the shared store's fields."""

from __future__ import annotations

import math
import random

import pytest

from workers.cache.learned_bound import (EXACT_LABELS, LearnedBound, binomial_cdf, bound_from_fields, bound_params,
                                         chernoff_cdf_bound, counts_from_fields, describe, increments, labels_needed,
                                         upper_wrong_rate)


def _learn(bound: LearnedBound, labels: list[tuple[float, bool]]) -> None:
    """Labels the way workers share them: increments added to the store's fields, the fields read back."""
    fields = {f"n:{i}": n for i, n in enumerate(bound.labelled)} | {f"w:{i}": w for i, w in enumerate(bound.wrong)}
    for name, count in increments(labels, bound).items():
        fields[name] = fields.get(name, 0) + count
    bound.merge(*counts_from_fields(fields, bound.bins))


def test_binomial_cdf_matches_the_sum_of_its_terms() -> None:
    n, p = 40, 0.1
    exact = sum(math.comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(5))
    assert binomial_cdf(4, n, p) == pytest.approx(exact, rel=1e-9)
    assert binomial_cdf(0, 300, 0.01) == pytest.approx(0.99**300, rel=1e-9)
    assert binomial_cdf(10, 10, 0.5) == 1.0


@pytest.mark.parametrize("wrong", [0, 5, 40, 80, 99, 100, 150])
def test_beyond_the_exact_sum_the_cdf_is_bounded_from_above_so_no_threshold_is_accepted_that_the_exact_test_refuses(
        wrong: int) -> None:
    n, p = 10_000, 0.01
    assert n > EXACT_LABELS
    log_terms = [math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * math.log(p)
                 + (n - k) * math.log1p(-p) for k in range(wrong + 1)]
    true_cdf = min(1.0, sum(math.exp(term) for term in log_terms))
    assert binomial_cdf(wrong, n, p) == chernoff_cdf_bound(wrong, n, p) >= true_cdf * (1 - 1e-9)  # equal at 0 wrong
    if wrong <= 40:
        assert binomial_cdf(wrong, n, p) < 0.05, "well under δ the bound still accepts"


def test_a_cold_bound_serves_nothing_and_needs_about_three_over_delta_clean_labels() -> None:
    bound = LearnedBound(max_wrong_rate=0.01)
    assert bound.threshold is None
    needed = labels_needed(0.01)
    assert 295 <= needed <= 300  # 0.99^n <= 0.05
    for _ in range(needed - 1):
        _learn(bound, [(0.97, True)])
    assert bound.threshold is None
    _learn(bound, [(0.97, True)])
    assert bound.threshold == pytest.approx(0.96)


def test_the_upper_bound_of_the_wrong_rate_is_the_rate_the_binomial_test_just_accepts() -> None:
    assert upper_wrong_rate(0, 0) == 1.0 and upper_wrong_rate(5, 5) == 1.0
    for wrong, labelled in ((0, 299), (3, 1000), (20, 500)):
        upper = upper_wrong_rate(wrong, labelled)
        assert wrong / labelled < upper < 1
        assert binomial_cdf(wrong, labelled, upper) <= 0.05 < binomial_cdf(wrong, labelled, upper * 0.999)
    assert upper_wrong_rate(0, labels_needed(0.01)) <= 0.01 < upper_wrong_rate(0, labels_needed(0.01) - 1)


def test_the_least_rate_falls_as_labels_come_and_the_bound_serves_once_it_is_under_delta() -> None:
    bound = LearnedBound(0.01, floor=0.9)
    assert bound.least_rate == 1.0
    seen = []
    for _ in range(4):
        _learn(bound, [(0.99, True)] * 100)
        seen.append(bound.least_rate)
        assert (bound.threshold is not None) == (bound.least_rate <= 0.01)
    assert seen == sorted(seen, reverse=True) and seen[-1] < 0.01 < seen[1]
    _learn(bound, [(0.5, False)] * 50)  # below the floor: no say in what is served
    assert bound.least_rate == seen[-1]


def test_one_wrong_label_high_up_stops_the_descent_until_enough_right_ones_outweigh_it() -> None:
    bound = LearnedBound(max_wrong_rate=0.01)
    _learn(bound, [(0.99, False)])
    for _ in range(300):
        _learn(bound, [(0.90, True)])
    assert bound.threshold is None, "the top bin's wrong answer is tested first and fails"
    for _ in range(299):
        _learn(bound, [(0.99, True)])
    assert bound.threshold is None, "1 wrong in 300 cannot yet show a rate under 1% at 95%"
    for _ in range(200):
        _learn(bound, [(0.99, True)])
    assert bound.threshold == pytest.approx(0.90)


def test_the_floor_keeps_the_threshold_at_or_above_the_verifiers_point() -> None:
    bound = LearnedBound(max_wrong_rate=0.05, floor=0.80)
    for score in (0.5, 0.6, 0.7, 0.85, 0.95):
        for _ in range(200):
            _learn(bound, [(score, True)])
    assert bound.threshold == pytest.approx(0.84), "the lowest labelled bin at or above the floor (0.85's)"


def _stream(rng: random.Random, n: int, trap_share: float) -> list[tuple[float, bool]]:
    """Candidates whose scores overlap: paraphrases mostly high, traps spread over the whole range."""
    out = []
    for _ in range(n):
        if rng.random() < trap_share:
            out.append((rng.betavariate(2, 6), False))
        else:
            out.append((rng.betavariate(12, 1), True))
    return out


@pytest.mark.parametrize("trap_share", [0.05, 0.2, 0.5])
def test_the_wrong_answers_served_stay_within_delta_on_streams_with_a_known_trap_rate(trap_share: float) -> None:
    delta, runs, over, learned = 0.02, 30, 0, 0
    for seed in range(runs):
        rng = random.Random(seed)
        bound = LearnedBound(max_wrong_rate=delta)
        _learn(bound, _stream(rng, 3000, trap_share))
        threshold = bound.threshold
        if threshold is None:
            continue
        learned += 1
        # The true wrong rate among what this threshold serves, on a large fresh stream.
        fresh = [(s, r) for s, r in _stream(random.Random(10_000 + seed), 20_000, trap_share) if s >= threshold]
        true_rate = sum(not r for _, r in fresh) / len(fresh)
        over += true_rate > delta
    assert learned >= runs // 2, "the bound must learn a threshold on most streams, or the test proves nothing"
    assert over <= math.ceil(0.05 * runs), f"{over} of {runs} learned thresholds served more than δ"


def test_the_bound_learns_a_threshold_that_still_serves_most_paraphrases() -> None:
    bound = LearnedBound(max_wrong_rate=0.02)
    _learn(bound, _stream(random.Random(7), 5000, 0.2))
    threshold = bound.threshold
    assert threshold is not None and threshold < 0.95
    fresh = _stream(random.Random(8), 20_000, 0.2)
    served_right = sum(r for s, r in fresh if s >= threshold) / sum(r for _, r in fresh)
    assert served_right > 0.3


def test_counts_round_trip_through_the_stores_fields() -> None:
    bound = LearnedBound(bins=10)
    labels = [(0.95, True), (0.95, False), (0.31, True), (1.0, True)]
    fields = {name.encode(): str(value).encode() for name, value in increments(labels, bound).items()}
    fields[b"junk"] = b"1"
    fields[b"n:99"] = b"5"  # a bin this bound does not have (another bin count): ignored
    labelled, wrong = counts_from_fields(fields, 10)
    assert labelled == [0, 0, 0, 1, 0, 0, 0, 0, 0, 3] and wrong == [0] * 9 + [1]


def test_a_reader_of_the_shared_hash_learns_the_same_threshold_and_says_it_in_a_line() -> None:
    bound = LearnedBound(max_wrong_rate=0.01, floor=0.5)
    fields: dict[str, str | int] = dict(bound_params(bound))
    assert bound_from_fields(fields) is not None
    assert "cold, serves nothing yet (0 labels, 0 wrong; about 299 right ones" in describe(bound_from_fields(fields))
    _learn(bound, [(0.97, True)] * 400)
    fields |= {f"n:{i}": n for i, n in enumerate(bound.labelled) if n}
    read = bound_from_fields({name.encode(): str(value).encode() for name, value in fields.items()})
    assert read is not None and read.threshold == bound.threshold == pytest.approx(0.96)
    assert describe(read) == "at most 1.00% wrong with 95% confidence: serves scores >= 0.96 (400 labels, 0 wrong)"
    assert bound_from_fields({b"n:3": b"5"}) is None, "counts without the parameters they were learnt under"


def test_the_upper_bound_holds_at_a_low_confidence_and_beyond_the_exact_sum() -> None:
    low = upper_wrong_rate(5, 100, confidence=0.3)  # under the observed 5%: at 30% confidence the bound is loose
    assert low < 0.05 and binomial_cdf(5, 100, low) <= 0.7 < binomial_cdf(5, 100, low * 0.999)
    beyond = upper_wrong_rate(30, EXACT_LABELS * 3)
    assert 30 / (EXACT_LABELS * 3) < beyond < 0.02
    assert binomial_cdf(30, EXACT_LABELS * 3, beyond) <= 0.05 < binomial_cdf(30, EXACT_LABELS * 3, beyond * 0.999)
