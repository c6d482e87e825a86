"""Back-pressure: a cap on requests in flight (429 with Retry-After), and pending replies
bounded by it. The app in-process over the real Kafka and Redis."""

import asyncio
import logging

import httpx
import pytest
from redis.asyncio import Redis

from gateway.app import gateway_client
from gateway.errors import Overloaded
from gateway.settings import GatewaySettings
from gateway.waiter import ReplyWaiter
from tests.integration.gateway.gateway_harness import in_process

MODEL = "gw-hardening-limits"  # served by no worker: its waits last until their deadline


async def test_requests_beyond_the_in_flight_cap_are_429(stack) -> None:  # type: ignore[no-untyped-def]
    settings = GatewaySettings(models=[MODEL], max_in_flight=3, retry_after_s=2)
    async with in_process(settings) as http:
        waits = [asyncio.create_task(http.post(f"/v1/models/{MODEL}/infer", json={"text": f"wait {i}",
                                                                                  "timeout_ms": 1500}))
                 for i in range(3)]
        await asyncio.sleep(0.5)
        refused = await http.post(f"/v1/models/{MODEL}/infer", json={"text": "one too many"})
        lookup = await http.get(f"/v1/results/{'ab' * 16}")
        health = await http.get("/healthz")  # not capped: probes must get through
        metrics = await http.metrics()
        answered = await asyncio.gather(*waits)
        after = await http.get(f"/v1/results/{'ab' * 16}")
    assert refused.status_code == 429 and refused.headers["retry-after"] == "2"
    assert "over 3 requests in flight" in refused.json()["detail"]
    assert lookup.status_code == 429 and health.status_code == 200
    assert "fleet_gateway_in_flight 3.0" in metrics
    assert [r.status_code for r in answered] == [504, 504, 504]
    assert after.status_code == 404, "capacity comes back when the waits end"


def test_the_gateway_client_bounds_pending_replies_by_the_in_flight_cap() -> None:
    assert gateway_client(GatewaySettings(max_in_flight=7)).settings.max_waits == 7


async def test_waits_beyond_the_bound_raise_overloaded(stack) -> None:  # type: ignore[no-untyped-def]
    redis = Redis.from_url(stack.redis_url)
    waiter = ReplyWaiter(redis, max_pending=2)
    waiter.start()
    try:
        for _ in range(50):
            if waiter.down_reason is None:
                break
            await asyncio.sleep(0.05)
        waiter.expect("a" * 32)
        waiter.expect("b" * 32)
        waiter.expect("b" * 32)  # the same id again takes no new place
        with pytest.raises(Overloaded):
            waiter.expect("c" * 32)
        waiter.forget("a" * 32)
        waiter.expect("c" * 32)
    finally:
        await waiter.stop()
        await redis.aclose()


class Broken:
    """Stands in for a bug: a lookup that raises what no handler expects."""

    def __init__(self, fleet: object) -> None:
        self._fleet = fleet

    def __getattr__(self, name: str) -> object:
        return getattr(self._fleet, name)

    async def result(self, request_id: str) -> None:
        raise KeyError(f"bug looking up {request_id}")


async def test_an_unexpected_exception_is_a_logged_503_never_a_bare_500(stack, caplog) -> None:  # type: ignore[no-untyped-def]
    settings = GatewaySettings(models=[MODEL])
    client = gateway_client(settings)
    async with in_process(settings, Broken(client)) as http:  # type: ignore[arg-type]
        response = await http.get(f"/v1/results/{'ab' * 16}")
        metrics = await http.metrics()
    assert response.status_code == 503 and response.headers["retry-after"] == "1"
    body = response.json()
    assert body["detail"] == "internal error, retry" and len(body["error_id"]) == 16
    logged = [r for r in caplog.records if r.levelno == logging.ERROR and getattr(r, "request_id", None) == body["error_id"]]
    assert logged and "KeyError" in (logged[0].exc_text or "")
    assert "fleet_gateway_internal_errors_total 1.0" in metrics
    assert 'fleet_gateway_requests_total{code="503",route="/v1/results/{request_id}"} 1.0' in metrics
