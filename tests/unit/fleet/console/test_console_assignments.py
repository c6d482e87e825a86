"""Decoding a consumer group's assignments into the partitions each worker holds."""

from __future__ import annotations

from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment

from fleet.console.assignments import decode_assignment, partitions_of_worker


def test_a_members_assignment_bytes_become_sorted_topic_partitions() -> None:
    raw = ConsumerProtocolMemberAssignment(0, [("fleet.requests.m", [10, 2, 0])], b"").encode()
    assert decode_assignment(raw) == ["fleet.requests.m:0", "fleet.requests.m:2", "fleet.requests.m:10"]


def test_an_empty_or_foreign_assignment_holds_nothing() -> None:
    assert decode_assignment(b"") == []
    assert decode_assignment(b"\x01") == []


def test_a_worker_holds_partitions_in_its_models_groups_only() -> None:
    held = {"m": {"w1": ["t:0"], "w2": ["t:1"]}, "m.shadow": {"w1": ["t:3"]}, "mx": {"w1": ["u:0"]}}
    assert partitions_of_worker(held, "m", "w1") == ["t:0", "t:3"]
    assert partitions_of_worker(held, "m", "w3") == []
