"""Which records go in which partition's transaction, and which lanes are delivered in transactions."""

import pytest
from aiokafka import TopicPartition
from pydantic import ValidationError

from workers.delivery.transactions import chunks_of
from workers.settings import WorkerSettings

BULK, TOP = "fleet.requests.m.bulk", "fleet.requests.m"


def test_each_partition_of_a_covered_topic_commits_past_its_last_record_with_the_sends_of_its_records() -> None:
    offsets = [(BULK, 0, 7), (BULK, 0, 9), (BULK, 1, 3), (TOP, 0, 40)]
    sends = [((BULK, 0, 9), ("results", b"r9", b"9")), ((TOP, 0, 40), ("results", b"r40", b"40")),
             ((BULK, 1, 3), ("fleet.dlq", b"letter", None))]
    chunks = chunks_of(offsets, sends, lambda topic: topic == BULK)
    assert set(chunks) == {TopicPartition(BULK, 0), TopicPartition(BULK, 1)}
    first = chunks[TopicPartition(BULK, 0)]
    assert first.next_offset == 10 and first.first_offset == 7 and first.sends == [(9, ("results", b"r9", b"9"))]
    assert chunks[TopicPartition(BULK, 1)].next_offset == 4
    assert chunks[TopicPartition(BULK, 1)].sends == [(3, ("fleet.dlq", b"letter", None))]


@pytest.mark.parametrize(("value", "lanes"), [("", set()), ("off", set()), ("all", {"interactive", "bulk"}),
                                              ("bulk", {"bulk"}), (" bulk , interactive ", {"interactive", "bulk"})])
def test_exactly_once_names_lanes(value: str, lanes: set[str]) -> None:
    settings = WorkerSettings(model="m", exactly_once=value)
    assert settings.exactly_once_lanes == lanes
    expected = {topic for lane in lanes for topic in (TOP if lane == "interactive" else BULK,)}
    assert settings.exactly_once_topics() == expected | {f"{topic}.cpu" for topic in expected}


def test_an_unknown_lane_is_refused_with_the_lanes_there_are() -> None:
    with pytest.raises(ValidationError, match="batch is not a lane; the lanes are interactive, bulk"):
        WorkerSettings(model="m", exactly_once="batch")
