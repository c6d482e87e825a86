"""Rollout gates as pure functions: breach, wait for data or time, pass; and the latency histogram."""

import math

import pytest
from pydantic import ValidationError

from redis.asyncio import Redis

from versions.pointers import PointerState, RolloutState
from versions.rollout_gates import (
    RolloutPlan,
    RolloutSettings,
    Verdict,
    evaluate_shadow,
    evaluate_stage,
    pick_baseline,
)
from versions.stats import (
    BUCKET_FIELDS,
    LATENCY_BOUNDS_MS,
    ShadowSnapshot,
    StatsSnapshot,
    StatsWindow,
    VersionStatsRecorder,
    bucket_index,
)

PLAN = RolloutPlan(min_stage_s=10, shadow_min_s=10, shadow_min_compared=200, min_stage_requests=100)
GOOD_SHADOW = ShadowSnapshot(compared=400, agreed=399, cosine_sum=399.0)


def window(requests: int, errors: int = 0, latency_ms: float = 20.0, slow: int = 0, slow_ms: float = 500) -> StatsWindow:
    """`requests` latencies of `latency_ms`, `slow` of them replaced by `slow_ms`."""
    buckets = [0] * len(LATENCY_BOUNDS_MS)
    buckets[bucket_index(latency_ms)] += requests - slow
    buckets[bucket_index(slow_ms)] += slow
    return StatsWindow(requests, errors, tuple(buckets), 10.0)


def stage(candidate: StatsWindow, stable: StatsWindow | None = None, shadow: ShadowSnapshot = GOOD_SHADOW,
          elapsed_s: float = 11.0, percent: float = 5):  # type: ignore[no-untyped-def]
    return evaluate_stage(PLAN, percent=percent, elapsed_s=elapsed_s, candidate=candidate,
                          stable=window(5000) if stable is None else stable, shadow=shadow)


def test_clean_candidate_after_min_time_passes() -> None:
    result = stage(window(300))
    assert result.verdict == Verdict.passed
    assert {c.gate for c in result.checks} == {"error_rate", "p99", "agreement", "time"}


def test_error_breach_names_the_gate_and_figures() -> None:
    result = stage(window(200, errors=24))
    assert result.verdict == Verdict.breach
    assert result.reason == "error_rate gate: error rate 12.0% > 1.0% (stable 0.0%) at stage 5%"


def test_error_breach_is_judged_before_the_stage_time_is_up() -> None:
    assert stage(window(200, errors=40), elapsed_s=1).verdict == Verdict.breach


def test_error_rate_allowed_relative_to_a_noisy_stable() -> None:
    # stable 3% errors: candidate 5% is within 2x stable, 7% is not.
    stable = window(5000, errors=150)
    assert stage(window(1000, errors=50), stable).verdict == Verdict.passed
    breach = stage(window(1000, errors=70), stable)
    assert breach.verdict == Verdict.breach and "> 6.0% (stable 3.0%)" in breach.reason


def test_p99_breach_against_stable() -> None:
    result = stage(window(300, slow=10, slow_ms=400))  # 3.3% at 400 ms: p99 400 vs stable 20
    assert result.verdict == Verdict.breach
    assert result.reason == "p99 gate: p99 400 ms > 1.5 x stable p99 20 ms at stage 5%"


def test_p99_one_bucket_up_is_within_the_ratio() -> None:
    # Neighbouring bounds are at most 1.5x apart, so one bucket of drift never breaches by itself.
    ratios = [b / a for a, b in zip(LATENCY_BOUNDS_MS, LATENCY_BOUNDS_MS[1:-1])]
    assert max(ratios) <= 1.5
    assert stage(window(300, latency_ms=29), window(5000, latency_ms=19)).verdict == Verdict.passed


def test_agreement_breach_at_a_stage() -> None:
    result = stage(window(300), shadow=ShadowSnapshot(compared=1000, agreed=950))
    assert result.verdict == Verdict.breach
    assert result.reason == "agreement gate: shadow agreement 95.0% < 99.0% over 1000 compared at stage 5%"


@pytest.mark.parametrize("candidate, elapsed_s, gate", [
    (window(50), 11.0, "error_rate"),       # too few candidate requests
    (window(300), 3.0, "time"),              # stage time not up
])
def test_insufficient_data_or_time_waits(candidate: StatsWindow, elapsed_s: float, gate: str) -> None:
    result = stage(candidate, elapsed_s=elapsed_s)
    assert result.verdict == Verdict.wait
    assert result.reason.startswith(f"{gate} gate:")


def test_no_stable_baseline_waits_instead_of_passing() -> None:
    result = evaluate_stage(PLAN, percent=100, elapsed_s=11, candidate=window(300), stable=None, shadow=GOOD_SHADOW)
    assert result.verdict == Verdict.wait
    assert "no stable latency baseline" in result.reason


def test_baseline_carries_over_when_stable_gets_no_traffic() -> None:
    carried = window(5000)
    assert pick_baseline(window(3), carried, 100) is carried
    current = window(500)
    assert pick_baseline(current, carried, 100) is current


def test_shadow_gate() -> None:
    assert evaluate_shadow(PLAN, elapsed_s=11, shadow=GOOD_SHADOW).verdict == Verdict.passed
    assert evaluate_shadow(PLAN, elapsed_s=5, shadow=GOOD_SHADOW).verdict == Verdict.wait
    waiting = evaluate_shadow(PLAN, elapsed_s=11, shadow=ShadowSnapshot(compared=50, agreed=50))
    assert waiting.verdict == Verdict.wait and "50/200 compared" in waiting.reason
    failed = evaluate_shadow(PLAN, elapsed_s=1, shadow=ShadowSnapshot(compared=300, agreed=270))
    assert failed.verdict == Verdict.breach and "90.0% < 99.0%" in failed.reason
    broken = evaluate_shadow(PLAN, elapsed_s=1, shadow=ShadowSnapshot(compared=0, agreed=0, errors=250))
    assert broken.verdict == Verdict.breach
    assert broken.reason == "shadow_errors gate: shadow error rate 100.0% > 1.0% over 250 shadowed at shadow"
    no_shadow = PLAN.model_copy(update={"shadow_min_compared": 0})
    assert evaluate_shadow(no_shadow, elapsed_s=11, shadow=ShadowSnapshot()).verdict == Verdict.passed


def test_histogram_window_and_p99() -> None:
    earlier = StatsSnapshot(100, 1, tuple([0] * 9 + [100] + [0] * 20), taken_s=1.0)
    buckets = list(earlier.buckets)
    buckets[bucket_index(20)] += 98
    buckets[bucket_index(9000)] += 2
    later = StatsSnapshot(200, 4, tuple(buckets), taken_s=3.0)
    delta = later.since(earlier)
    assert (delta.requests, delta.errors, delta.seconds) == (100, 3, 2.0)
    assert delta.error_rate == pytest.approx(0.03)
    assert delta.p99_ms == 10000  # 2 of 100 in the (7500, 10000] bucket
    assert window(100, latency_ms=20_000).p99_ms == math.inf
    assert StatsWindow(0, 0, (0,) * len(BUCKET_FIELDS), 0).p99_ms is None
    # A counter reset (expired hash) starts the window afresh instead of going negative.
    assert StatsSnapshot(5, 0, later.buckets, 4.0).since(later).requests == 5


def test_plan_validation_and_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValidationError):
        RolloutPlan(stages=(1, 5, 50))
    with pytest.raises(ValidationError):
        RolloutPlan(stages=(5, 1, 100))
    monkeypatch.setenv("FLEET_ROLLOUT_STAGES", "2, 10,100")
    monkeypatch.setenv("FLEET_ROLLOUT_MIN_STAGE_S", "0.5")
    plan = RolloutSettings().plan(shadow_min_s=1.0)
    assert plan.stages == (2.0, 10.0, 100.0) and plan.min_stage_s == 0.5 and plan.shadow_min_s == 1.0


def test_pointer_hash_round_trip() -> None:
    state = PointerState(stable="m-20260101-001", candidate="m-20260101-002", percent=5, state=RolloutState.canary,
                         stage=1, reason="r", updated_ms=7, actor="a")
    fields = state.to_hash()
    assert "previous" not in fields and fields["percent"] == "5"
    assert PointerState.from_hash({k.encode(): v.encode() for k, v in fields.items()}) == state
    assert PointerState.from_hash({}) == PointerState()


async def test_stats_recorder_never_raises_into_the_worker() -> None:
    # Nothing listens on port 1: the write fails, is counted and logged, and the batch goes on.
    redis = Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.2)
    recorder = VersionStatsRecorder(redis, "m")
    try:
        assert await recorder.record("m-20260101-001", 3, 1, [5.0, 12.0, 900.0, 20_000.0]) is False
        assert recorder.failures == 1
    finally:
        await redis.aclose()


def test_bucket_fields_are_named_by_upper_bound() -> None:
    assert BUCKET_FIELDS[bucket_index(10)] == "le_10" and BUCKET_FIELDS[bucket_index(10.01)] == "le_15"
    assert BUCKET_FIELDS[bucket_index(1.2)] == "le_1.5" and BUCKET_FIELDS[-1] == "le_inf"


def test_an_embedding_candidate_is_judged_by_mean_cosine_not_per_request_agreement() -> None:
    # An INT8 build: most rows below a 0.99 per-request cosine, yet a mean of 0.992 (measured on MiniLM).
    int8_like = ShadowSnapshot(compared=300, agreed=260, cosine_sum=300 * 0.992)
    assert evaluate_shadow(PLAN, elapsed_s=PLAN.shadow_min_s + 1, shadow=int8_like).verdict == Verdict.passed
    drifted = ShadowSnapshot(compared=300, agreed=300, cosine_sum=300 * 0.97)
    result = evaluate_shadow(PLAN, elapsed_s=1, shadow=drifted)
    assert result.verdict == Verdict.breach and "mean cosine 0.9700" in result.reason
