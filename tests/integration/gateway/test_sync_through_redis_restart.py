"""Synchronous callers through a real restart of the stack's Redis, under load: a caller whose
deadline outlives the outage gets its answer (never a 5xx); keys verified before the outage keep
working (gateway/auth.py OutageGrace), requests go to Kafka meanwhile, and the reply reader reads
what the worker delivered once Redis is back."""

import asyncio
from collections import Counter

from common.settings import FleetSettings
from gateway.settings import GatewaySettings
from tests.integration.conftest import MODEL
from tests.integration.gateway.gateway_harness import in_process
from tests.integration.stack_nodes import redis_stopped

CALLERS = 120
SPREAD_S = 0.025  # one caller every 25 ms: they arrive before, during and after the outage
OUTAGE_S = 1.5
DEADLINE_MS = 30_000  # far beyond the restart


async def test_sync_callers_whose_deadline_outlives_a_redis_restart_all_get_their_answer(
        stack: FleetSettings, serve) -> None:  # type: ignore[no-untyped-def]
    settings = GatewaySettings(models=[MODEL])  # keys in the stack's Redis: no keys file to lean on
    async with serve(), in_process(settings) as http:
        warm = await http.post(f"/v1/models/{MODEL}/infer", json={"text": "warm up", "timeout_ms": DEADLINE_MS})
        assert warm.status_code == 200, warm.text

        async def caller(index: int) -> int:
            await asyncio.sleep(index * SPREAD_S)
            answer = await http.post(f"/v1/models/{MODEL}/infer",
                                     json={"text": f"through the restart {index}", "timeout_ms": DEADLINE_MS})
            assert answer.status_code != 200 or answer.json()["id"], answer.text
            return answer.status_code

        callers = [asyncio.create_task(caller(index)) for index in range(CALLERS)]
        await asyncio.sleep(0.5)
        async with redis_stopped():
            await asyncio.sleep(OUTAGE_S)
        statuses = Counter(await asyncio.gather(*callers))
    print(f"statuses through the Redis restart: {dict(statuses)}")
    assert statuses == Counter({200: CALLERS})
