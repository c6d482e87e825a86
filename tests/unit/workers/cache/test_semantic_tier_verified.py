"""The verifier's part of a semantic lookup, as pure logic: candidates from the index, the
choice among them by score, the counters, the threshold descending within its budget, and
the cost model counting the verifier per candidate."""

from __future__ import annotations

import logging

import msgpack
import numpy as np
import numpy.typing as npt
import pytest

from workers.cache.semantic import SemanticCache, SemanticHit
from workers.cache.lookup_cost import LookupCost
from workers.cache.choice import UNDECIDED, Candidate, candidate_pairs, choose, same_answer

DIM = 16


def unit(seed: int) -> npt.NDArray[np.float32]:
    v = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
    return v / np.linalg.norm(v)


def at_cosine(v: npt.NDArray[np.float32], cosine: float, seed: int = 99) -> npt.NDArray[np.float32]:
    w = unit(seed)
    w = w - (w @ v) * v
    w /= np.linalg.norm(w)
    return (cosine * v + np.sqrt(1 - cosine**2) * w).astype(np.float32)


def test_candidates_are_the_neighbours_above_the_threshold_that_the_guard_passes() -> None:
    cache = SemanticCache(DIM, threshold=0.80, guard=lambda a, b: "negation" if "not" in b else None)
    v = unit(1)
    cache.add(["is the pool open", "is the pool not open", "far away"],
              np.stack([at_cosine(v, 0.9, 2), at_cosine(v, 0.95, 3), at_cosine(v, 0.5, 4)]), [b"a", b"b", b"c"])
    (found,) = cache.candidates(["is the pool open now"], v[None, :])
    assert [c.matched_text for c in found] == ["is the pool open"]  # the negation is guarded, the far one below
    assert found[0].similarity == pytest.approx(0.9, abs=1e-5)
    assert cache.hits == 0 and cache.misses == 0  # counted when settled


def test_choose_takes_the_best_scored_candidate_at_or_above_the_threshold() -> None:
    a, b, c = (Candidate(bytes([i]), 0.9 - i / 100, f"t{i}") for i in range(3))
    candidates = [[a, b], [c], []]
    assert candidate_pairs(["x", "y", "z"], candidates) == [("x", "t0"), ("x", "t1"), ("y", "t2")]
    chosen, refused = choose(candidates, np.array([0.4, 0.97, 0.6], dtype=np.float32), threshold=0.95)
    assert chosen == [(b, pytest.approx(0.97)), None, None]
    assert refused == {}


def test_choose_judges_only_the_top_k_and_checks_the_score_count() -> None:
    found = [[Candidate(b"", 0.9, f"t{i}") for i in range(5)]]
    assert len(candidate_pairs(["x"], found, top_k=3)) == 3
    assert choose(found, np.array([0.1, 0.2, 0.99], dtype=np.float32), 0.5, top_k=3)[0][0][0].matched_text == "t2"
    with pytest.raises(ValueError):
        choose(found, np.array([0.1, 0.2], dtype=np.float32), 0.5, top_k=3)


def answer(label: str, score: float = 0.9) -> bytes:
    return msgpack.packb({"label": label, "scores": [score, 1 - score]})


def test_a_neighbourhood_whose_likely_candidates_answer_differently_is_not_served() -> None:
    """The stream bench's case: "enable two-step verification" near a cached "disable" question."""
    enable, disable = Candidate(answer("enable_2fa"), 0.95, "启用两步验证"), Candidate(answer("disable_2fa"), 0.94, "关闭两步验证")
    chosen, refused = choose([[], [enable, disable]], np.array([0.99, 0.7], dtype=np.float32), threshold=0.95)
    assert chosen == [None, None] and refused == {1: pytest.approx(0.99)}, "by row, with the best score"
    chosen, refused = choose([[enable, disable]], np.array([0.99, UNDECIDED - 0.01], dtype=np.float32), threshold=0.95)
    assert chosen == [(enable, pytest.approx(0.99))] and refused == {}  # the verifier rules the other one out
    chosen, refused = choose([[enable, disable]], np.array([0.9, 0.7], dtype=np.float32), threshold=0.95)
    assert chosen == [None] and refused == {}, "under the threshold it is a plain miss"


def test_candidates_agreeing_on_the_answer_are_served_whatever_else_differs() -> None:
    first = Candidate(answer("reset_password", 0.9), 0.95, "忘记密码怎么办")
    second = Candidate(answer("reset_password", 0.8), 0.93, "密码忘了")
    chosen, refused = choose([[first, second]], np.array([0.97, 0.98], dtype=np.float32), threshold=0.95)
    assert chosen == [(second, pytest.approx(0.98))] and refused == {}


def test_an_answer_a_worker_did_not_write_never_agrees() -> None:
    assert same_answer(b"\xc1", b"\xc1")  # the same bytes are the same answer
    assert not same_answer(b"\xc1", answer("a"))
    assert not same_answer(msgpack.packb(3), msgpack.packb(4))
    assert same_answer(answer("a", 0.9), answer("a", 0.6)) and not same_answer(answer("a"), answer("b"))
    assert not same_answer(msgpack.packb({"embedding": [[1.0, 0.0]]}), msgpack.packb({"embedding": ["x", "y"]}))


def test_without_a_verifier_neighbours_above_the_threshold_that_answer_differently_are_not_served() -> None:
    cache = SemanticCache(DIM, threshold=0.90, verify_fraction=0.0, guard=None)
    v = unit(1)
    cache.add(["turn on two-step login", "turn off two-step login"],
              np.stack([at_cosine(v, 0.95, 2), at_cosine(v, 0.93, 3)]), [answer("enable_2fa"), answer("disable_2fa")])
    assert cache.lookup(["enable two-step login please"], v[None, :]) == [None]
    assert cache.ambiguous == 1 and cache.misses == 1
    w = unit(5)
    cache.add(["close my account", "delete my account"], np.stack([at_cosine(w, 0.97, 6), at_cosine(w, 0.95, 7)]),
              [answer("delete_account", 0.9), answer("delete_account", 0.7)])
    (hit,) = cache.lookup(["remove my account"], w[None, :])
    assert hit is not None and hit.matched_text == "close my account", "neighbours that agree are served"
    assert cache.ambiguous == 1


def test_settle_counts_hits_and_misses() -> None:
    cache = SemanticCache(DIM, verify_fraction=0.0)
    hits = cache.settle([(Candidate(b"x", 0.9, "t"), 0.99), None])
    assert isinstance(hits[0], SemanticHit) and hits[0].verifier_score == 0.99 and hits[1] is None
    assert cache.hits == 1 and cache.misses == 1


def _verify(cache: SemanticCache, n: int, false_at: tuple[int, ...] = ()) -> None:
    for i in range(n):
        hit = SemanticHit(b"", 0.9, "t", verify=True, threshold=cache.threshold)
        cache.record_verification(hit, agreed=i not in false_at)


def test_the_threshold_descends_while_verified_hits_stay_within_half_the_budget(caplog: pytest.LogCaptureFixture) -> None:
    cache = SemanticCache(DIM, threshold=0.85, min_threshold=0.80, false_hit_budget=0.02, min_verifications=10,
                          window=50, threshold_step=0.01)
    with caplog.at_level(logging.WARNING):
        _verify(cache, 49)
        assert cache.threshold == 0.85  # the window is not full yet
        _verify(cache, 1)
        assert cache.threshold == pytest.approx(0.84)
        _verify(cache, 50 * 10)
    assert cache.threshold == pytest.approx(0.80)  # the floor holds
    assert cache.threshold_changes == {"raised": 0, "lowered": 5}
    assert sum("threshold lowered" in r.message for r in caplog.records) == 5


def test_no_descent_near_the_budget_and_a_raise_above_it() -> None:
    cache = SemanticCache(DIM, threshold=0.85, min_threshold=0.80, false_hit_budget=0.02, min_verifications=10,
                          window=50)
    _verify(cache, 50, false_at=(49,))  # one false hit in 50: 2%, within the budget but not half of it
    assert cache.threshold == 0.85
    _verify(cache, 50, false_at=tuple(range(0, 50, 5)))  # 20%: over
    assert cache.threshold > 0.85 and cache.threshold_changes["raised"] >= 1


def test_without_a_floor_the_threshold_never_descends() -> None:
    cache = SemanticCache(DIM, threshold=0.90, min_verifications=10, window=20)
    _verify(cache, 200)
    assert cache.threshold == 0.90 and cache.threshold_changes["lowered"] == 0


def test_the_cost_model_counts_the_verifier_per_candidate() -> None:
    cost = LookupCost(alpha=1.0, warmup_rows=0)  # the measured hit rate counts from the first lookup
    cost.record_model(10, 10.0)
    cost.record_model(20, 20.0)  # one more model row costs 1 ms
    cost.record_lookup(10, 8, encoder_ms=2.0, candidates=5, verifier_ms=5.0)
    assert cost.verifier_ms_per_row == pytest.approx(0.5)  # 1 ms per candidate x 0.5 candidates per row
    assert cost.cost_ms_per_row == pytest.approx(0.7)
    assert cost.paying  # hits save 0.8 ms per row, lookups cost 0.7
    cost.record_lookup(10, 8, encoder_ms=2.0, candidates=10, verifier_ms=20.0)
    assert cost.cost_ms_per_row == pytest.approx(2.2) and not cost.paying  # a dear verifier stays off


def test_a_language_calibrated_lower_meets_the_one_threshold_exactly_where_it_met_its_own() -> None:
    import math

    from workers.cache.verifier import onto_one_scale

    def logit(p: float) -> float:
        return math.log(p / (1 - p))

    threshold, chinese_threshold = 0.989, 0.969
    shifts = {"zh": logit(threshold) - logit(chinese_threshold)}
    pairs = [("今天天气如何", "今天天气怎么样"), ("明天天气怎么样", "今天天气怎么样"), ("is it open", "is it open now")]
    raw = np.array([0.975, 0.96, 0.975], dtype=np.float32)
    shifted = onto_one_scale(raw, pairs, shifts)
    assert shifted[0] >= threshold > shifted[1], "Chinese: served above its own 0.969, not below"
    assert shifted[2] == raw[2] < threshold, "English keeps its score and its threshold"
    assert np.all(np.diff(onto_one_scale(np.linspace(0.01, 0.99, 50, dtype=np.float32), pairs[:1] * 50, shifts)) > 0)
    assert onto_one_scale(raw, pairs, {}) is raw
