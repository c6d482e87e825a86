"""Shadow comparison rules: sampling, agreement, which live answer counts, stats counters, report, windows."""

from typing import Any

import numpy as np
import pytest
from aiokafka import TopicPartition

from fleet.commands.shadow_report import summarise, worst_first
from versions.stats import ShadowSnapshot
from schemas.shadow import Comparison, ComparisonKind, LiveSource, excerpt
from schemas.wire import CacheTier, Request, Result, Status, WireError, new_request_id
from workers.shadow.compare import (Side, StatsDelta, cosine, judge, live_answer, live_timing, make_comparison,
                                    queue_increments, sampled)
from workers.shadow.replay import ReplayWindow, clamp_ranges, parse_duration, parse_time

CANDIDATE = "minilm-embed-20261130-004"
STABLE = "minilm-embed-20261130-003"


def request(text: str = "hello world") -> Request:
    return Request(id=new_request_id(), model="minilm-embed", inputs={"text": text}, deadline_ms=2, submitted_ms=1)


def result(version: str | None = STABLE, status: Status = Status.ok, **extra: Any) -> Result:
    fields: dict[str, Any] = {"outputs": {"embedding": [1.0, 0.0]}, "timings": {"inference_ms": 12.0},
                              "batch_size": 4} | extra
    return Result(id="a" * 32, model="minilm-embed", version=version, status=status, **fields)


# --- sampling ---------------------------------------------------------------------------------


def test_sampling_is_deterministic_and_near_the_fraction() -> None:
    ids = [new_request_id() for _ in range(4000)]
    first = [sampled(i, 0.25) for i in ids]
    assert first == [sampled(i, 0.25) for i in ids]
    assert 0.22 < sum(first) / len(ids) < 0.28


def test_raising_the_fraction_only_adds_requests() -> None:
    ids = [new_request_id() for _ in range(1000)]
    low = {i for i in ids if sampled(i, 0.1)}
    high = {i for i in ids if sampled(i, 0.5)}
    assert low < high


def test_sampling_extremes() -> None:
    ids = [new_request_id() for _ in range(200)]
    assert all(sampled(i, 1.0) for i in ids)
    assert not any(sampled(i, 0.0) for i in ids)


# --- agreement --------------------------------------------------------------------------------


def test_cosine_of_known_vectors() -> None:
    assert cosine([1, 0], [1, 0]) == pytest.approx(1.0)
    assert cosine([1, 0], [0, 1]) == pytest.approx(0.0)
    assert cosine([1, 1], [1, 0]) == pytest.approx(2 ** -0.5)
    assert cosine([0, 0], [1, 0]) == 0.0
    with pytest.raises(ValueError, match="widths differ"):
        cosine([1, 0, 0], [1, 0])


def test_embeddings_agree_at_the_threshold_and_not_below() -> None:
    live = {"embedding": [1.0, 0.0]}
    angle = np.arccos(0.995)
    close = {"embedding": np.array([np.cos(angle), np.sin(angle)], dtype=np.float32)}
    verdict = judge(live, close, agree_cosine=0.99)
    assert verdict.kind is ComparisonKind.embedding and verdict.agreed
    assert verdict.cosine == pytest.approx(0.995, abs=1e-6)
    assert not judge(live, close, agree_cosine=0.999).agreed


def test_labels_agree_only_when_equal() -> None:
    same = judge({"label": "refund", "score": 0.9}, {"label": "refund", "score": 0.6}, agree_cosine=0.99)
    other = judge({"label": "refund"}, {"label": "shipping"}, agree_cosine=0.99)
    assert same.kind is ComparisonKind.classification and same.agreed and same.cosine is None
    assert not other.agreed and (other.live_label, other.shadow_label) == ("refund", "shipping")


def test_different_kinds_of_output_are_incomparable() -> None:
    with pytest.raises(ValueError, match="incomparable"):
        judge({"embedding": [1.0]}, {"label": "x"}, agree_cosine=0.99)


# --- which live answer counts -----------------------------------------------------------------


def test_live_answer_rules() -> None:
    assert live_answer(None, CANDIDATE) is None
    assert live_answer(result(status=Status.error, outputs=None), CANDIDATE) is None
    assert live_answer(result(status=Status.expired, outputs=None), CANDIDATE) is None
    assert live_answer(result(version=CANDIDATE), CANDIDATE) is None  # a canary answer: the candidate itself
    assert live_answer(result(status=Status.degraded), CANDIDATE) is not None
    assert live_answer(result(), CANDIDATE) is not None


def test_live_timing_ignores_cache_hits() -> None:
    assert live_timing(result()) == (12.0, 4)
    assert live_timing(result(cache=CacheTier.exact)) == (None, None)
    assert live_timing(result(timings={})) == (None, None)


# --- records and stats ------------------------------------------------------------------------


def comparison(agreed: bool = True, cosine_value: float | None = 0.995, **extra: Any) -> Comparison:
    fields: dict[str, Any] = dict(id=new_request_id(), model="minilm-embed", live_version=STABLE,
                                  shadow_version=CANDIDATE, kind=ComparisonKind.embedding, cosine=cosine_value,
                                  agreed=agreed, live_ms=10.0, shadow_ms=6.0, live_batch=2, shadow_batch=3,
                                  live_source=LiveSource.live_result, input="text") | extra
    return Comparison(**fields)


def test_make_comparison_carries_both_sides() -> None:
    req = request("  a   long\ninput " + "x" * 200)
    made = make_comparison(req, req.text, Side(STABLE, {"embedding": [1.0, 0.0]}, 10.0, 2),
                           Side(CANDIDATE, {"embedding": [1.0, 0.1]}, 5.0, 3), LiveSource.recomputed,
                           agree_cosine=0.99)
    assert (made.id, made.live_version, made.shadow_version) == (req.id, STABLE, CANDIDATE)
    assert made.agreed and made.cosine == pytest.approx(cosine([1, 0], [1, 0.1]))
    assert (made.live_ms, made.shadow_ms, made.live_batch, made.shadow_batch) == (10.0, 5.0, 2, 3)
    assert made.input == excerpt(req.text) and len(made.input) == 80 and made.input.startswith("a long input x")
    assert Comparison.decode(made.encode()) == made


def test_comparison_decode_refuses_garbage() -> None:
    with pytest.raises(WireError):
        Comparison.decode(b"\x93\x01\x02")


def test_stats_delta_fields() -> None:
    delta = StatsDelta()
    delta.add(comparison(agreed=True, cosine_value=0.995))
    delta.add(comparison(agreed=False, cosine_value=0.9, live_ms=None, live_source=LiveSource.recomputed))
    delta.add(comparison(agreed=True, cosine_value=None, kind=ComparisonKind.classification, live_label="a",
                         shadow_label="a"))
    assert (delta.compared, delta.agreed, delta.label_agreed, delta.recomputed, delta.live_timed) == (3, 2, 1, 1, 2)
    assert delta.cosine_sum == pytest.approx(1.895)
    assert (delta.live_ms_sum, delta.shadow_ms_sum) == (20.0, 18.0)
    ints, floats = delta.increments()
    assert ints == {"compared": 3, "agreed": 2, "label_agreed": 1, "live_timed": 2, "recomputed": 1}
    assert set(floats) == {"cosine_sum", "live_ms_sum", "shadow_ms_sum"}


class RecordingPipeline:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str, float]] = []

    def hincrby(self, name: str, key: str, amount: int = 1) -> None:
        self.calls.append(("hincrby", name, key, amount))

    def hincrbyfloat(self, name: str, key: str, amount: float = 1.0) -> None:
        self.calls.append(("hincrbyfloat", name, key, amount))


def test_increments_use_int_and_float_commands_and_skip_zeros() -> None:
    pipe = RecordingPipeline()
    assert queue_increments(pipe, "k", StatsDelta()) == [] and pipe.calls == []
    names = queue_increments(pipe, "k", StatsDelta(compared=2, agreed=1, cosine_sum=1.9, errors=0))
    assert names == ["compared", "agreed", "cosine_sum"]
    assert pipe.calls == [("hincrby", "k", "compared", 2), ("hincrby", "k", "agreed", 1),
                          ("hincrbyfloat", "k", "cosine_sum", 1.9)]


# --- report -----------------------------------------------------------------------------------


def test_totals_from_a_redis_hash() -> None:
    totals = ShadowSnapshot.from_hash({b"compared": b"4", b"agreed": b"3", b"cosine_sum": b"3.96",
                                       b"live_ms_sum": b"30", b"live_timed": b"3", b"shadow_ms_sum": b"20"})
    assert totals.agreement == 0.75 and totals.mean_cosine == pytest.approx(0.99)
    assert (totals.mean_live_ms, totals.mean_shadow_ms) == (10.0, 5.0)
    assert ShadowSnapshot.from_hash({}).agreement is None


def test_summary_and_worst_first() -> None:
    good = [comparison(cosine_value=0.999 - i / 1000) for i in range(5)]
    bad = comparison(agreed=False, cosine_value=0.8)
    mismatch = comparison(agreed=False, cosine_value=None, kind=ComparisonKind.classification, live_label="a",
                          shadow_label="b")
    summary = summarise([*good, bad, mismatch], worst=3)
    assert summary.count == 7 and summary.agreed == 5
    assert summary.cosine_min == pytest.approx(0.8)
    assert summary.label_agreement == 0.0
    assert summary.worst == (mismatch, bad, good[-1])
    assert summary.live is not None and summary.live.p50 == 10.0
    assert summary.live_per_row_ms == 5.0 and summary.shadow_per_row_ms == 2.0
    agreeing_label = comparison(cosine_value=None, kind=ComparisonKind.classification, live_label="a", shadow_label="a")
    assert worst_first([agreeing_label], 5) == []


# --- replay windows ---------------------------------------------------------------------------


def test_durations() -> None:
    assert parse_duration("1h") == 3600 and parse_duration("30m") == 1800 and parse_duration("1h30m") == 5400
    assert parse_duration("90s") == 90 and parse_duration("2d") == 172800
    for wrong in ("", "1x", "h", "1h!"):
        with pytest.raises(ValueError):
            parse_duration(wrong)


def test_time_windows() -> None:
    window = ReplayWindow.since("1h", now=10_000_000)
    assert (window.start_ms, window.end_ms) == (10_000_000 - 3_600_000, 10_000_000)
    assert window.keeps(10_000_000 - 1) and not window.keeps(10_000_000) and not window.keeps(6_399_999)
    assert parse_time("1970-01-01T00:00:01") == 1000 and parse_time("1970-01-01T01:00:01+01:00") == 1000
    with pytest.raises(ValueError):
        ReplayWindow(start_ms=1, from_offset=2)


def test_offset_ranges_stay_inside_the_partition() -> None:
    a, b, c = (TopicPartition("t", p) for p in range(3))
    begins, ends = {a: 0, b: 50, c: 0}, {a: 100, b: 200, c: 10}
    assert clamp_ranges(begins, ends, 20, 120) == {a: (20, 100), b: (50, 120)}
    assert clamp_ranges(begins, ends, None, None) == {a: (0, 100), b: (50, 200), c: (0, 10)}
