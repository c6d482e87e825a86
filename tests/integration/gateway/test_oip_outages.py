"""Outages over the Open Inference Protocol: Redis or Kafka away is 503 {"error"} with
Retry-After (never a 500, never a hang past the call's deadline), and /v2/health/ready says so."""

import asyncio
import time
from pathlib import Path

import httpx
from aiokafka import AIOKafkaProducer

from common.settings import FleetSettings
from gateway.client import FleetClient
from gateway.settings import GatewaySettings
from tests.integration.gateway.gateway_harness import METRICS_TENANT, TEST_TENANT, in_process, write_keys_file

DEAD_REDIS = "redis://127.0.0.1:1/0"
DEAD_KAFKA = "127.0.0.1:1"


def body(timeout_us: int | None = None) -> dict[str, object]:
    call: dict[str, object] = {"inputs": [{"name": "text", "shape": [2], "datatype": "BYTES", "data": ["a", "b"]}]}
    if timeout_us is not None:
        call["parameters"] = {"timeout": timeout_us}
    return call


def assert_unavailable(response: httpx.Response) -> None:
    assert response.status_code == 503, response.text
    assert int(response.headers["retry-after"]) >= 1
    assert isinstance(response.json()["error"], str)


async def test_redis_down_is_503_and_not_ready(stack: FleetSettings, tmp_path: Path) -> None:
    keys = write_keys_file(tmp_path / "keys.txt", TEST_TENANT, METRICS_TENANT)
    settings = GatewaySettings(models=["oip-noredis"], redis_url=DEAD_REDIS, auth_keys_file=tmp_path / "keys.txt")
    async with in_process(settings, key=keys[TEST_TENANT], metrics_key=keys[METRICS_TENANT]) as http:
        for _ in range(50):
            if (await http.get("/v2/health/ready")).status_code == 503:
                break
            await asyncio.sleep(0.1)
        ready = await http.get("/v2/health/ready")
        assert ready.status_code == 503 and ready.json() == {"ready": False, "reason": "replies cannot be read from Redis"}
        assert (await http.get("/v2/health/live")).json() == {"live": True}
        assert_unavailable(await http.post("/v2/models/oip-noredis/infer", json=body()))
        assert_unavailable(await http.get("/v2/models/oip-noredis"))


async def test_kafka_down_is_503_within_the_deadline(stack: FleetSettings) -> None:
    settings = GatewaySettings(models=["oip-nokafka"], kafka_bootstrap=DEAD_KAFKA)
    producer = AIOKafkaProducer(bootstrap_servers=DEAD_KAFKA)
    try:
        async with in_process(settings, FleetClient(settings, producer=producer)) as http:
            started = time.monotonic()
            response = await http.post("/v2/models/oip-nokafka/infer", json=body(timeout_us=3_000_000))
            assert time.monotonic() - started < 3.5
            assert_unavailable(response)
    finally:
        await producer.stop()
