"""Pure logic of the operator commands: lag drain estimates, scale planning, consistency verdicts."""

import math
from collections import Counter

import numpy as np
import pytest

from fleet.commands.consistency import (
    Comparison,
    ConsistencyReport,
    format_report,
    row_cosines,
)
from fleet.commands.lag import STALLED, GroupLag, PartitionLag, drain_seconds, format_duration, lag_table
from fleet.commands.scale import ScaleRefused, plan_scale, worker_id, worker_number
from fleet.exits import Exit

# --- lag --------------------------------------------------------------------------------------


def test_drain_estimate_is_lag_over_rate() -> None:
    assert drain_seconds(100, 50.0) == 2.0
    assert drain_seconds(0, 0.0) == 0.0, "caught up is not stalled"
    assert drain_seconds(-3, 0.0) == 0.0
    assert math.isinf(drain_seconds(10, 0.0)), "lag without progress never drains"


@pytest.mark.parametrize(("seconds", "shown"), [(0, "0s"), (4.24, "4.2s"), (42, "42s"), (185, "3m05s"),
                                                 (7620, "2h07m"), (math.inf, STALLED)])
def test_durations_read_short(seconds: float, shown: str) -> None:
    assert format_duration(seconds) == shown


def partition(n: int, committed: int | None, end: int, rate: float, start: int = 0) -> PartitionLag:
    return PartitionLag("g", "fleet.requests.m", n, committed, start, end, rate)


def test_partition_lag_counts_from_the_start_when_never_committed() -> None:
    assert partition(0, 40, 100, 10.0).lag == 60
    assert partition(1, None, 100, 0.0, start=30).lag == 70
    assert partition(2, 100, 100, 0.0).drain_s == 0.0


def test_group_drains_at_its_total_rate_and_stalls_only_without_progress() -> None:
    group = GroupLag("g", (partition(0, 0, 100, 50.0), partition(1, 0, 100, 0.0)))
    assert (group.lag, group.rate_per_s, group.drain_s) == (200, 50.0, 4.0)
    assert math.isinf(group.partitions[1].drain_s), "the partition without progress shows stalled in its row"
    stalled = GroupLag("g", (partition(0, 0, 100, 0.0), partition(1, 5, 5, 0.0)))
    assert math.isinf(stalled.drain_s)
    assert stalled.as_dict()["stalled"] is True and stalled.as_dict()["drain_s"] is None
    assert GroupLag("g", ()).drain_s == 0.0


def test_table_is_aligned_with_a_total_line_per_group() -> None:
    groups = [GroupLag("minilm-embed", (partition(0, 5, 105, 20.0), partition(11, None, 3, 0.0)))]
    text = lag_table(groups)
    lines = text.splitlines()
    assert len(lines) == 2 + 3
    assert len({len(line) for line in lines[:1] + lines[2:4]}) == 1, "partition rows line up with the header"
    assert lines[-1].split()[:3] == ["minilm-embed", "TOTAL", "103"]
    assert lines[2].split()[-2:] == ["20.0", "5.0s"]
    assert lines[3].split()[3] == "-", "a partition never committed shows no committed offset"
    assert lines[3].endswith("∞ stalled") and lines[-1].endswith("5.2s")


def test_a_group_reading_two_lanes_shows_each_lane_beside_its_total() -> None:
    bulk = PartitionLag("m", "fleet.requests.m.bulk", 0, 0, 0, 9000, 30.0)
    group = GroupLag("m", (partition(0, 10, 12, 8.0), bulk))
    assert [(lane.lane, lane.lag, lane.rate_per_s) for lane in group.by_lane()] == [("interactive", 2, 8.0),
                                                                                     ("bulk", 9000, 30.0)]
    lines = lag_table([group]).splitlines()
    assert [line.split()[:4] for line in lines[-3:]] == [["m", "lane", "interactive", "2"], ["m", "lane", "bulk", "9000"],
                                                          ["m", "TOTAL", "9002", "38.0"]]
    assert lines[-2].endswith("5m00s")  # the bulk lane's own drain time, 9000 at 30/s
    assert group.as_dict()["lanes"] == [{"lane": "interactive", "lag": 2, "rate_per_s": 8.0, "drain_s": 0.25},
                                        {"lane": "bulk", "lag": 9000, "rate_per_s": 30.0, "drain_s": 300.0}]


# --- scale ------------------------------------------------------------------------------------


def test_worker_ids_are_stable_and_parse_back() -> None:
    assert worker_id("minilm-embed", 3) == "minilm-embed-w3"
    assert worker_number("minilm-embed", "minilm-embed-w12") == 12
    assert worker_number("minilm-embed", "other-w1") is None
    assert worker_number("minilm-embed", "minilm-embed-w0") is None


def test_scaling_up_starts_the_lowest_free_numbers() -> None:
    assert plan_scale([], 2, partitions=4).start == (1, 2)
    plan = plan_scale([1, 3], 4, partitions=4)
    assert plan.start == (2, 4) and plan.stop == ()


def test_scaling_down_stops_the_highest_numbers_first() -> None:
    plan = plan_scale([1, 2, 4], 1, partitions=4)
    assert plan.stop == (4, 2) and plan.start == ()
    assert plan_scale([1, 2], 0, partitions=4).stop == (2, 1)


def test_scaling_to_the_current_count_does_nothing() -> None:
    assert plan_scale([1, 3], 2, partitions=4).changes_nothing
    assert plan_scale([], 0, partitions=4).changes_nothing


def test_more_workers_than_partitions_is_refused_without_partitions() -> None:
    with pytest.raises(ScaleRefused, match="--partitions 5"):
        plan_scale([1], 5, partitions=4)
    with pytest.raises(ScaleRefused, match="fewer than --workers"):
        plan_scale([1], 5, partitions=4, requested_partitions=4)
    with pytest.raises(ScaleRefused):
        plan_scale([], -1, partitions=4)


def test_partitions_are_added_first_and_never_removed() -> None:
    plan = plan_scale([1], 6, partitions=4, requested_partitions=8)
    assert plan.grow_partitions_to == 8 and plan.start == (2, 3, 4, 5, 6)
    assert plan_scale([1], 2, partitions=8, requested_partitions=4).grow_partitions_to is None
    assert plan_scale([1], 1, partitions=4, requested_partitions=4).changes_nothing


# --- consistency ------------------------------------------------------------------------------


def compared(*cosines: float) -> tuple[Comparison, ...]:
    return tuple(Comparison(f"{i:032x}", f"text number {i}", "m-20260101-001", "m-20260101-001", c)
                 for i, c in enumerate(cosines))


def report(*cosines: float, min_agreement: float = 0.99, skipped: Counter[str] | None = None) -> ConsistencyReport:
    return ConsistencyReport(compared(*cosines), skipped or Counter(), cosine_threshold=0.999,
                             min_agreement=min_agreement)


def test_row_cosines_compare_matching_rows() -> None:
    live = np.array([[1, 0], [0, 2], [0, 0]], dtype=np.float32)
    offline = np.array([[1, 0], [2, 0], [1, 1]], dtype=np.float32)
    assert row_cosines(live, offline).tolist() == [1.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="shape"):
        row_cosines(live, offline[:2])


def test_agreement_rate_and_exit_codes() -> None:
    passing = report(*([1.0] * 99 + [0.98]))
    assert (passing.agreed, passing.compared, passing.agreement) == (99, 100, 0.99)
    assert passing.exit_code == Exit.OK
    failing = report(*([1.0] * 98 + [0.98, 0.9]))
    assert failing.exit_code == Exit.FAILED
    assert report(0.9991, 0.999).exit_code == Exit.OK, "the threshold itself agrees"
    nothing = report(skipped=Counter({"no live result": 3}))
    assert nothing.agreement is None and nothing.exit_code == Exit.UNAVAILABLE


def test_worst_cases_come_first_and_the_report_says_what_was_skipped() -> None:
    result = report(1.0, 0.5, 0.9999, 0.97, min_agreement=0.5, skipped=Counter({"no live result": 2}))
    assert [c.cosine for c in result.worst(2)] == [0.5, 0.97]
    text = format_report(result, worst=2)
    assert "sampled 6: compared 4, skipped 2 (no live result: 2)" in text
    assert "agreement 50.00% (2/4 at cosine >= 0.999); needed 50.00%: PASS" in text
    assert "0.500000" in text and "text number 1" in text
    assert "nothing to compare" in format_report(report(skipped=Counter({"status expired": 1})))


def test_long_texts_are_truncated_in_the_worst_list() -> None:
    long = ConsistencyReport((Comparison("a" * 32, "word " * 100, "v", "v", 0.2),), Counter(), 0.999, 0.99)
    worst_line = format_report(long, text_width=20).splitlines()[-1]
    assert worst_line.endswith("…'") and len(worst_line) < 80


def test_a_worker_spawned_a_moment_ago_counts_as_alive() -> None:
    # Right after posix_spawn the child may not have exec'd yet: its command line is empty for a
    # moment. Counting it as gone made `fleet scale` report a live worker as exited, untracked.
    import os
    import signal
    import sys

    from fleet.commands.scale import WORKER_MODULE, process_alive

    for _ in range(100):
        pid = os.posix_spawn(sys.executable, [sys.executable, "-c", "import time; time.sleep(5)", WORKER_MODULE],
                             dict(os.environ), setsid=True, file_actions=[
                                 (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                                 (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                                 (os.POSIX_SPAWN_DUP2, 1, 2)])  # as LocalWorkers.spawn does
        try:
            assert process_alive(pid)
        finally:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
