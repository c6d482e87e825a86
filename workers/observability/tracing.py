"""Debug trace mode (seed §4.5): record chosen requests, redacted, to `fleet.trace`.

A request is recorded when it sets `debug`, or while an operator's switch is on for its
model or tenant (`fleet debug on <model> --minutes 5`). A switch is a Redis key with a
TTL, so it turns itself off when its time is up even if nobody remembers to. Workers
re-read the switches at most once a second; off, tracing costs one GET per second.
"""

import asyncio
import time

from aiokafka import AIOKafkaProducer
from redis.asyncio import Redis

from schemas.names import TRACE_TOPIC, debug_key
from schemas.wire import TraceRecord
from workers.delivery.sink import Outcome
from workers.observability.redaction import Redactor

REFRESH_S = 1.0


class DebugTracer:
    def __init__(self, redis: Redis, producer: AIOKafkaProducer, model: str, redactor: Redactor,
                 *, refresh_s: float = REFRESH_S) -> None:
        self._redis = redis
        self._producer = producer
        self._model = model
        self._redact = redactor
        self._refresh_s = refresh_s
        self._switches: dict[str | None, tuple[bool, float]] = {}  # tenant (None: whole model) -> (on, read at)
        self.recorded = 0

    async def record(self, outcomes: list[Outcome]) -> None:
        reasons = await self._reasons(outcomes)
        futures = []
        for outcome, reason in zip(outcomes, reasons, strict=True):
            if reason is None or outcome.request is None:
                continue
            text = outcome.request.inputs.get("text")
            result = outcome.result
            trace = TraceRecord(id=result.id, model=result.model, version=result.version,
                                tenant=outcome.request.tenant, input=self._redact(str(text)), status=result.status,
                                outputs=result.outputs, error=result.error, batch_size=result.batch_size,
                                timings=result.timings, worker=result.worker, reason=reason)
            futures.append(await self._producer.send(TRACE_TOPIC, trace.encode(), key=result.id.encode()))
        if futures:
            await asyncio.gather(*futures)
            self.recorded += len(futures)

    async def _reasons(self, outcomes: list[Outcome]) -> list[str | None]:
        tenants = {o.request.tenant for o in outcomes if o.request is not None and o.request.tenant}
        model_on = await self._is_on(None)
        tenant_on = {tenant for tenant in tenants if await self._is_on(tenant)}
        reasons: list[str | None] = []
        for outcome in outcomes:
            request = outcome.request
            if request is None:
                reasons.append(None)
            elif request.debug:
                reasons.append("request flag")
            elif model_on:
                reasons.append(f"debug on for model {self._model}")
            elif request.tenant in tenant_on:
                reasons.append(f"debug on for tenant {request.tenant}")
            else:
                reasons.append(None)
        return reasons

    async def _is_on(self, tenant: str | None) -> bool:
        cached = self._switches.get(tenant)
        now = time.monotonic()
        if cached is not None and now - cached[1] < self._refresh_s:
            return cached[0]
        on = bool(await self._redis.exists(debug_key(self._model, tenant)))
        self._switches[tenant] = (on, now)
        return on
