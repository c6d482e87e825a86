"""What POST /v1/models/{model}/infer and /v1/models/{model}/requests do once the caller is
admitted: read the body as the key's tenant, publish the request and, for infer, await its reply.

Both ways a request can take call this: the FastAPI routes (gateway/app.py, which also document
the routes in OpenAPI) and the fast path that serves them (gateway/fast_routes.py). Bad input and
outages are raised (HTTPException, RequestValidationError, FleetUnavailable, Overloaded) for
`gateway.responses.error_answer` to turn into the documented 4xx/503.
"""

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from fastapi import HTTPException

from common.model_cards import ModelCards
from gateway.auth import Caller
from gateway.catalog import CatalogueUnread, NotServed, ServedModels
from gateway.body import BodyRules, InferBody, invalid, parse_infer_body
from gateway.client import FleetClient, InferenceTimeout, RequestOptions
from gateway.errors import FleetUnavailable
from gateway.known_topics import KnownTopics, topic_exists
from gateway.metrics import GatewayMetrics
from gateway.responses import result_json, safe_json
from gateway.settings import GatewaySettings
from gateway.task_inputs import inputs_of
from schemas.wire import ReplyTo, Result, Status

INFER_ROUTE = "/v1/models/{model}/infer"
SUBMIT_ROUTE = "/v1/models/{model}/requests"
METADATA_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class Reply:
    """A route's answer: status and JSON bytes."""

    status: int
    body: bytes


def rule_answer(request_id: str, model: str, outputs: dict[str, Any], elapsed_ms: float) -> dict[str, Any]:
    """The configured safe answer, marked degraded and computed by 'rules' (seed §3.4)."""
    result = Result(id=request_id, model=model, version="rules", status=Status.degraded, outputs=outputs,
                    device="rules", worker="gateway", timings={"gateway_ms": elapsed_ms})
    return result.model_dump(mode="json")


class ModelRequests:
    def __init__(self, settings: GatewaySettings, fleet: FleetClient, metrics: GatewayMetrics,
                 models: ServedModels) -> None:
        self._settings = settings
        self._fleet = fleet
        self._metrics = metrics
        self._rules = BodyRules.of(settings)
        self._models = models
        self._topics = KnownTopics(self._cluster_topics, self._topic_exists)
        self._model_cards: ModelCards | None = None

    @property
    def _cards(self) -> ModelCards:
        """The model cards, read through the client's Redis (which exists once the client started)."""
        if self._model_cards is None:
            self._model_cards = ModelCards(self._fleet.redis)
        return self._model_cards

    async def body(self, model: str, raw: bytes, content_type: str | None, caller: Caller) -> InferBody:
        """The request body, checked, with the tenant of the caller's key in it."""
        await self._check(model)
        body = parse_infer_body(raw, content_type, self._rules)
        if body.version is not None:
            await self._check(model, body.version)
        if caller.tenant is not None:
            if body.tenant not in (None, caller.tenant):
                raise invalid((("tenant",), "differs from the tenant of your API key; leave it out"))
            body.tenant = caller.tenant  # the body was read for this request alone
        return body

    async def _check(self, model: str, version: str | None = None) -> None:
        try:
            await self._models.check(model, version)
        except NotServed as exc:
            raise HTTPException(404, str(exc)) from None
        except CatalogueUnread as exc:
            raise FleetUnavailable("redis", str(exc)) from None

    async def infer(self, model: str, body: InferBody) -> Reply:
        started = time.perf_counter()
        settings = self._settings
        rule = settings.rule_fallbacks.get(model) if settings.rule_fallback_enabled else None
        timeout = self._timeout_of(body)
        try:
            # With a rule to fall back on, stop waiting a little before the deadline to use it.
            wait = timeout * (1 - settings.rule_fallback_margin) if rule is not None else timeout
            inputs = await inputs_of(self._cards, model, body)
            exchange = await self._fleet.exchange(model, inputs, timeout=wait, options=self._options_of(body))
        except InferenceTimeout as exc:
            if rule is not None and (await self._fleet.router.route(model, fresh=True)).workers_alive == 0:
                self._metrics.rule_answers.labels(model=model).inc()
                answer = rule_answer(exc.request_id, model, rule, (time.perf_counter() - started) * 1000)
                return Reply(200, safe_json(answer))
            return Reply(504, safe_json({"detail": str(exc), "id": exc.request_id}))
        elapsed = time.perf_counter() - started
        metrics = self._metrics
        metrics.latency_of(model).observe(elapsed)
        timings = exchange.timings()
        metrics.stage_of(model, "produce").observe(timings.get("produce_ms", 0.0) / 1000)
        metrics.stage_of(model, "end_to_end").observe(timings.get("end_to_end_ms", 0.0) / 1000)
        timings["gateway_ms"] = elapsed * 1000
        return Reply(200, result_json(exchange.result, timings))

    async def submit(self, model: str, body: InferBody) -> Reply:
        if body.results_topic is not None and not await self._topics.exists(body.results_topic):
            raise invalid((("results_topic",), f"topic {body.results_topic!r} does not exist; results topics are "
                                               "created by the fleet's operators (fleet topics), not by requests"))
        inputs = await inputs_of(self._cards, model, body)
        request = self._fleet.build_request(model, inputs, timeout=self._timeout_of(body),
                                            reply=ReplyTo(topic=body.results_topic), options=self._options_of(body))
        try:
            await self._fleet.publish(request)
        except InferenceTimeout as exc:
            detail = f"the request's deadline passed before Kafka acknowledged it: {exc}"
            return Reply(504, safe_json({"detail": detail, "id": request.id}))
        return Reply(202, safe_json({"id": request.id, "result_url": f"/v1/results/{request.id}"}))

    async def _cluster_topics(self) -> set[str]:
        async with asyncio.timeout(METADATA_TIMEOUT_S):
            metadata = await self._fleet.producer.client.fetch_all_metadata()
        return set(metadata.topics())

    async def _topic_exists(self, name: str) -> bool:
        async with asyncio.timeout(METADATA_TIMEOUT_S):
            return await topic_exists(self._fleet.producer.client, name)

    def _timeout_of(self, body: InferBody) -> float:
        return body.timeout_ms / 1000 if body.timeout_ms else self._settings.default_timeout_s

    @staticmethod
    def _options_of(body: InferBody) -> RequestOptions:
        # body.tenant is the key's tenant here (body() put it there); the caller's own only with auth off.
        return RequestOptions(version=body.version, params=body.params, priority=body.priority, tenant=body.tenant)
