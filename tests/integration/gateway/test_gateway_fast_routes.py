"""The fast path (gateway/fast_routes.py) against FastAPI's path for the same routes, over the real
Kafka and Redis: byte for byte the same refusals and 4xx, the same counters, never a 500, and
FastAPI's stack never entered for the two routes it serves."""

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from common.settings import FleetSettings
from gateway.app import GatewayApp, create_app
from gateway.client import FleetClient
from gateway.settings import GatewaySettings, TenantQuota
from tests.integration.gateway.gateway_harness import METRICS_TENANT, TEST_TENANT, bearer, in_process, issue_key

MODEL = "gw-fast-routes"  # accepted by the gateway, served by no worker
INFER, SUBMIT = f"/v1/models/{MODEL}/infer", f"/v1/models/{MODEL}/requests"
SLOW_TENANT = "gw-fast-slow-tenant"  # a tenant with a rate of one request, for the 429
COMPARED_HEADERS = ("content-type", "content-length", "retry-after", "www-authenticate")
MAX_BODY = 2048


def settings(fast: bool) -> GatewaySettings:
    return GatewaySettings(models=[MODEL], fast_routes=fast, max_body_bytes=MAX_BODY, max_text_chars=100,
                           tenant_quotas={SLOW_TENANT: TenantQuota(rps=0.01, burst=1)})


@pytest.fixture(scope="module")
async def keys(stack: FleetSettings) -> dict[str, str]:
    return {tenant: await issue_key(stack.redis_url, tenant) for tenant in (TEST_TENANT, METRICS_TENANT, SLOW_TENANT)}


@pytest.fixture(scope="module")
async def both(keys: dict[str, str]) -> AsyncIterator[dict[str, httpx.AsyncClient]]:
    """The same gateway twice: the fast path on, and off (FastAPI serves the model routes)."""
    async with in_process(settings(True), key=keys[TEST_TENANT], metrics_key=keys[METRICS_TENANT]) as fast, \
            in_process(settings(False), key=keys[TEST_TENANT], metrics_key=keys[METRICS_TENANT]) as slow:
        yield {"fast": fast, "slow": slow}


def chunked(body: bytes) -> Callable[[], AsyncIterator[bytes]]:
    """A body without Content-Length, sent in pieces (a new stream for each request)."""
    async def pieces() -> AsyncIterator[bytes]:
        for start in range(0, len(body), 500):
            yield body[start:start + 500]

    return pieces


def bad_requests(keys: dict[str, str]) -> list[tuple[str, dict[str, Any]]]:
    """(what, httpx request arguments) of requests both paths must refuse alike."""
    json_type = {"content-type": "application/json"}
    over = b'{"text": "' + b"x" * MAX_BODY + b'"}'
    return [
        ("no key", {"headers": {"authorization": ""}, "json": {"text": "hi"}}),
        ("unknown key", {"headers": bearer("fk_000000000000_nope"), "json": {"text": "hi"}}),
        ("basic auth", {"headers": {"authorization": "Basic dXNlcjpwYXNz"}, "json": {"text": "hi"}}),
        ("key too long", {"headers": bearer("x" * 300), "json": {"text": "hi"}}),
        ("metrics key", {"headers": bearer(keys[METRICS_TENANT]), "json": {"text": "hi"}}),
        ("unknown model", {"path": "/v1/models/no-such-model/infer", "json": {"text": "hi"}}),
        ("declared too large", {"content": over, "headers": json_type}),
        ("chunked too large", {"content": chunked(over), "headers": json_type}),
        ("msgpack", {"content": b"\x81\xa4text\xa2hi", "headers": {"content-type": "application/msgpack"}}),
        ("text/plain", {"content": b'{"text": "hi"}', "headers": {"content-type": "text/plain"}}),
        ("not utf-8", {"content": b'{"text": "caf\xe9"}', "headers": json_type}),
        ("truncated", {"content": b'{"text": ', "headers": json_type}),
        ("deep", {"content": b"[" * 3000 + b"]" * 3000, "headers": json_type}),
        ("huge integer", {"content": b'{"text": "hi", "params": {"n": ' + b"9" * 5000 + b"}}", "headers": json_type}),
        ("array", {"json": [{"text": "hi"}]}),
        ("no text", {"json": {"words": "hi"}}),
        ("text too long", {"json": {"text": "x" * 101}}),
        ("lone surrogate", {"content": b'{"text": "\\ud800"}', "headers": json_type}),
        ("NaN", {"content": b'{"text": "hi", "params": {"a": NaN}}', "headers": json_type}),
        ("int beyond 64 bits", {"json": {"text": "hi", "params": {"big": 2**64}}}),
        ("int below int64", {"json": {"text": "hi", "params": {"small": -(2**63) - 1}}}),
        ("float timeout", {"json": {"text": "hi", "timeout_ms": 1.5}}),
        ("string priority", {"json": {"text": "hi", "priority": "3"}}),
        ("bad version", {"json": {"text": "hi", "version": "has space"}}),
        ("other tenant", {"json": {"text": "hi", "tenant": "someone-else"}}),
        ("reserved results topic", {"json": {"text": "hi", "results_topic": "fleet.dlq"}}),
        ("results topic off the list", {"json": {"text": "hi", "results_topic": "orders.results"}}),
    ]


async def send(http: httpx.AsyncClient, path: str, arguments: dict[str, Any]) -> httpx.Response:
    arguments = dict(arguments)
    if callable(arguments.get("content")):
        arguments["content"] = arguments["content"]()
    return await http.post(arguments.pop("path", path), **arguments)


@pytest.mark.parametrize("path", [INFER, SUBMIT])
async def test_bad_requests_get_the_same_answer_byte_for_byte(both: dict[str, httpx.AsyncClient],
                                                             keys: dict[str, str], path: str) -> None:
    for what, arguments in bad_requests(keys):
        fast, slow = [await send(both[side], path, arguments) for side in ("fast", "slow")]
        assert 400 <= fast.status_code < 500, f"{what}: {fast.status_code} {fast.text}"
        assert (fast.status_code, fast.content) == (slow.status_code, slow.content), what
        for header in COMPARED_HEADERS:
            assert fast.headers.get(header) == slow.headers.get(header), f"{what}: {header}"


async def test_a_tenant_over_its_rate_gets_the_same_429(both: dict[str, httpx.AsyncClient],
                                                        keys: dict[str, str]) -> None:
    answers = {}
    for side, http in both.items():
        admitted = await http.post(SUBMIT, json={"text": "hi"}, headers=bearer(keys[SLOW_TENANT]))
        assert admitted.status_code == 202, admitted.text
        answers[side] = await http.post(INFER, json={"text": "hi"}, headers=bearer(keys[SLOW_TENANT]))
    assert answers["fast"].status_code == 429 and answers["fast"].json()["quota"] == "rate"
    assert answers["fast"].content == answers["slow"].content
    assert answers["fast"].headers["retry-after"] == answers["slow"].headers["retry-after"]


async def test_answers_are_counted_under_the_same_route_and_code(keys: dict[str, str]) -> None:
    counted = {}
    for fast in (True, False):
        async with in_process(settings(fast), key=keys[TEST_TENANT], metrics_key=keys[METRICS_TENANT]) as http:
            assert (await http.post(SUBMIT, json={"text": "hi"})).status_code == 202
            assert (await http.post(INFER, json={"text": 7})).status_code == 422
            assert (await http.post(INFER, json={"text": "hi"}, headers={"authorization": ""})).status_code == 401
            assert (await http.post(INFER, json={"text": "hi", "timeout_ms": 200})).status_code == 504
            counted[fast] = sorted(line for line in (await http.metrics()).splitlines()
                                   if line.startswith(("fleet_gateway_requests_total{", "fleet_gateway_auth_failures_total{"))
                                   and "/metrics" not in line)
    assert counted[True] == counted[False]
    assert 'fleet_gateway_requests_total{code="504",route="/v1/models/{model}/infer"} 1.0' in counted[True]
    assert 'fleet_gateway_requests_total{code="202",route="/v1/models/{model}/requests"} 1.0' in counted[True]


async def test_the_fast_path_never_enters_fastapi(keys: dict[str, str]) -> None:
    app = create_app(settings(True))
    assert isinstance(app, GatewayApp)
    entered: list[str] = []
    async with app.router.lifespan_context(app):
        stack = app.build_middleware_stack()

        async def counting(scope: Any, receive: Any, send: Any) -> None:
            entered.append(scope["path"])
            await stack(scope, receive, send)

        app.middleware_stack = counting
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway",
                                     headers=bearer(keys[TEST_TENANT])) as http:
            assert (await http.post(SUBMIT, json={"text": "hi"})).status_code == 202
            assert (await http.post(INFER, json={"text": 7})).status_code == 422
            assert (await http.get(INFER)).status_code == 405, "another method on the path is FastAPI's"
            assert (await http.get("/healthz")).status_code == 200
    assert entered == [INFER, "/healthz"]


class Buggy(FleetClient):
    """A client whose every exchange and publish fails with what no handler expects: a bug."""

    async def exchange(self, *args: Any, **kwargs: Any) -> Any:
        raise KeyError("a bug in exchange")

    async def publish(self, *args: Any, **kwargs: Any) -> None:
        raise ZeroDivisionError("a bug in publish")


async def test_a_bug_on_the_fast_path_is_a_logged_503_never_a_500(keys: dict[str, str], caplog) -> None:  # type: ignore[no-untyped-def]
    gateway = settings(True)
    async with in_process(gateway, Buggy(gateway), key=keys[TEST_TENANT], metrics_key=keys[METRICS_TENANT]) as http:
        answers = [await http.post(path, json={"text": "hi"}) for path in (INFER, SUBMIT)]
        metrics = await http.metrics()
    for answer in answers:
        assert answer.status_code == 503 and answer.headers["retry-after"] == "1", answer.text
        assert answer.json()["detail"] == "internal error, retry" and len(answer.json()["error_id"]) == 16
    logged = {getattr(record, "request_id", None) for record in caplog.records if "internal error" in record.getMessage()}
    assert {answer.json()["error_id"] for answer in answers} <= logged
    assert "fleet_gateway_internal_errors_total 2.0" in metrics
    assert 'fleet_gateway_requests_total{code="503",route="/v1/models/{model}/infer"} 1.0' in metrics


HOSTILE_HEADERS: list[list[tuple[str, str]]] = [
    [("content-length", "5"), ("content-length", "999999")],  # repeated: the last one is what BodyLimit reads
    [("content-type", "application/json; charset=latin-1")],
    [("content-type", "application/json"), ("content-type", "text/plain")],
    [("content-type", "\u00e9\u00e8/json")],
    [("content-type", "application/" + "x" * 5000)],
    [("transfer-encoding", "chunked")],
    [("x-api-key", " ")],
    [("authorization", "Bearer")],
    [("authorization", "Bearer \u00ff\u00fe")],
]


@pytest.mark.parametrize("extra", HOSTILE_HEADERS)
async def test_hostile_headers_get_a_4xx_or_an_answer_never_a_5xx(both: dict[str, httpx.AsyncClient],
                                                                 keys: dict[str, str],
                                                                 extra: list[tuple[str, str]]) -> None:
    body = json.dumps({"text": "hi", "timeout_ms": 200}).encode()
    names = {name for name, _ in extra}
    own = [] if "authorization" in names else [("authorization", f"Bearer {keys[TEST_TENANT]}")]
    own += [] if names & {"content-type", "content-length"} else [("content-type", "application/json")]
    headers = [(name.encode(), value.encode("latin-1")) for name, value in own + extra]
    http = both["fast"]
    for path in (INFER, SUBMIT):
        answer = await http.send(httpx.Request("POST", f"{http.base_url}{path}", headers=headers, content=body))
        assert answer.status_code < 500 or answer.status_code == 504, f"{extra}: {answer.status_code} {answer.text}"
