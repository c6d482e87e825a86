"""Debug trace mode (seed §4.5): record chosen requests, redacted, to `fleet.trace`.

A request is recorded when it sets `debug`, or while an operator's switch is on for its
model or tenant (`fleet debug on <model> --minutes 5`). A switch is a Redis key with a
TTL, so it turns itself off when its time is up even if nobody remembers to. Workers
re-read the switches at most once a second; off, tracing costs one GET per second.
"""

import asyncio
import logging
import time

from aiokafka import AIOKafkaProducer

from common.redis_cluster import AnyRedis
from common.logs import LogThrottle
from schemas.names import TRACE_TOPIC, debug_key
from schemas.wire import TraceRecord
from workers.delivery.sink import Outcome
from workers.observability.redaction import Redactor

REFRESH_S = 1.0
log = logging.getLogger(__name__)


class DebugTracer:
    def __init__(self, redis: AnyRedis, producer: AIOKafkaProducer, model: str, redactor: Redactor,
                 *, refresh_s: float = REFRESH_S) -> None:
        self._redis = redis
        self._producer = producer
        self._model = model
        self._redact = redactor
        self._refresh_s = refresh_s
        self._switches: dict[str | None, tuple[bool, float]] = {}  # tenant (None: whole model) -> (on, read at)
        self.recorded = 0
        self._errors = LogThrottle(log)

    async def record(self, outcomes: list[Outcome]) -> None:
        """Trace the outcomes a switch or flag asks for. Tracing is best effort: a Redis or Kafka
        failure here is logged (throttled), never passed to the delivery stage."""
        try:
            reasons = await self._reasons(outcomes)
            chosen = [(outcome, reason) for outcome, reason in zip(outcomes, reasons, strict=True)
                      if reason is not None and outcome.request is not None]
            if not chosen:
                return
            # Redaction is linear and bounded, but still CPU: keep it off the event loop.
            traces = await asyncio.to_thread(self._traces, chosen)
            futures = [await self._producer.send(TRACE_TOPIC, trace.encode(), key=trace.id.encode())
                       for trace in traces]
            await asyncio.gather(*futures)
            self.recorded += len(futures)
        except Exception as exc:
            self._errors.log(logging.WARNING, "trace", "debug traces not written: %s: %s", type(exc).__name__, exc)

    def _traces(self, chosen: list[tuple[Outcome, str]]) -> list[TraceRecord]:
        traces = []
        for outcome, reason in chosen:
            assert outcome.request is not None
            result = outcome.result
            error = result.error.model_copy(update={"message": self._redact(result.error.message)}) \
                if result.error is not None else None
            tenant = self._redact(outcome.request.tenant) if outcome.request.tenant else None
            traces.append(TraceRecord(id=result.id, model=result.model, version=result.version, tenant=tenant,
                                      input=self._redact(str(outcome.request.inputs.get("text"))),
                                      status=result.status, outputs=result.outputs, error=error,
                                      batch_size=result.batch_size, timings=result.timings, worker=result.worker,
                                      reason=reason))
        return traces

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
