import logging
import re

import pytest
from fastapi import HTTPException
from fastapi.exceptions import RequestValidationError

from common.logs import LogThrottle
from gateway.body import BodyRules, parse_infer_body
from schemas.bounds import JsonBounds, bound_problems
from schemas.results_topics import results_topic_problem
from gateway.settings import GatewaySettings

ALLOWED = re.compile(r"fleet\.results.*")
RULES = BodyRules.of(GatewaySettings(max_params_depth=3, max_params_bytes=64))


@pytest.mark.parametrize(("name", "allowed"), [
    ("fleet.results", True), ("fleet.results.team-a_1", True), ("", False), ("." , False), ("..", False),
    ("fleet.results" + "x" * 237, False), ("fleet results", False), ("fleet.requests.m", False), ("fleet.dlq", False),
    ("fleet.trace", False), ("__consumer_offsets", False), ("other", False), ("fleet.cache.m.v", False),
])
def test_results_topics(name: str, allowed: bool) -> None:
    assert (results_topic_problem(name, ALLOWED) is None) is allowed


def test_reserved_topics_stay_refused_under_an_open_pattern() -> None:
    assert results_topic_problem("fleet.dlq", re.compile(".*")) is not None
    assert results_topic_problem("anything", re.compile(".*")) is None


def test_bound_problems_name_the_path() -> None:
    document = {"params": {"a": [1, 2**64], "b": float("nan"), "c": "\ud800", "\udfff": 1, "d": {"e": {"f": {}}}}}
    found = dict((".".join(map(str, path)), problem) for path, problem in bound_problems(document, JsonBounds(3), 10))
    assert found["params.a.1"] == "integer outside the int64 range"
    assert found["params.b"] == "nan is not a finite number"
    assert "lone surrogate" in found["params.c"] and "lone surrogate" in found["params.\udfff"]
    assert found["params.d.e.f"] == "nested deeper than 3 levels"
    assert bound_problems({"params": {"ok": [1.5, -(2**63), "é"]}}, JsonBounds(3)) == []


def test_deep_documents_cost_no_recursion() -> None:
    deep: object = 1
    for _ in range(100_000):
        deep = [deep]
    assert bound_problems(deep, JsonBounds(8)) == [((0,) * 9, "nested deeper than 8 levels")]


@pytest.mark.parametrize(("raw", "content_type", "code"), [
    (b'{"text": "hi"}', "application/msgpack", 415), (b"\xc3\x28", "application/json", 400),
    (b"{", None, 400), (b"[]", "application/json", 422), (b'{"text": "hi", "params": {"p": "' + b"x" * 80 + b'"}}',
                                                          "application/json", 422),
])
def test_bodies_refused(raw: bytes, content_type: str | None, code: int) -> None:
    with pytest.raises((HTTPException, RequestValidationError)) as caught:
        parse_infer_body(raw, content_type, RULES)
    assert getattr(caught.value, "status_code", 422) == code


def test_a_body_within_bounds_parses() -> None:
    body = parse_infer_body(b'{"text": "hi", "params": {"k": [1]}, "priority": 2}', "application/json", RULES)
    assert body.text == "hi" and body.params == {"k": [1]} and body.priority == 2


def test_log_throttle_logs_once_per_interval_with_a_count(caplog: pytest.LogCaptureFixture) -> None:
    now = [100.0]
    throttle = LogThrottle(logging.getLogger("throttle-test"), 10.0, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, "throttle-test"):
        assert throttle.log(logging.WARNING, "redis", "down: %s", "refused")
        for _ in range(41):
            assert not throttle.log(logging.WARNING, "redis", "down: %s", "refused")
        assert throttle.log(logging.WARNING, "kafka", "down")  # another key is not held back
        now[0] += 10.0
        assert throttle.log(logging.WARNING, "redis", "down: %s", "refused")
    messages = [record.getMessage() for record in caplog.records]
    assert messages == ["down: refused", "down", "down: refused (41 more like this in the last 10 s)"]
    assert throttle.held("redis") == 0
    throttle.log(logging.WARNING, "redis", "again")
    assert throttle.held("redis") == 1 and throttle.reset("redis") == 1
    assert throttle.log(logging.WARNING, "redis", "after reset")
