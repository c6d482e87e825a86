"""The console's pure logic: roles, dead-letter selection, problems in words."""

from __future__ import annotations

from dataclasses import replace

import pytest

from common.heartbeats import WorkerInfo
from fleet.commands.dlq_store import (DeadLetterEntry, counts_by_code, format_ends, model_of_topic, parse_ends,
                                      parse_ref, select_letters, time_bound)
from fleet.commands.lag import GroupLag, PartitionLag
from fleet.console.settings import ConsoleSettings, Role
from fleet.console.sources import ModelView, model_problems
from fleet.console.throughput import VersionFigures
from schemas.wire import DeadLetter


def letter(partition: int, offset: int, code: str, topic: str = "fleet.requests.m1", time_ms: int = 1,
           original: bytes | None = b"x") -> DeadLetterEntry:
    return DeadLetterEntry(partition, offset, DeadLetter(reason="r", code=code, topic=topic, partition=0, offset=0,
                                                         original=original, time_ms=time_ms))


def worker(name: str, state: str = "healthy", drained: bool = False) -> WorkerInfo:
    return WorkerInfo(worker=name, model="m1", role="primary", device="cpu", state=state, reason="", version="v",
                      lag=0, beat_ms=0, age_s=0.1, drained=drained)


def test_tenant_roles_default_to_read_and_refuse_unknown_roles() -> None:
    settings = ConsoleSettings(console_tenants="ops:admin, watch ,night:read")
    assert settings.tenant_roles() == {"ops": Role.admin, "watch": Role.read, "night": Role.read}
    with pytest.raises(ValueError):
        ConsoleSettings(console_tenants="ops:root").tenant_roles()


def test_letters_are_selected_newest_first_by_model_code_and_ref() -> None:
    entries = [letter(0, 1, "a", time_ms=10), letter(1, 5, "b", time_ms=30), letter(0, 2, "a", time_ms=20),
               letter(2, 0, "a", topic="fleet.requests.m2.cpu", time_ms=40)]
    assert [e.ref for e in select_letters(entries, code="a")] == ["2:0", "0:2", "0:1"]
    assert [e.ref for e in select_letters(entries, model="m1", code="a", limit=1)] == ["0:2"]
    assert [e.ref for e in select_letters(entries, refs=["1:5"])] == ["1:5"]
    assert counts_by_code(entries)[0] == ("m1", "a", 2)


def test_only_whole_originals_bound_for_a_request_topic_are_replayable() -> None:
    assert letter(0, 0, "a").replayable is None
    assert "masked view" in (letter(0, 0, "a", original=None).replayable or "")
    assert "not a request topic" in (letter(0, 0, "a", topic="fleet.results").replayable or "")
    assert model_of_topic("fleet.requests.m2.cpu") == "m2" and model_of_topic("other") is None


def test_refs_and_ends_parse_and_refuse_garbage() -> None:
    assert parse_ref("3:17") == (3, 17)
    assert parse_ends(format_ends({1: 5, 0: 2})) == {0: 2, 1: 5}
    for bad in ("3", "a:1", "1:-2", ""):
        with pytest.raises(ValueError):
            parse_ref(bad)


def test_problems_put_missing_primaries_first_and_name_each_unhealthy_worker() -> None:
    view = ModelView("m1", [worker("w1", state="failed"), worker("w2", drained=True)])
    problems = model_problems(view)
    assert problems[0] == "no healthy primary worker serves m1"
    assert "worker w1 is failed" in problems and any("w2 is drained" in p for p in problems)
    assert model_problems(ModelView("m1", [worker("w3")])) == []
    late = replace(worker("w4"), age_s=4.2)
    assert model_problems(ModelView("m1", [worker("w3"), late])) == ["worker w4 has not sent a heartbeat for 4.2 s"]


def test_a_bulk_lane_hours_behind_is_no_problem_but_a_stalled_interactive_lane_is() -> None:
    def lagging(interactive_rate: float) -> GroupLag:
        return GroupLag("m1", (PartitionLag("m1", "fleet.requests.m1", 0, 0, 0, 50, interactive_rate),
                               PartitionLag("m1", "fleet.requests.m1.bulk", 0, 0, 0, 900_000, 0.0)))

    assert model_problems(ModelView("m1", [worker("w1")], lag=lagging(25.0))) == []  # 2 s of interactive work
    assert model_problems(ModelView("m1", [worker("w1")], lag=lagging(0.0))) == [
        "group m1 (lane interactive) is stalled: 50 records behind and not moving"]
    assert model_of_topic("fleet.requests.m2.bulk.cpu") == "m2"


def test_version_figures_say_what_is_not_known_yet() -> None:
    assert VersionFigures("v1", 12, None, None, None).words == "v1: 12 requests in all; the recent rate shows after 10 s"
    assert VersionFigures("v1", 12, 3.25, 0.5, 40.0).words == \
        "v1: 3.2 req/s, p99 40 ms, 50.00% errors over the last 10 s or more; 12 requests in all"
    assert VersionFigures("v1", 12, 0.0, None, None).words == "v1: 0.0 req/s over the last 10 s or more; 12 requests in all"


def test_time_bounds_are_durations_ago_or_utc_times() -> None:
    now = 10_000_000_000
    assert time_bound("", now) is None and time_bound(None, now) is None
    assert time_bound("30m", now) == now - 30 * 60_000
    assert time_bound("1h30m", now) == now - 90 * 60_000
    assert time_bound("1970-01-01T00:00:10", now) == 10_000
    with pytest.raises(ValueError, match="not a time: 'soon'"):
        time_bound("soon", now)
