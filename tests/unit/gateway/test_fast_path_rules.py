"""The pure parts of the gateway's fast path: which requests it takes, reading JSON with orjson only
where that reads as the standard library does, the request partitioner, the body reader."""

import asyncio
import json
import random
from typing import Any

import pytest
from aiokafka.partitioner import DefaultPartitioner
from fastapi import HTTPException
from starlette.routing import Match

from gateway.app import model_routes
from gateway.catalog import ServedModels
from gateway.body import parse_document
from gateway.client import FleetClient, partition_of_request
from gateway.fast_routes import fast_route
from gateway.limits import InFlight, read_body
from gateway.metrics import GatewayMetrics
from gateway.model_requests import ModelRequests
from gateway.refusals import Kind, Refusal
from gateway.settings import GatewaySettings

PATHS = ["/v1/models/m/infer", "/v1/models/m/requests", "/v1/models/m.v-2_x/infer", "/v1/models//infer",
         "/v1/models/m/infer/", "/v1/models/a/b/infer", "/v1/models/m/infers", "/v1/models/m", "/v1/models/m/",
         "/v1/models/%FF/infer", "/v1/models/\ufffd/requests", "/v1/results/m/infer", "/v2/models/m/infer",
         "/v1/models/m/requests/x", "/v1/models/m/Infer", "//v1/models/m/infer"]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("method", ["POST", "GET", "PUT"])
def test_the_fast_path_takes_exactly_what_fastapis_model_routes_take(path: str, method: str) -> None:
    settings = GatewaySettings()
    fleet = FleetClient(settings)
    models = ServedModels(None, lambda: fleet.redis, poll_s=settings.catalog_poll_s)
    routes = model_routes(ModelRequests(settings, fleet, GatewayMetrics(), models)).routes
    scope = {"type": "http", "method": method, "path": path, "root_path": ""}
    fastapi_full_match = any(route.matches(scope)[0] is Match.FULL for route in routes)
    assert len(routes) == 2
    assert (fast_route(scope) is not None) is fastapi_full_match


def _typed(value: Any) -> Any:
    """`value` with the type of every scalar spelled out: 1 == 1.0 == True must not pass for equal."""
    if isinstance(value, dict):
        return {key: _typed(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_typed(item) for item in value]
    return (type(value).__name__, repr(value))


def _random_document(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.random()
    if depth < 4 and kind < 0.25:
        return {rng.choice(["a", "text", "é", "\u2603", ""]) + str(i): _random_document(rng, depth + 1)
                for i in range(rng.randint(0, 4))}
    if depth < 4 and kind < 0.4:
        return [_random_document(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return rng.choice([0, -0, 1, -1, 2**31, 2**53 + 1, 2**63 - 1, -(2**63), 2**63, 2**64 - 1, 2**64, -(2**63) - 1,
                       10**30, 0.1, -2.5e-308, 1e308, 1.7976931348623157e308, 5e-324, 1e22, True, False, None, "",
                       "x", "caf\u00e9", "\U0001f600", "\u0000\u001f", 'quote " and \\ back', "1" * 25])


def _texts(rng: random.Random) -> list[bytes]:
    texts = [json.dumps(_random_document(rng), ensure_ascii=rng.random() < 0.5).encode() for _ in range(400)]
    # What the standard library reads and orjson does not, or reads differently.
    texts += [b'{"a": NaN}', b'{"a": -Infinity}', b'{"a": 1e400}', b'{"a": -1e400}', b'"\\ud800"', b'{"\\udfff": 1}',
              b'{"n": 18446744073709551616}', b'{"n": -9223372036854775809}', b'{"n": 99999999999999999999.5}',
              b"\xef\xbb\xbf{}", b'{"a": 1, "a": 2}', b"[" * 2000 + b"]" * 2000, b" \n{}\t", b'{"a": 1}x', b"",
              b'{"text": "caf\xe9"}', b'{"a": "\xed\xa0\x80"}', b"1E2", b"-0.0", b"1.5e-400"]
    return texts


def test_json_is_read_as_the_standard_library_reads_it() -> None:
    for raw in _texts(random.Random(5)):
        try:
            expected: Any = ("value", _typed(json.loads(raw.decode("utf-8"))))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            expected = ("refused", type(exc).__name__)
        try:
            got: Any = ("value", _typed(parse_document(raw, "application/json")))
        except Exception as exc:  # parse_document's refusals are HTTPException 400
            got = ("refused", getattr(exc, "status_code", type(exc).__name__))
        if expected[0] == "refused":
            assert got == ("refused", 400), raw[:80]
        else:
            assert got == expected, raw[:80]


def test_requests_spread_over_partitions_by_their_id_and_keep_to_one() -> None:
    partitions = [0, 1, 2, 3]
    ids = [random.Random(seed).randbytes(16).hex().encode() for seed in range(8000)]
    chosen = [partition_of_request(key, partitions, partitions) for key in ids]
    counts = [chosen.count(partition) for partition in partitions]
    assert min(counts) > 1800, counts  # 2000 each, give or take
    assert chosen == [partition_of_request(key, partitions, [0]) for key in ids], "the key alone decides"
    for other in (b"not-hex-" * 4, b"short", None):
        assert partition_of_request(other, partitions, partitions) in partitions
    assert partition_of_request(b"z" * 32, partitions, partitions) == DefaultPartitioner()(b"z" * 32, partitions,
                                                                                            partitions)


def _receiving(*messages: dict[str, Any]) -> Any:
    queue = list(messages)

    async def receive() -> dict[str, Any]:
        return queue.pop(0) if queue else {"type": "http.disconnect"}

    return receive


@pytest.mark.parametrize(("declared", "messages", "expected"), [
    (b"5", [{"type": "http.request", "body": b"hello"}], b"hello"),
    (None, [{"type": "http.request", "body": b"he", "more_body": True}, {"type": "http.request", "body": b"llo"}],
     b"hello"),
    (b"11", [{"type": "http.request", "body": b"x" * 11}], 413),  # declared over the limit: refused unread
    (None, [{"type": "http.request", "body": b"x" * 6, "more_body": True},
            {"type": "http.request", "body": b"x" * 6, "more_body": True}], 413),
    (b"abc", [{"type": "http.request", "body": b"x" * 11}], 413),  # a made-up length counts for nothing
    (None, [{"type": "http.disconnect"}], None),
    (None, [{"type": "http.request", "body": b"he", "more_body": True}, {"type": "http.disconnect"}], None),
])
def test_bodies_are_read_whole_within_the_limit(declared: bytes | None, messages: list[dict[str, Any]],
                                                expected: bytes | int | None) -> None:
    body = asyncio.run(read_body(_receiving(*messages), declared, 10))
    if isinstance(expected, int):
        assert isinstance(body, Refusal) and body.status == expected and body.kind is Kind.too_large
    else:
        assert body == expected


def test_the_in_flight_cap_refuses_beyond_it_and_counts_what_leaves() -> None:
    in_flight = InFlight(2, retry_after_s=3)
    assert in_flight.enter() is None and in_flight.enter() is None
    refusal = in_flight.enter()
    assert refusal is not None and refusal.kind is Kind.busy and refusal.status == 429 and refusal.retry_after_s == 3
    in_flight.leave()
    assert in_flight.count == 1 and in_flight.enter() is None


def test_a_number_with_too_many_digits_is_400_without_pythons_advice() -> None:
    with pytest.raises(HTTPException) as refused:
        parse_document(b'{"text": "hi", "n": ' + b"7" * 5000 + b"}", "application/json")
    assert refused.value.status_code == 400 and "too many digits" in str(refused.value.detail)
    assert "sys." not in str(refused.value.detail) and "int_max_str_digits" not in str(refused.value.detail)
