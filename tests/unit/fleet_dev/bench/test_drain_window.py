"""When `scripts/bench device` times a drain: between 10% and 90% of its replies, whatever the polls see."""

import pytest

from fleet_dev.bench.drain_window import DrainedBeforeFirstPoll, DrainWindow, Poll, Stall


def poll(at: float, replies: int) -> Poll:
    return Poll(at, replies, cpu_s=at / 2)


def test_the_window_runs_from_the_first_poll_past_10_to_the_first_past_90_percent() -> None:
    window = DrainWindow(1000)
    seen = [window.see(poll(t, n)) for t, n in [(0, 0), (1, 50), (2, 120), (3, 600), (4, 950)]]
    assert seen[:4] == [None] * 4
    assert seen[4] == (poll(2, 120), poll(4, 950))


def test_a_drain_that_passes_both_marks_between_two_polls_opens_at_the_poll_before() -> None:
    # Four workers on two busy cores: 0 replies at one look, all 40,000 at the next. The old loop
    # took the second look as the window's start and then waited for more replies for good.
    window = DrainWindow(40_000)
    assert window.see(poll(10, 0)) is None
    assert window.see(poll(12, 40_000)) == (poll(10, 0), poll(12, 40_000))


def test_a_backlog_answered_before_the_first_look_cannot_be_timed() -> None:
    window = DrainWindow(100)
    with pytest.raises(DrainedBeforeFirstPoll, match="100 of 100"):
        window.see(poll(0, 100))


def test_a_stall_counts_from_the_last_change() -> None:
    stall = Stall(since=0.0)
    assert stall.for_s(poll(1, 5)) == 0
    assert stall.for_s(poll(30, 5)) == 29
    assert stall.for_s(poll(31, 6)) == 0 and stall.for_s(poll(95, 6)) == 64


def test_a_reply_stream_that_expired_is_no_progress() -> None:
    # The bench gives results a 30 s TTL, refreshed on the stream by every write: a stalled drain's
    # stream expires and reads 0, which must not restart the clock.
    stall = Stall(since=0.0)
    assert stall.for_s(poll(1, 12_000)) == 0
    assert stall.for_s(poll(35, 0)) == 34 and stall.for_s(poll(41, 0)) == 40
