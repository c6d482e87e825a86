"""Bad input is a 4xx naming the field, never a 5xx: the app in-process over the real stack."""

import json
from collections.abc import AsyncIterator

import httpx
import pytest

from common.clients import new_admin
from common.settings import FleetSettings
from gateway.settings import GatewaySettings
from tests.integration.gateway.gateway_harness import TEST_TENANT, in_process

MODEL = "gw-hardening-input"  # accepted by the gateway, served by no worker
SUBMIT = f"/v1/models/{MODEL}/requests"


def nested(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = {"n": value}
    return value


@pytest.fixture(scope="module")
async def http(stack) -> AsyncIterator[httpx.AsyncClient]:  # type: ignore[no-untyped-def]
    settings = GatewaySettings(models=[MODEL], max_params_depth=8, max_params_bytes=2048, max_timeout_ms=60_000)
    async with in_process(settings) as client:
        yield client


@pytest.mark.parametrize(("payload", "field"), [
    ({"results_topic": ""}, "results_topic"),
    ({"results_topic": "fleet.results" + "x" * 237}, "results_topic"),  # 250 characters
    ({"results_topic": "bad topic!"}, "results_topic"),
    ({"results_topic": ".."}, "results_topic"),
    ({"results_topic": "fleet.requests.minilm-embed"}, "results_topic"),
    ({"results_topic": "fleet.dlq"}, "results_topic"),
    ({"results_topic": "fleet.trace"}, "results_topic"),
    ({"results_topic": "__consumer_offsets"}, "results_topic"),
    ({"results_topic": "orders.results"}, "results_topic"),  # legal, but outside fleet\.results.*
    ({"results_topic": 7}, "results_topic"),
    ({"params": {"big": 2**64}}, "params.big"),
    ({"params": {"small": -(2**63) - 1}}, "params.small"),
    ({"params": {"list": [1, 2, 2**70]}}, "params.list.2"),
    ({"params": nested(9)}, "params"),
    ({"params": {"blob": "x" * 3000}}, "params"),
    ({"timeout_ms": 60_001}, "timeout_ms"),
    ({"timeout_ms": 600_001}, "timeout_ms"),
    ({"timeout_ms": 1.5}, "timeout_ms"),
    ({"priority": "3"}, "priority"),
    ({"priority": True}, "priority"),
    ({"version": "has space"}, "version"),
    ({"tenant": "t" * 129}, "tenant"),
])
async def test_bad_fields_are_422_naming_the_field(http: httpx.AsyncClient, payload: dict[str, object],
                                                   field: str) -> None:
    response = await http.post(SUBMIT, json={"text": "hi", **payload})
    assert response.status_code == 422, response.text
    assert field in response.text


@pytest.mark.parametrize(("raw", "field"), [
    ('{"text": "\\ud800"}', "text"),
    ('{"text": "hi", "tenant": "a\\udfffb"}', "tenant"),
    ('{"text": "hi", "version": "\\ud83d"}', "version"),
    ('{"text": "hi", "params": {"\\ud800key": 1}}', "params"),
    ('{"text": "hi", "params": {"k": ["\\udc00"]}}', "params.k.0"),
    ('{"text": "hi", "params": {"a": NaN}}', "params.a"),
    ('{"text": "hi", "params": {"a": -Infinity}}', "params.a"),
    ('{"text": "hi", "params": {"a": 1e400}}', "params.a"),
    ('{"text": NaN}', "text"),
    ('{"text": "hi", "timeout_ms": Infinity}', "timeout_ms"),
    ('{"text": "hi", "priority": 1e400}', "priority"),
    ('[{"text": "hi"}]', "body"),
    ('"hi"', "body"),
    ("null", "body"),
    ("42", "body"),
])
async def test_values_json_allows_but_the_fleet_cannot_take_are_422(http: httpx.AsyncClient, raw: str,
                                                                    field: str) -> None:
    for path in (SUBMIT, f"/v1/models/{MODEL}/infer"):
        response = await http.post(path, content=raw.encode(), headers={"content-type": "application/json"})
        assert response.status_code == 422, response.text
        assert field in response.text


@pytest.mark.parametrize(("body", "content_type", "code"), [
    (b"\x81\xa4text\xa2hi", "application/msgpack", 415),
    (b"\x81\xa4text\xa2hi", "application/octet-stream", 415),
    ('{"text": "hi"}'.encode(), "text/plain", 415),
    (b"\xff\xfe{\x00", "application/json", 400),
    ('{"text": "caf\xe9"}'.encode("latin-1"), "application/json", 400),
    (b'{"text": ', "application/json", 400),
    (b"[" * 3000 + b"]" * 3000, "application/json", 400),
    (b'{"text": "hi", "params": {"n": ' + b"9" * 5000 + b"}}", "application/json", 400),
])
async def test_bodies_that_are_not_utf8_json_are_400_or_415(http: httpx.AsyncClient, body: bytes, content_type: str,
                                                            code: int) -> None:
    response = await http.post(SUBMIT, content=body, headers={"content-type": content_type})
    assert response.status_code == code, response.text
    assert json.loads(response.text)["detail"].split(":")[0] in {"body", "content-type"}


async def test_legal_input_at_the_bounds_is_accepted(http: httpx.AsyncClient) -> None:
    payload = {"text": "hi", "results_topic": "fleet.results", "params": {"max": 2**63 - 1, "deep": nested(7)},
               "timeout_ms": 60_000, "tenant": TEST_TENANT, "version": "gw-hardening-20260101-001"}
    response = await http.post(SUBMIT, json=payload)
    assert response.status_code == 202, response.text
    assert len(response.json()["id"]) == 32


async def test_a_results_topic_outside_the_allow_list_is_422_and_never_created(
        http: httpx.AsyncClient, stack: FleetSettings) -> None:
    """The brokers do not auto-create topics (scripts/stack, compose), and the gateway creates none
    for a name outside FLEET_RESULTS_TOPIC_PATTERN: after the 422s no such topic exists."""
    names = ["x", f"fleet.requests.{MODEL}.x", "not-fleet.results"]
    for name in names:
        for path in (SUBMIT, f"/v1/models/{MODEL}/infer"):
            response = await http.post(path, json={"text": "hi", "results_topic": name})
            assert response.status_code == 422, response.text
            assert "results_topic" in response.text
    admin = new_admin(stack)
    await admin.start()
    try:
        topics = set(await admin.list_topics())
    finally:
        await admin.close()
    assert not topics & set(names)
