import asyncio
import json
import time
from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from common.clients import new_admin
from common.settings import FleetSettings
from common.topics import ensure_topics
from fleet.ports import free_port
from tests.integration.conftest import MODEL, Process
from tests.integration.gateway.gateway_harness import METRICS_TENANT, TEST_TENANT, bearer, cli_key
from models.backends.base import Backend

IDLE_MODEL = "idle-model"  # accepted by the gateway, served by no worker: its requests time out
RULE_MODEL = "rules-model"  # served by no worker, with a rule-based safe answer configured
SAFE_ANSWER = {"label": "handoff_to_human", "confidence": 0.0}


@pytest.fixture(scope="module")
def auth() -> dict[str, str]:
    return bearer(cli_key(TEST_TENANT))


@pytest.fixture(scope="module")
def metrics_auth() -> dict[str, str]:
    return bearer(cli_key(METRICS_TENANT))


@pytest.fixture(scope="module")
def gateway_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    env = {"FLEET_PORT": str(port), "FLEET_MODELS": json.dumps([MODEL, IDLE_MODEL, RULE_MODEL]),
           "FLEET_MAX_BODY_BYTES": "4096", "FLEET_MAX_TEXT_CHARS": "1000",
           "FLEET_RULE_FALLBACKS": json.dumps({RULE_MODEL: SAFE_ANSWER})}
    process = Process(["-m", "gateway.main"], env, "", tmp_path_factory.mktemp("gw") / "gateway.log")
    url = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                break
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    yield url
    process.stop()


async def test_sync_infer_matches_in_process_embedding(gateway_url: str, auth: dict[str, str], serve, backend: Backend) -> None:  # type: ignore[no-untyped-def]
    text = "My package never arrived"
    async with serve(), httpx.AsyncClient(base_url=gateway_url, timeout=30, headers=auth) as http:
        response = await http.post(f"/v1/models/{MODEL}/infer", json={"text": text})
    assert response.status_code == 200, response.text
    body = response.json()
    served = np.asarray(body["outputs"]["embedding"], dtype=np.float32)
    assert served.shape == (384,)
    local = backend.infer([text])[0]
    cosine = float(served @ local / (np.linalg.norm(served) * np.linalg.norm(local)))
    assert cosine >= 0.999
    assert body["status"] == "ok" and body["version"] == backend.manifest.id and body["cache"] == "miss"


async def test_async_submit_then_lookup(gateway_url: str, auth: dict[str, str], serve) -> None:  # type: ignore[no-untyped-def]
    async with httpx.AsyncClient(base_url=gateway_url, timeout=30, headers=auth) as http:
        accepted = await http.post(f"/v1/models/{MODEL}/requests", json={"text": "refund please", "timeout_ms": 30000})
        assert accepted.status_code == 202
        request_id = accepted.json()["id"]
        assert (await http.get(f"/v1/results/{request_id}")).status_code == 404
        async with serve():
            for _ in range(200):
                found = await http.get(f"/v1/results/{request_id}")
                if found.status_code == 200:
                    break
                await asyncio.sleep(0.05)
    assert found.status_code == 200 and found.json()["id"] == request_id


def test_sync_infer_times_out_with_504_naming_the_request(gateway_url: str, auth: dict[str, str]) -> None:
    response = httpx.post(f"{gateway_url}/v1/models/{IDLE_MODEL}/infer", json={"text": "hello", "timeout_ms": 300},
                          headers=auth, timeout=10)
    assert response.status_code == 504
    body = response.json()
    assert len(body["id"]) == 32 and body["id"] in body["detail"]


@pytest.mark.parametrize(("path", "payload", "code", "says"), [
    ("/v1/models/no-such-model/infer", {"text": "hi"}, 404, "unknown model 'no-such-model'"),
    (f"/v1/models/{MODEL}/infer", {"text": "x" * 5000}, 413, "over the limit of 4096 bytes"),
    (f"/v1/models/{MODEL}/infer", {"text": "x" * 1001}, 422, "text: 1001 characters is over the limit of 1000"),
    (f"/v1/models/{MODEL}/infer", {"text": 42}, 422, "text"),
    (f"/v1/models/{MODEL}/infer", {"words": "hi"}, 422, "text"),
    (f"/v1/models/{MODEL}/infer", {"text": "hi", "timeout_ms": "soon"}, 422, "timeout_ms"),
])
def test_input_errors_are_4xx_naming_the_problem(gateway_url: str, auth: dict[str, str], path: str, payload: object,
                                                 code: int, says: str) -> None:
    response = httpx.post(f"{gateway_url}{path}", json=payload, headers=auth, timeout=10)
    print(f"{code} {path} -> {response.text[:200]}")
    assert response.status_code == code
    assert says in response.text


def test_result_lookup_of_a_malformed_id_is_422(gateway_url: str, auth: dict[str, str]) -> None:
    response = httpx.get(f"{gateway_url}/v1/results/not-an-id", headers=auth, timeout=10)
    assert response.status_code == 422 and "request_id" in response.text


def test_health_readiness_metrics_and_openapi(gateway_url: str, auth: dict[str, str],
                                              metrics_auth: dict[str, str]) -> None:
    assert httpx.get(f"{gateway_url}/healthz").json() == {"status": "ok"}
    ready = httpx.get(f"{gateway_url}/readyz").json()
    assert ready == {"ready": True, "checks": {"redis": True, "kafka": True, "reply_reader": True}, "reasons": {},
                     "auth": "required"}
    metrics = httpx.get(f"{gateway_url}/metrics", headers=metrics_auth).text
    assert "fleet_gateway_requests_total" in metrics
    paths = httpx.get(f"{gateway_url}/openapi.json", headers=auth).json()["paths"]
    assert {"/v1/models/{model}/infer", "/v1/models/{model}/requests", "/v1/results/{request_id}"} <= set(paths)


async def test_result_carries_every_stage_from_gateway_to_model(gateway_url: str, auth: dict[str, str],  # type: ignore[no-untyped-def]
                                                                 metrics_auth: dict[str, str], serve) -> None:
    async with serve(), httpx.AsyncClient(base_url=gateway_url, timeout=30, headers=auth) as http:
        response = await http.post(f"/v1/models/{MODEL}/infer", json={"text": "stage by stage"})
        metrics = (await http.get("/metrics", headers=metrics_auth)).text
    timings = response.json()["timings"]
    stages = {"gateway_ms", "produce_ms", "end_to_end_ms", "topic_ms", "batch_wait_ms", "tokenize_ms", "inference_ms"}
    assert stages <= set(timings)
    assert timings["gateway_ms"] >= timings["end_to_end_ms"] >= timings["inference_ms"] > 0
    assert 'fleet_gateway_stage_seconds_count{model="minilm-embed",stage="produce"}' in metrics


def test_rule_based_fallback_answers_when_nothing_is_alive(gateway_url: str, auth: dict[str, str],
                                                           metrics_auth: dict[str, str]) -> None:
    started = time.perf_counter()
    response = httpx.post(f"{gateway_url}/v1/models/{RULE_MODEL}/infer", json={"text": "help", "timeout_ms": 1000},
                          headers=auth, timeout=10)
    elapsed = time.perf_counter() - started
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["status"] == "degraded" and body["outputs"] == SAFE_ANSWER and body["device"] == "rules"
    assert elapsed < 1.0, "the safe answer comes before the deadline, not after it"
    metrics = httpx.get(f"{gateway_url}/metrics", headers=metrics_auth).text
    assert f'fleet_gateway_rule_answers_total{{model="{RULE_MODEL}"}} 1.0' in metrics


def test_chunked_body_over_the_limit_is_413(gateway_url: str, auth: dict[str, str]) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"text": "'
        for _ in range(10):
            yield b"x" * 1000  # no Content-Length: the limit is found while reading
        yield b'"}'

    response = httpx.post(f"{gateway_url}/v1/models/{MODEL}/infer", content=chunks(),
                          headers={"content-type": "application/json", **auth}, timeout=10)
    assert response.status_code == 413, response.text
    assert response.json() == {"detail": "request body is over the limit of 4096 bytes", "refusal": "too_large"}


async def test_cache_hits_come_back_with_their_timings(gateway_url: str, auth: dict[str, str], serve,  # type: ignore[no-untyped-def]
                                                      worker_settings) -> None:
    text = f"cached through the gateway {time.time_ns()}"
    cached = worker_settings.model_copy(update={"exact_cache": True})
    async with serve(cached), httpx.AsyncClient(base_url=gateway_url, timeout=30, headers=auth) as http:
        first = (await http.post(f"/v1/models/{MODEL}/infer", json={"text": text})).json()
        second = (await http.post(f"/v1/models/{MODEL}/infer", json={"text": text})).json()
        stored = (await http.get(f"/v1/results/{second['id']}")).json()
    assert first["cache"] == "miss" and second["cache"] == "exact"
    assert {"gateway_ms", "produce_ms", "end_to_end_ms"} <= set(second["timings"])
    assert set(stored["timings"]) <= set(second["timings"]), "the gateway drops none of the worker's timings"
    assert second["timings"]["gateway_ms"] >= second["timings"]["end_to_end_ms"] > 0


async def test_a_burst_of_probes_leaves_tenants_their_redis_connections(gateway_url: str, auth: dict[str, str]) -> None:
    """/readyz needs no key: 300 at once used to ping Redis 300 times at once, took the pool that key
    lookups and result reads use, and the gateway said it was down while Redis was fine."""
    limits = httpx.Limits(max_connections=400, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=gateway_url, timeout=30, limits=limits) as http:
        probes = [http.get("/readyz") for _ in range(300)]
        lookups = [http.get(f"/v1/results/{index:032x}", headers=auth) for index in range(20)]
        answers = await asyncio.gather(*probes, *lookups)
    assert [a.status_code for a in answers[:300]] == [200] * 300, {a.text for a in answers[:300]}
    assert [a.status_code for a in answers[300:]] == [404] * 20, {a.text for a in answers[300:]}


async def test_a_tenant_cannot_create_topics_by_naming_them(gateway_url: str, auth: dict[str, str]) -> None:
    """Any name matching the results pattern used to be created by the worker on first delivery."""
    made_up = f"fleet.results.made-up-{time.time_ns()}"
    existing = f"fleet.results.gw-existing-{time.time_ns()}"
    settings = FleetSettings()
    await ensure_topics(settings, [existing], 1)
    async with httpx.AsyncClient(base_url=gateway_url, timeout=30, headers=auth) as http:
        refused = await http.post(f"/v1/models/{MODEL}/requests", json={"text": "hi", "results_topic": made_up})
        accepted = await http.post(f"/v1/models/{MODEL}/requests", json={"text": "hi", "results_topic": existing})
    assert refused.status_code == 422 and "results_topic" in refused.text and "does not exist" in refused.text
    assert accepted.status_code == 202, accepted.text
    admin = new_admin(settings)
    await admin.start()
    try:
        assert made_up not in await admin.list_topics()
    finally:
        await admin.close()


async def until_brokers_list(topic: str) -> None:
    admin = new_admin(FleetSettings())
    await admin.start()
    try:
        async with asyncio.timeout(10):
            while topic not in await admin.list_topics():
                await asyncio.sleep(0.05)
    finally:
        await admin.close()


async def test_a_results_topic_created_a_moment_ago_is_usable_at_once(gateway_url: str, auth: dict[str, str]) -> None:
    """The gateway's topic list is fresh (it just refused a made-up name), then a topic is created:
    a miss on its name costs a look-up of that name, not a wait for the next full refresh."""
    new = f"fleet.results.gw-new-{time.time_ns()}"
    async with httpx.AsyncClient(base_url=gateway_url, timeout=30, headers=auth) as http:
        primed = await http.post(f"/v1/models/{MODEL}/requests",
                                 json={"text": "hi", "results_topic": f"fleet.results.made-up-{time.time_ns()}"})
        await ensure_topics(FleetSettings(), [new], 1)
        await until_brokers_list(new)  # what `fleet topics` users see: the gateway's own list is still stale
        answers = await asyncio.gather(*(http.post(f"/v1/models/{MODEL}/requests",
                                                   json={"text": f"new topic {i}", "results_topic": new})
                                         for i in range(20)))
    assert primed.status_code == 422
    assert [answer.status_code for answer in answers] == [202] * 20, {a.text for a in answers}


async def test_a_deadline_too_short_to_publish_is_a_timeout_not_an_outage(gateway_url: str, auth: dict[str, str],
                                                                         metrics_auth: dict[str, str]) -> None:
    """A timeout_ms of 1 passes before Kafka acknowledges: 504 with the id, never a 503 that counts
    a Kafka outage (any tenant could raise that count at will)."""
    async with httpx.AsyncClient(base_url=gateway_url, timeout=30, headers=auth) as http:
        answers = [await http.post(f"/v1/models/{MODEL}/{route}", json={"text": "hi", "timeout_ms": timeout_ms})
                   for route in ("requests", "infer") for timeout_ms in (1, 2, 5) for _ in range(5)]
        metrics = (await http.get("/metrics", headers=metrics_auth)).text
    assert {answer.status_code for answer in answers} <= {202, 504}, {a.status_code: a.text for a in answers}
    assert all(len(answer.json()["id"]) == 32 for answer in answers)
    assert 'fleet_gateway_unavailable_total{dependency="kafka"}' not in metrics


async def test_a_trailing_slash_is_not_redirected_to_the_callers_host(gateway_url: str, auth: dict[str, str]) -> None:
    headers = {**auth, "Host": "evil.example"}
    async with httpx.AsyncClient(base_url=gateway_url, timeout=30, headers=headers) as http:
        answers = [await http.post(f"/v1/models/{MODEL}/infer/", json={"text": "hi"}),
                   await http.get(f"/v1/results/{'ab' * 16}/")]
    assert [answer.status_code for answer in answers] == [404, 404], [a.text for a in answers]
    assert not any("location" in answer.headers for answer in answers)
