"""The build's progress lines and stage timings, on a fake clock."""

from __future__ import annotations

import io

from models.build.progress import Progress


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_long_loop_reports_at_most_every_interval_with_the_time_left() -> None:
    clock, out = FakeClock(), io.StringIO()
    report = Progress(out, clock).every(10.0, "scored")
    for done in range(1, 101):
        clock.now += 0.5
        report(done, 100)
    lines = out.getvalue().splitlines()
    assert len(lines) == 5  # at 10, 20, 30 and 40 s, then the end
    assert "scored 20/100 (20%), 10 s so far, about 40 s left" in lines[0]
    assert "scored 100/100 (100%)" in lines[-1]


def test_a_short_loop_says_nothing() -> None:
    clock, out = FakeClock(), io.StringIO()
    report = Progress(out, clock).every(10.0)
    for done in range(1, 4):
        clock.now += 1.0
        report(done, 3)
    assert out.getvalue() == ""


def test_stages_are_timed_even_when_they_fail() -> None:
    clock = FakeClock()
    progress = Progress(io.StringIO(), clock)
    with progress.stage("export"):
        clock.now += 2.5
    try:
        with progress.stage("check"):
            clock.now += 1.0
            raise RuntimeError("gate missed")
    except RuntimeError:
        pass
    assert progress.stages == [("export", 2.5), ("check", 1.0)]
    assert progress.elapsed_s == 3.5
