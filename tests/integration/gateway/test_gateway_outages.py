"""Kafka or Redis away: 503 with Retry-After within the request's deadline (a synchronous call
waits out Redis up to its deadline, then 504 with the id), never a 500, and the gateway answers
again by itself once Redis is back. "Down" is a dead port or a throwaway
redis-server this test kills; the shared stack is never touched."""

import asyncio
import time
from pathlib import Path

import httpx
import pytest
from aiokafka import AIOKafkaProducer
from redis.asyncio import Redis

from common.settings import FleetSettings
from gateway.client import FleetClient
from gateway.settings import GatewaySettings
from schemas.wire import Result, Status
from tests.integration.gateway.gateway_harness import (METRICS_TENANT, TEST_TENANT, ThrowawayRedis, echo_worker, hung_broker,
                                                       in_process, write_keys_file)

DEAD_REDIS = "redis://127.0.0.1:1/0"
DEAD_KAFKA = "127.0.0.1:1"
HUNG_MODEL = "gw-hardening-hung"
RECOVERY_MODEL = "gw-hardening-recovery"
SOME_ID = "ab" * 16


def assert_unavailable(response: httpx.Response, dependency: str) -> None:
    assert response.status_code == 503, response.text
    assert int(response.headers["retry-after"]) >= 1
    assert response.json()["dependency"] == dependency


async def until_not_ready(http: httpx.AsyncClient) -> None:
    for _ in range(50):
        if (await http.get("/readyz")).status_code == 503:
            return
        await asyncio.sleep(0.1)
    raise AssertionError("/readyz still says ready")


def keys_in_file(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """Keys a gateway checks without Redis: the mounted keys file."""
    path = tmp_path / "keys.txt"
    keys = write_keys_file(path, TEST_TENANT, METRICS_TENANT)
    return path, {"key": keys[TEST_TENANT], "metrics_key": keys[METRICS_TENANT]}


async def test_redis_down_lookups_are_503_infer_waits_its_deadline_submits_still_route(stack: FleetSettings,
                                                                                          tmp_path: Path) -> None:
    keys_file, keys = keys_in_file(tmp_path)
    settings = GatewaySettings(models=["gw-hardening-noredis"], redis_url=DEAD_REDIS, auth_keys_file=keys_file)
    async with in_process(settings, **keys) as http:
        await until_not_ready(http)
        assert_unavailable(await http.get(f"/v1/results/{SOME_ID}"), "redis")
        # Accepted and published: Redis may be back before the deadline. It is not: 504 with the id.
        timed_out = await http.post("/v1/models/gw-hardening-noredis/infer", json={"text": "hi", "timeout_ms": 800})
        assert timed_out.status_code == 504 and len(timed_out.json()["id"]) == 32, timed_out.text
        # Routing cannot read heartbeats: the primary topic stands in, and Kafka takes the request.
        accepted = await http.post("/v1/models/gw-hardening-noredis/requests", json={"text": "hi"})
        assert accepted.status_code == 202, accepted.text
        ready = await http.get("/readyz")
        metrics = await http.metrics()
    assert ready.status_code == 503
    assert ready.json()["checks"]["reply_reader"] is False and "Error" in ready.json()["reasons"]["reply_reader"]
    assert 'fleet_gateway_unavailable_total{dependency="redis"} 1.0' in metrics
    assert "fleet_gateway_reply_reader_up 0.0" in metrics


async def test_kafka_down_is_503_within_the_deadline(stack: FleetSettings) -> None:
    settings = GatewaySettings(models=["gw-hardening-nokafka"], kafka_bootstrap=DEAD_KAFKA)
    # Kafka down from the start: a producer that never reached a broker (a gateway process would
    # not start like this; see test_gateway_process.py).
    producer = AIOKafkaProducer(bootstrap_servers=DEAD_KAFKA)
    try:
        async with in_process(settings, FleetClient(settings, producer=producer)) as http:
            for path in ("/v1/models/gw-hardening-nokafka/requests", "/v1/models/gw-hardening-nokafka/infer"):
                started = time.monotonic()
                response = await http.post(path, json={"text": "hi", "timeout_ms": 3000})
                assert time.monotonic() - started < 3.5
                assert_unavailable(response, "kafka")
            assert (await http.get("/readyz")).json()["checks"]["kafka"] is False
    finally:
        await producer.stop()


async def test_publish_respects_the_deadline_when_kafka_hangs(stack: FleetSettings) -> None:
    """A broker that takes connections and never answers: the request's timeout_ms bounds the
    wait, not the Kafka clients' 40 s."""
    with hung_broker() as bootstrap:
        settings = GatewaySettings(models=[HUNG_MODEL], kafka_bootstrap=bootstrap)
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        try:
            async with in_process(settings, FleetClient(settings, producer=producer)) as http:
                for path, timeout_ms in ((f"/v1/models/{HUNG_MODEL}/requests", 1500),
                                         (f"/v1/models/{HUNG_MODEL}/infer", 1000),
                                         (f"/v1/models/{HUNG_MODEL}/requests", 800)):
                    started = time.monotonic()
                    response = await http.post(path, json={"text": "hi", "timeout_ms": timeout_ms})
                    elapsed = time.monotonic() - started
                    print(f"{path}: {response.status_code} after {elapsed:.2f} s (timeout_ms {timeout_ms})")
                    assert_unavailable(response, "kafka")
                    assert timeout_ms / 1000 - 0.05 <= elapsed < timeout_ms / 1000 + 1.0
        finally:
            await producer.stop()


async def _infer_ok(http: httpx.AsyncClient) -> bool:
    response = await http.post(f"/v1/models/{RECOVERY_MODEL}/infer", json={"text": "back?", "timeout_ms": 2000})
    assert response.status_code in (200, 504), response.text  # a deadline that outlived the outage: 504 with the id
    if response.status_code == 504:
        assert len(response.json()["id"]) == 32
    return response.status_code == 200


async def test_reply_reader_recovers_when_redis_returns(stack: FleetSettings, tmp_path: Path) -> None:
    redis_server = ThrowawayRedis(tmp_path)
    redis_server.start()
    # Keys from a file: the throwaway Redis keeps nothing across its restart.
    keys_file, keys = keys_in_file(tmp_path)
    settings = GatewaySettings(models=[RECOVERY_MODEL], redis_url=redis_server.url, redis_cluster=False,
                               auth_keys_file=keys_file)  # a plain Redis, whatever FLEET_REDIS_CLUSTER says
    replies = Redis.from_url(redis_server.url, socket_connect_timeout=1, socket_timeout=2)
    client = FleetClient(settings)
    try:
        async with in_process(settings, client, **keys) as http, echo_worker(stack, RECOVERY_MODEL, replies):
            assert await _infer_ok(http)
            waiting = client.waiter.expect(SOME_ID)  # a wait registered before the outage
            redis_server.stop()
            await until_not_ready(http)
            ready = (await http.get("/readyz")).json()
            assert ready["ready"] is False and "reply_reader" in ready["reasons"]
            assert not await _infer_ok(http)
            assert_unavailable(await http.get(f"/v1/results/{SOME_ID}"), "redis")
            await asyncio.sleep(3)  # an outage longer than the reader's longest backoff
            assert not waiting.done(), "a pending wait outlives the outage until its own deadline"
            returned_at = redis_server.start()
            while not await _infer_ok(http):
                assert time.monotonic() - returned_at < 5, "no answer within 5 s of Redis returning"
                await asyncio.sleep(0.05)
            recovery_s = time.monotonic() - returned_at
            assert (await http.get("/readyz")).status_code == 200
            late = Result(id=SOME_ID, model=RECOVERY_MODEL, status=Status.ok, outputs={})
            await replies.xadd(client.waiter.stream, {"id": SOME_ID, "result": late.encode()})
            assert (await asyncio.wait_for(waiting, 5)).id == SOME_ID
        print(f"gateway answered /infer again {recovery_s:.2f} s after Redis returned")
    finally:
        await replies.aclose()
        redis_server.stop()
