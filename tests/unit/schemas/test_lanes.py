"""Lanes: the documented mapping of priorities to lanes and topics, and clear errors for the rest."""

import pytest

from common.settings import FleetSettings
from schemas.lanes import DEFAULT_LANES, LaneError, Lanes


def test_the_default_lanes_map_priorities_0_to_4_to_bulk_and_5_to_9_to_interactive() -> None:
    lanes = Lanes.parse(DEFAULT_LANES)
    assert [lanes.for_priority(p).name for p in range(10)] == ["bulk"] * 5 + ["interactive"] * 5
    interactive, bulk = lanes.lanes
    assert lanes.topic("minilm-embed", interactive) == "fleet.requests.minilm-embed"  # the topic of before lanes
    assert lanes.topic("minilm-embed", bulk) == "fleet.requests.minilm-embed.bulk"
    assert lanes.topics("m", fallback=True) == ["fleet.requests.m.cpu", "fleet.requests.m.bulk.cpu"]
    assert Lanes.fallback_of("fleet.requests.m.bulk") == "fleet.requests.m.bulk.cpu"


def test_a_topic_names_its_lane_primary_or_fallback() -> None:
    lanes = Lanes.parse("urgent=8,normal=3,overnight=0")
    assert [lanes.of_topic("a.b", t).name for t in lanes.topics("a.b")] == ["urgent", "normal", "overnight"]
    assert lanes.of_topic("a.b", "fleet.requests.a.b.normal.cpu").name == "normal"
    with pytest.raises(LaneError, match="not a lane topic"):
        lanes.of_topic("a.b", "fleet.requests.a.b.other")


@pytest.mark.parametrize(("text", "complaint"), [
    ("", "at least one lane"),
    ("interactive", "not name=lowest_priority"),
    ("bulk=0,interactive=5", "must start below"),
    ("interactive=5,bulk=2", "must take priority 0"),
    ("interactive=12,bulk=0", "priorities are 0-9"),
    ("cpu=5,bulk=0", "lane name 'cpu'"),
    ("Interactive=5,bulk=0", "lane name 'Interactive'"),
    ("a=5,a=0", "listed twice"),
])
def test_a_lane_configuration_that_cannot_work_is_refused_with_the_reason(text: str, complaint: str) -> None:
    with pytest.raises(LaneError, match=complaint):
        Lanes.parse(text)
    with pytest.raises(ValueError, match=complaint):
        FleetSettings(lanes=text)


def test_an_unknown_lane_name_or_priority_says_what_there_is() -> None:
    lanes = Lanes.parse(DEFAULT_LANES)
    with pytest.raises(LaneError, match="unknown lane 'fast'; the lanes are interactive, bulk"):
        lanes.named("fast")
    with pytest.raises(LaneError, match="priorities are 0-9"):
        lanes.for_priority(10)


def test_one_lane_is_the_fleet_before_lanes() -> None:
    lanes = Lanes.parse("all=0")
    assert lanes.topics("m") == ["fleet.requests.m"] and lanes.for_priority(9).name == "all"


def test_the_model_of_a_lane_topic() -> None:
    from schemas.lanes import model_of_topic

    lanes = Lanes.parse(DEFAULT_LANES)
    assert [model_of_topic(t, lanes) for t in [*lanes.topics("a.b"), *lanes.topics("a.b", fallback=True)]] == ["a.b"] * 4
    assert model_of_topic("fleet.requests.bulk", lanes) == "bulk"  # a model named like a lane
    assert model_of_topic("fleet.results", lanes) is None
