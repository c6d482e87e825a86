"""The HTTP gateway: validates, routes and waits. It never runs a model.

Routes (OpenAPI at /docs):
  POST /v1/models/{model}/infer     publish and await the result (504 with the id on timeout)
  POST /v1/models/{model}/requests  publish and return 202 with the id
  GET  /v1/results/{request_id}     the result, 404 until it is ready and after it expires
  GET  /healthz  /readyz  /metrics
"""

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import FastAPI, HTTPException, Path, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from pydantic import BaseModel, Field

from gateway.client import FleetClient, InferenceTimeout, RequestOptions
from gateway.limits import BodyLimit
from gateway.settings import GatewaySettings
from schemas.wire import ReplyTo, RequestId, Result, Status

READY_TIMEOUT_S = 2.0


class InferBody(BaseModel):
    text: str = Field(description="Input text")
    params: dict[str, Any] = Field(default_factory=dict)
    version: str | None = Field(None, description="Pin a model version")
    timeout_ms: int | None = Field(None, gt=0, le=600_000, description="Deadline from now; default from settings")
    priority: int = Field(0, ge=0, le=9)
    tenant: str | None = Field(None, max_length=128)
    results_topic: str | None = Field(None, description="Also produce the result to this Kafka topic (async submit)")


class Accepted(BaseModel):
    id: str
    result_url: str


class GatewayMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("fleet_gateway_requests", "HTTP requests by route and status code",
                                ["route", "code"], registry=self.registry)
        self.latency = Histogram("fleet_gateway_infer_seconds", "Sync infer, receive to response", ["model"],
                                 buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
                                 registry=self.registry)
        self.rule_answers = Counter("fleet_gateway_rule_answers", "Degraded answers from the rule-based fallback "
                                    "because no worker was alive", ["model"], registry=self.registry)
        self.stage = Histogram("fleet_gateway_stage_seconds", "Sync infer stages seen by the gateway: produce "
                               "(publish until Kafka acks), end_to_end (publish until the reply)", ["model", "stage"],
                               buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
                               registry=self.registry)


def rule_answer(request_id: str, model: str, outputs: dict[str, Any], elapsed_ms: float) -> dict[str, Any]:
    """The configured safe answer, marked degraded and computed by 'rules' (seed §3.4)."""
    result = Result(id=request_id, model=model, version="rules", status=Status.degraded, outputs=outputs,
                    device="rules", worker="gateway", timings={"gateway_ms": elapsed_ms})
    return result.model_dump(mode="json")


def create_app(settings: GatewaySettings, *, client: FleetClient | None = None) -> FastAPI:
    fleet = client if client is not None else FleetClient(settings)
    metrics = GatewayMetrics()

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await fleet.start()
        try:
            yield
        finally:
            await fleet.stop()

    app = FastAPI(title="Inference fleet gateway", version="1", lifespan=lifespan)

    def checked(model: str, body: InferBody) -> RequestOptions:
        if model not in settings.models:
            raise HTTPException(404, f"unknown model {model!r}; this gateway serves {sorted(settings.models)}")
        if len(body.text) > settings.max_text_chars:
            raise HTTPException(422, f"text: {len(body.text)} characters is over the limit of {settings.max_text_chars}")
        return RequestOptions(version=body.version, params=body.params, priority=body.priority, tenant=body.tenant)

    def timeout_of(body: InferBody) -> float:
        return body.timeout_ms / 1000 if body.timeout_ms else settings.default_timeout_s

    @app.middleware("http")
    async def count(request: Request, call_next: Any) -> Response:
        response: Response = await call_next(request)
        route = request.scope.get("route")
        metrics.requests.labels(route=getattr(route, "path", "unmatched"), code=str(response.status_code)).inc()
        return response

    @app.post("/v1/models/{model}/infer", summary="Infer and wait for the result",
              responses={404: {"description": "unknown model"}, 413: {"description": "body too large"},
                         422: {"description": "invalid input"}, 504: {"description": "deadline passed; body has the id"}})
    async def infer(model: str, body: InferBody) -> Any:
        options = checked(model, body)
        started = time.perf_counter()
        rule = settings.rule_fallbacks.get(model) if settings.rule_fallback_enabled else None
        timeout = timeout_of(body)
        try:
            # With a rule to fall back on, stop waiting a little before the deadline to use it.
            wait = timeout * (1 - settings.rule_fallback_margin) if rule is not None else timeout
            result = await fleet.infer(model, body.text, timeout=wait, options=options)
        except InferenceTimeout as exc:
            if rule is not None and (await fleet.router.route(model, fresh=True)).workers_alive == 0:
                metrics.rule_answers.labels(model=model).inc()
                return rule_answer(exc.request_id, model, rule, (time.perf_counter() - started) * 1000)
            return JSONResponse({"detail": str(exc), "id": exc.request_id}, status_code=504)
        elapsed = time.perf_counter() - started
        metrics.latency.labels(model=model).observe(elapsed)
        for stage in ("produce", "end_to_end"):
            metrics.stage.labels(model=model, stage=stage).observe(result.timings.get(f"{stage}_ms", 0.0) / 1000)
        answer = result.model_dump(mode="json")
        answer["timings"]["gateway_ms"] = elapsed * 1000
        return answer

    @app.post("/v1/models/{model}/requests", status_code=202, response_model=Accepted,
              summary="Submit without waiting; poll /v1/results/{id}")
    async def submit(model: str, body: InferBody) -> Accepted:
        options = checked(model, body)
        request = fleet.build_request(model, body.text, timeout=timeout_of(body),
                                      reply=ReplyTo(topic=body.results_topic), options=options)
        await fleet.publish(request)
        return Accepted(id=request.id, result_url=f"/v1/results/{request.id}")

    @app.get("/v1/results/{request_id}", summary="A result by request id",
             responses={404: {"description": "not ready yet, expired, or never submitted"}})
    async def result(request_id: Annotated[RequestId, Path(description="32 hex chars")]) -> Any:
        found = await fleet.result(request_id)
        if found is None:
            raise HTTPException(404, f"no result for {request_id} (not ready yet, expired, or unknown)")
        return found.model_dump(mode="json")

    @app.get("/healthz", summary="The process is alive")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", summary="Kafka and Redis answer")
    async def readyz() -> JSONResponse:
        checks = {"redis": await _answers(fleet.redis.ping()),
                  "kafka": await _answers(fleet.producer.client.fetch_all_metadata())}
        ready = all(checks.values())
        return JSONResponse({"ready": ready, "checks": checks}, status_code=200 if ready else 503)

    @app.get("/metrics", summary="Prometheus metrics")
    async def prometheus() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    return app


async def _answers(check: Any) -> bool:
    try:
        await asyncio.wait_for(check, READY_TIMEOUT_S)
        return True
    except Exception:
        return False
