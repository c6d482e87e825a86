"""Gateway authentication against the real Kafka and Redis: no key, a wrong key, a revoked key,
Redis away while checking one, /metrics' own keys, authentication switched off."""

import asyncio
import logging
import time
from pathlib import Path

import httpx
import pytest
from redis.asyncio import Redis

from common.auth_keys import key_digest, revoke_key
from common.settings import FleetSettings
from gateway.settings import GatewaySettings
from schemas.names import API_KEYS_KEY
from schemas.wire import now_ms
from tests.integration.gateway.gateway_harness import (METRICS_TENANT, TEST_TENANT, ThrowawayRedis, bearer, in_process,
                                               issue_key, write_keys_file)

MODEL = "gw-auth-model"  # accepted by the gateway, served by no worker
SOME_ID = "cd" * 16
GUARDED = [("POST", f"/v1/models/{MODEL}/infer"), ("POST", f"/v1/models/{MODEL}/requests"),
           ("GET", f"/v1/results/{SOME_ID}"), ("GET", "/metrics"), ("GET", "/docs/../metrics")]
# Open to all: they document the API and serve nothing of it (gateway/docs_page.py).
DOCS = ["/docs", "/openapi.json", "/docs/static/swagger-ui-bundle.js", "/docs/static/swagger-ui.css"]


def settings(**changes: object) -> GatewaySettings:
    return GatewaySettings(models=[MODEL], **changes)  # type: ignore[arg-type]


async def call(http: httpx.AsyncClient, method: str, path: str, headers: dict[str, str]) -> httpx.Response:
    return await http.request(method, path, json={"text": "hi", "timeout_ms": 300} if method == "POST" else None,
                              headers=headers)


@pytest.mark.parametrize("headers", [{"authorization": ""}, {"authorization": "Bearer fk_000000000000_nope"},
                                     {"authorization": "", "x-api-key": "not a key"}, {"authorization": "Basic dXNlcjpwYXNz"},
                                     {"authorization": "Bearer " + "x" * 300}])
async def test_every_route_but_the_probes_and_the_docs_needs_a_valid_key(stack: FleetSettings, headers: dict[str, str]) -> None:
    async with in_process(settings()) as http:
        for method, path in GUARDED:
            response = await call(http, method, path, headers)
            assert response.status_code == 401, f"{method} {path}: {response.text}"
            assert response.headers["www-authenticate"] == "Bearer"
        assert (await http.get("/healthz", headers=headers)).status_code == 200
        assert (await http.get("/readyz", headers=headers)).json()["auth"] == "required"
        for path in DOCS:
            assert (await http.get(path, headers=headers)).status_code == 200, path
        assert (await http.get("/docs/static/../../metrics", headers=headers)).status_code in (401, 404)
        metrics = await http.metrics()
    assert 'fleet_gateway_auth_failures_total{reason=' in metrics


async def test_a_key_works_as_bearer_or_x_api_key(stack: FleetSettings, redis: Redis) -> None:
    key = await issue_key(stack.redis_url, TEST_TENANT)
    async with in_process(settings(), key="fk_000000000000_wrong") as http:
        for headers in ({"authorization": f"Bearer {key}"}, {"authorization": "", "x-api-key": key}):
            found = await http.get(f"/v1/results/{SOME_ID}", headers=headers)
            assert found.status_code == 404, found.text
    stored = await redis.hgetall(API_KEYS_KEY)
    assert key_digest(key).encode() in stored, "stored under its hash"
    assert not any(key.encode() in field + value for field, value in stored.items()), "never in clear"


async def test_a_revoked_key_is_refused_within_a_second(stack: FleetSettings, redis: Redis) -> None:
    key = await issue_key(stack.redis_url, TEST_TENANT)
    async with in_process(settings(), key=key) as http:
        assert (await http.get(f"/v1/results/{SOME_ID}")).status_code == 404  # admitted, and now cached
        key_id = key.split("_")[1]
        await revoke_key(redis, key_id, now_ms=now_ms())  # what `fleet keys revoke` runs
        revoked_at = time.monotonic()
        while (response := await http.get(f"/v1/results/{SOME_ID}")).status_code == 404:
            assert time.monotonic() - revoked_at < 1.0, "revoked key still admitted after a second"
            await asyncio.sleep(0.02)
        refused_after = time.monotonic() - revoked_at
    print(f"revoked key refused {refused_after * 1000:.0f} ms after revocation")
    assert response.status_code == 401
    assert response.json() == {"detail": "unknown or revoked API key", "refusal": "unauthenticated"}


async def test_redis_away_while_checking_a_key_is_503_never_a_way_in(stack: FleetSettings, tmp_path: Path) -> None:
    redis_server = ThrowawayRedis(tmp_path)
    redis_server.start()
    try:
        # A single plain Redis, even when the suite runs against a cluster stack (FLEET_REDIS_CLUSTER=true).
        gateway = settings(redis_url=redis_server.url, redis_cluster=False, auth_cache_s=0.2, auth_lookup_timeout_s=1.0,
                           auth_outage_grace_s=0)  # no grace: see the next test for keys verified lately
        async with in_process(gateway) as http:
            assert (await http.get(f"/v1/results/{SOME_ID}")).status_code == 404
            redis_server.stop()
            await asyncio.sleep(0.3)  # past the cached answer
            for method, path in GUARDED:
                response = await call(http, method, path, http.headers)
                assert response.status_code == 503, f"{method} {path}: {response.text}"
                assert response.headers["retry-after"] == "1" and response.json()["dependency"] == "redis"
    finally:
        redis_server.stop()


async def test_during_an_outage_only_keys_verified_lately_are_let_in(stack: FleetSettings, tmp_path: Path) -> None:
    redis_server = ThrowawayRedis(tmp_path)
    redis_server.start()
    try:
        gateway = settings(redis_url=redis_server.url, redis_cluster=False, auth_cache_s=0.2, auth_lookup_timeout_s=1.0,
                           auth_outage_grace_s=30)
        async with in_process(gateway) as http:
            never_seen = {"authorization": f"Bearer {await issue_key(redis_server.url, TEST_TENANT, cluster=False)}"}
            assert (await http.get(f"/v1/results/{SOME_ID}")).status_code == 404  # this key verified now
            redis_server.stop()
            await asyncio.sleep(0.3)  # past the cached answer
            # Let in on its verification: it reaches the route, which tells a tenant key off /metrics.
            assert (await http.get("/metrics")).status_code == 403
            refused = await http.get("/metrics", headers=never_seen)
            assert refused.status_code == 503 and refused.json()["dependency"] == "redis", refused.text
    finally:
        redis_server.stop()


async def test_metrics_keys_read_metrics_and_nothing_else(stack: FleetSettings) -> None:
    async with in_process(settings()) as http:
        tenant_scrape = await http.get("/metrics")
        assert http.metrics_key is not None
        metrics_infer = await call(http, "POST", f"/v1/models/{MODEL}/requests", bearer(http.metrics_key))
        assert "fleet_gateway_requests_total" in await http.metrics()
    assert tenant_scrape.status_code == 403 and "metrics tenant" in tenant_scrape.text
    assert metrics_infer.status_code == 403 and "only read /metrics" in metrics_infer.text


async def test_auth_switched_off_warns_at_start_and_readyz_says_so(stack: FleetSettings,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="gateway"):
        async with in_process(settings(auth_required=False)) as http:
            # Ready once the reply reader has read from Redis, which on a loaded machine is not at once.
            for _ in range(40):
                ready = (await http.get("/readyz")).json()
                if ready["ready"]:
                    break
                await asyncio.sleep(0.25)
            anyone = await http.post(f"/v1/models/{MODEL}/requests", json={"text": "hi", "tenant": "whoever"})
            scrape = await http.get("/metrics")
    assert ready["auth"] == "disabled" and ready["ready"] is True
    assert anyone.status_code == 202 and scrape.status_code == 200
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name == "gateway"]
    assert any("AUTHENTICATION IS OFF" in w for w in warnings), warnings


async def test_a_keys_file_admits_its_tenants_without_redis(stack: FleetSettings, tmp_path: Path) -> None:
    path = tmp_path / "keys.txt"
    keys = write_keys_file(path, "filed-tenant", METRICS_TENANT)
    gateway = settings(redis_url="redis://127.0.0.1:1/0", auth_keys_file=path, auth_cache_s=0.1)
    async with in_process(gateway, key=keys["filed-tenant"], metrics_key=keys[METRICS_TENANT]) as http:
        admitted = await http.post(f"/v1/models/{MODEL}/requests", json={"text": "hi"})
        path.write_text("")  # the operator removes the line: the key is gone within the cache time
        await asyncio.sleep(0.2)
        removed = await http.post(f"/v1/models/{MODEL}/requests", json={"text": "hi"})
    assert admitted.status_code == 202, admitted.text
    assert removed.status_code == 503, "not in the file any more, and Redis cannot say: unverified, not admitted"
