"""With Kafka or Redis away, the console says which is down and what it cannot show, keeps the
rest, and never shows a stack trace. The console runs in-process against the real Redis (or a
closed port) and a Kafka address nothing listens on."""

from __future__ import annotations

import asyncio
import time

from fastapi.testclient import TestClient

from common.auth_keys import create_key
from common.clients import redis_client
from common.settings import FleetSettings
from fleet.console.app import create_app
from fleet.console.settings import ConsoleSettings
from schemas.wire import now_ms
from tests.integration.fleet.console.conftest import free_port
from workers.health.heartbeat import Heartbeat

TENANT = "console-outage-ops"


async def key_and_beat(settings: FleetSettings) -> str:
    redis = redis_client(settings)
    try:
        await Heartbeat(redis, model="console-outage-model", worker_id="console-outage-w", role="primary",
                        device="cpu", ttl_s=10).beat("healthy", "", "v1", 0)
        return (await create_key(redis, TENANT, now_ms=now_ms())).key
    finally:
        await redis.aclose()


def test_kafka_down_is_said_in_words_and_the_workers_still_show(stack: FleetSettings) -> None:
    key = asyncio.run(key_and_beat(stack))
    settings = ConsoleSettings(console_tenants=f"{TENANT}:read", kafka_bootstrap=f"127.0.0.1:{free_port()}",
                               console_lag_sample_s=0.2)
    with TestClient(create_app(settings), follow_redirects=False) as console:
        assert console.post("/login", data={"key": key}).status_code == 303
        give_up = time.monotonic() + 60
        while "does not answer" not in (page := console.get("/").text) and time.monotonic() < give_up:
            time.sleep(0.5)
        assert "Kafka at 127.0.0.1:" in page and "consumer-group lag and its history cannot be shown" in page
        assert "console-outage-w" in page  # Redis still answers: the workers are there
        letters = console.get("/dlq")
        assert letters.status_code == 200 and "Kafka does not answer" in letters.text
        assert "dead letters cannot be shown" in letters.text
        for answer in (page, letters.text):
            assert "Traceback" not in answer and 'File "' not in answer


def test_redis_down_is_said_on_the_login_page(stack: FleetSettings) -> None:
    settings = ConsoleSettings(console_tenants=f"{TENANT}:read", redis_url=f"redis://127.0.0.1:{free_port()}/0")
    with TestClient(create_app(settings, sample_lag=False), follow_redirects=False) as console:
        refused = console.post("/login", data={"key": "fk_" + "0" * 40})
        assert refused.status_code == 503 and refused.headers["retry-after"]  # an outage, not the caller's mistake
        assert "Redis does not answer" in refused.text and "Traceback" not in refused.text
        assert console.get("/").status_code == 303  # and nothing else for a caller without a key
        flood = console.post("/login", content=b"key=" + b"x" * 70_000,
                             headers={"content-type": "application/x-www-form-urlencoded"})
        assert flood.status_code == 413  # a form is read no further than its bound
