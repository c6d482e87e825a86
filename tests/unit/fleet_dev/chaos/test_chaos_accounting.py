"""The chaos suite's bookkeeping: lost and duplicated counted the way the table says, the time
until throughput is back, the verdict behind the exit status, and the table itself."""

from __future__ import annotations

from fleet_dev.chaos.ledger import TOPIC, Ledger, merge_answers, rate, throughput_back_after
from fleet_dev.chaos.report import ScenarioReport, WorkerExit, dead_letter_table, failures, scenario_table


def test_lost_is_accepted_and_never_answered_whatever_the_channel() -> None:
    ledger = Ledger()
    for request_id in ("a", "b", "c", "d"):
        ledger.attempt()
        ledger.accept(request_id, "pipeline")
    ledger.attempt()
    ledger.refuse("client", "FleetUnavailable")
    ledger.answer("a", "ok", "http", 1.0)
    ledger.answer("b", "expired", TOPIC, 1.0)
    ledger.answer("zz", "ok", TOPIC, 1.0)  # never accepted here: not owed, not counted
    assert ledger.unanswered() == ["c", "d"]
    assert merge_answers(ledger, [("c", "ok")], "redis-stored", 2.0) == 1
    assert (ledger.sent, len(ledger.accepted), ledger.answered, ledger.lost) == (5, 4, 3, 1)
    assert ledger.statuses() == {"ok": 2, "expired": 1}
    assert ledger.refused == {"client: FleetUnavailable": 1}


def test_duplicates_are_extra_copies_on_the_results_topic_only() -> None:
    ledger = Ledger()
    ledger.accept("a", "pipeline")
    ledger.accept("b", "http-submit")
    for _ in range(3):
        ledger.answer("a", "ok", TOPIC, 1.0)
    ledger.answer("b", "ok", TOPIC, 1.0)
    ledger.answer("b", "ok", "redis-stored", 2.0)  # the same result looked up: not a second delivery
    assert ledger.duplicated == 2
    assert ledger.answers["a"].via == TOPIC and ledger.answers["b"].at_s == 1.0  # the first answer stays


def test_the_throughput_timeline_holds_ok_answers_of_accepted_requests() -> None:
    ledger = Ledger()
    for i, status in enumerate(["ok", "error", "degraded", "ok"]):
        ledger.accept(str(i), "client")
        ledger.answer(str(i), status, "redis-reply", float(10 - i))
    assert ledger.ok_times() == [7.0, 8.0, 10.0]


def test_throughput_back_is_the_first_window_at_the_baseline_share() -> None:
    before = [i * 0.1 for i in range(100)]  # 10 answers/s for 10 s
    gap_then_back = [20 + i * 0.1 for i in range(100)]  # nothing from 10 s to 20 s, then 10/s again
    times = before + gap_then_back
    assert rate(times, 0, 10) == 10.0
    back = throughput_back_after(times, 10.0, from_s=12.0, until_s=30.0)
    assert back is not None and 7.5 <= back <= 8.25
    assert throughput_back_after(before, 10.0, from_s=12.0, until_s=30.0) is None
    assert throughput_back_after(times, 0.0, from_s=12.0, until_s=30.0) is None


def report(name: str, **fields: object) -> ScenarioReport:
    found = ScenarioReport(name)
    for key, value in fields.items():
        setattr(found, key, value)
    return found


def test_the_verdict_fails_on_loss_exits_5xx_from_input_and_a_slow_gateway() -> None:
    assert failures(report("worker-kill", worker_exits=[WorkerExit("worker-1", -9, 3.0, planned=True)],
                           gateway_recovery_s=0.1)) == []
    assert failures(report("redis-pause", gateway_recovery_s=1.0, http_5xx=40)) == [], "503s in an outage are fine"
    assert "2 accepted requests lost" in failures(report("kafka-restart", lost=2, lost_ids=["x", "y"]))[0]
    assert "exits on malformed input" in failures(report("flood", worker_exits=[WorkerExit("w", 1, 2.0, False)]))[0]
    assert "never fatal" in failures(report("redis-restart", gateway_recovery_s=1.0,
                                            worker_exits=[WorkerExit("w", 1, 2.0, False)]))[0]
    assert "5xx answers to malformed input" in failures(report("http", http_5xx_input=1))[0]
    assert "after 7.0 s" in failures(report("redis-restart", gateway_recovery_s=7.0))[0]
    assert "never" in failures(report("redis-pause", gateway_recovery_s=None))[0]
    assert "rejoined: no" in failures(report("kafka-leader-kill", checks={"node 2 rejoined": False}))[0]


def test_the_table_has_a_row_per_scenario_with_its_numbers() -> None:
    rows = [report("worker-kill", sent=1200, accepted=1190, answered=1190, duplicated=3, worker_restarts=1,
                   gateway_recovery_s=0.1, throughput_back_s=4.25),
            report("flood", sent=500, accepted=500, answered=499, lost=1, dead_letters={"invalid_fields": 7000,
                   "not_msgpack": 1500}, dead_letters_expected=8600, worker_exits=[WorkerExit("w", 1, 1.0, False)])]
    lines = scenario_table(rows).splitlines()
    assert lines[0].split()[:5] == ["scenario", "sent", "accepted", "answered", "lost"]
    assert lines[1] == "-" * len(lines[0])
    assert lines[2].split() == ["worker-kill", "1,200", "1,190", "1,190", "0", "3", "0", "0", "0", "1", "0",
                                "0.1s", "4.2s"]
    assert lines[3].split() == ["flood", "500", "500", "499", "1", "0", "8,500/8,600", "0", "0", "0", "1", "-", "-"]
    assert lines[3].index("8,500/8,600") + len("8,500/8,600") == lines[0].index("dead letters") + len("dead letters")
    codes = dead_letter_table(rows).splitlines()
    assert codes[2].split() == ["flood", "invalid_fields", "7,000"] and codes[3].split() == ["flood", "not_msgpack", "1,500"]
