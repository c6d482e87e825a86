"""The HTTP gateway: validates, routes and waits. It never runs a model.

Routes (OpenAPI at /docs):
  POST /v1/models/{model}/infer     publish and await the result (504 with the id on timeout)
  POST /v1/models/{model}/requests  publish and return 202 with the id
  GET  /v1/results/{request_id}     the result, to its own tenant only; 404 until it is ready, after it
                                    expires, and for every other tenant
  GET  /healthz  /readyz            open to all: probes
  GET  /metrics                     only with a key of a tenant in `metrics_tenants`

Every route but the probes needs an API key (gateway/auth.py); the tenant comes from the key,
never from the body. Bad input is a 4xx naming the field (gateway/body.py); a Kafka or Redis
outage is 503 with Retry-After; too many requests in flight, in the process or of one tenant, 429
(gateway/responses.py, gateway/limits.py, gateway/quotas.py).
"""

import asyncio
import logging
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Path, Request, Security
from fastapi.responses import JSONResponse, Response
from fastapi.security import APIKeyHeader, HTTPBearer
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
from pydantic import BaseModel

from gateway.auth import Authenticate, Caller, KeyDirectory, caller_of
from gateway.body import BodyRules, InferBody, invalid, parse_infer_body
from gateway.client import FleetClient, InferenceTimeout, RequestOptions
from gateway.limits import BodyLimit, InFlightLimit
from gateway.quotas import TenantQuotas
from gateway.responses import Outcomes, SafeJSONResponse, install_error_handlers
from gateway.settings import GatewaySettings
from schemas.wire import ReplyTo, RequestId, Result, Status

log = logging.getLogger("gateway")

READY_TIMEOUT_S = 2.0
# Documents the credentials in OpenAPI; gateway/auth.py checks them before any route runs.
KEY_SCHEMES = [Security(HTTPBearer(auto_error=False)), Security(APIKeyHeader(name="X-API-Key", auto_error=False))]
BODY_DOC = {"requestBody": {"required": True, "content": {"application/json": {"schema": InferBody.model_json_schema()}}}}
INPUT_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"description": "body is not UTF-8 JSON"}, 401: {"description": "missing, unknown or revoked API key"},
    404: {"description": "unknown model"},
    413: {"description": "body too large"}, 415: {"description": "not application/json"},
    422: {"description": "invalid input; the message names the field"},
    429: {"description": "too many requests in flight, or over the tenant's quota; see Retry-After"},
    503: {"description": "Kafka or Redis unavailable; see Retry-After"}}


class Accepted(BaseModel):
    id: str
    result_url: str


class GatewayMetrics:
    def __init__(self) -> None:
        # Set when `--workers N` runs several processes: their values live in files and any process sums them.
        self.multiprocess = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
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
        self.unavailable = Counter("fleet_gateway_unavailable", "503 answers because a dependency did not answer",
                                   ["dependency"], registry=self.registry)
        self.internal_errors = Counter("fleet_gateway_internal_errors", "Unexpected exceptions answered with 503 "
                                       "(each logged with its error id)", registry=self.registry)
        self.in_flight = Gauge("fleet_gateway_in_flight", "/v1 requests being answered now", registry=self.registry,
                               multiprocess_mode="livesum")
        self.auth_failures = Counter("fleet_gateway_auth_failures", "Requests refused for their API key: missing, "
                                     "invalid (unknown or revoked), forbidden (wrong kind of key)", ["reason"],
                                     registry=self.registry)
        self.quota_rejections = Counter("fleet_gateway_quota_rejections", "429 answers of a tenant over its quota: "
                                        "rate (requests per second) or waits (in flight)", ["tenant", "kind"],
                                        registry=self.registry)
        self.reader_up = Gauge("fleet_gateway_reply_reader_up", "1 while the reply reader reads from Redis "
                               "(of every gateway process)", registry=self.registry, multiprocess_mode="min")

    def exposition(self) -> bytes:
        if not self.multiprocess:
            return generate_latest(self.registry)
        summed = CollectorRegistry()
        MultiProcessCollector(summed)
        return generate_latest(summed)

    async def follow_reader(self, fleet: FleetClient, every_s: float = 0.5) -> None:
        """Keep this process's reader gauge current, for the processes that sum it from files
        (a function gauge is read only by the process that is scraped)."""
        while True:
            self.reader_up.set(0.0 if _reader_down(fleet) else 1.0)
            await asyncio.sleep(every_s)


def rule_answer(request_id: str, model: str, outputs: dict[str, Any], elapsed_ms: float) -> dict[str, Any]:
    """The configured safe answer, marked degraded and computed by 'rules' (seed §3.4)."""
    result = Result(id=request_id, model=model, version="rules", status=Status.degraded, outputs=outputs,
                    device="rules", worker="gateway", timings={"gateway_ms": elapsed_ms})
    return result.model_dump(mode="json")


def gateway_client(settings: GatewaySettings) -> FleetClient:
    """A client whose pending replies are bounded by the gateway's in-flight cap."""
    return FleetClient(settings.model_copy(update={"max_waits": min(settings.max_waits, settings.max_in_flight)}))


def create_app(settings: GatewaySettings, *, client: FleetClient | None = None) -> FastAPI:
    fleet = client if client is not None else gateway_client(settings)
    metrics = GatewayMetrics()
    if not metrics.multiprocess:
        metrics.reader_up.set_function(lambda: 0.0 if _reader_down(fleet) else 1.0)

    directory = key_directory(settings, fleet)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if directory is None:
            log.warning("AUTHENTICATION IS OFF (FLEET_AUTH_REQUIRED=false): anyone who reaches this gateway may "
                        "infer, submit and read every result")
        await fleet.start()
        following = asyncio.create_task(metrics.follow_reader(fleet)) if metrics.multiprocess else None
        try:
            yield
        finally:
            if following is not None:
                following.cancel()
                await asyncio.gather(following, return_exceptions=True)
            # A producer flushing into a dead Kafka must not hold the process past its grace period.
            try:
                await asyncio.wait_for(fleet.stop(), settings.shutdown_grace_s / 2)
            except TimeoutError:
                pass

    app = FastAPI(title="Inference fleet gateway", version="1", lifespan=lifespan,
                  default_response_class=SafeJSONResponse)
    app.include_router(model_routes(settings, fleet, metrics))
    app.include_router(ops_routes(fleet, metrics, auth_required=directory is not None))
    install_error_handlers(app, metrics.unavailable, settings.retry_after_s)
    # Added innermost first: a request meets Outcomes, Authenticate, TenantQuotas, InFlightLimit, BodyLimit.
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(InFlightLimit, max_in_flight=settings.max_in_flight, retry_after_s=settings.retry_after_s,
                       gauge=metrics.in_flight)
    app.add_middleware(TenantQuotas, quota_of=settings.quota_of, rejections=metrics.quota_rejections,
                       retry_after_s=settings.retry_after_s)
    app.add_middleware(Authenticate, directory=directory, metrics_tenants=frozenset(settings.metrics_tenants),
                       failures=metrics.auth_failures, unavailable=metrics.unavailable,
                       retry_after_s=settings.retry_after_s)
    app.add_middleware(Outcomes, requests=metrics.requests, internal_errors=metrics.internal_errors,
                       retry_after_s=settings.retry_after_s)
    return app


def key_directory(settings: GatewaySettings, fleet: FleetClient) -> KeyDirectory | None:
    """Where keys are looked up; None when authentication is switched off."""
    if not settings.auth_required:
        return None
    return KeyDirectory(lambda: fleet.redis, cache_s=settings.auth_cache_s,
                        lookup_timeout_s=settings.auth_lookup_timeout_s, keys_file=settings.auth_keys_file)


def model_routes(settings: GatewaySettings, fleet: FleetClient, metrics: GatewayMetrics) -> APIRouter:
    routes = APIRouter(dependencies=KEY_SCHEMES)
    rules = BodyRules.of(settings)

    async def infer_body(model: str, request: Request) -> InferBody:
        if model not in settings.models:
            raise HTTPException(404, f"unknown model {model!r}; this gateway serves {sorted(settings.models)}")
        body = parse_infer_body(await request.body(), request.headers.get("content-type"), rules)
        caller = caller_of(request)
        if caller.tenant is not None:
            if body.tenant not in (None, caller.tenant):
                raise invalid((("tenant",), "differs from the tenant of your API key; leave it out"))
            body = body.model_copy(update={"tenant": caller.tenant})
        return body

    Body = Annotated[InferBody, Depends(infer_body)]

    def timeout_of(body: InferBody) -> float:
        return body.timeout_ms / 1000 if body.timeout_ms else settings.default_timeout_s

    def options_of(body: InferBody) -> RequestOptions:
        # body.tenant is the key's tenant here (infer_body put it there); the caller's own only with auth off.
        return RequestOptions(version=body.version, params=body.params, priority=body.priority, tenant=body.tenant)

    @routes.post("/v1/models/{model}/infer", summary="Infer and wait for the result", openapi_extra=BODY_DOC,
                 responses={**INPUT_ERRORS, 504: {"description": "deadline passed; body has the id"}})
    async def infer(model: str, body: Body) -> Any:
        started = time.perf_counter()
        rule = settings.rule_fallbacks.get(model) if settings.rule_fallback_enabled else None
        timeout = timeout_of(body)
        try:
            # With a rule to fall back on, stop waiting a little before the deadline to use it.
            wait = timeout * (1 - settings.rule_fallback_margin) if rule is not None else timeout
            result = await fleet.infer(model, body.text, timeout=wait, options=options_of(body))
        except InferenceTimeout as exc:
            if rule is not None and (await fleet.router.route(model, fresh=True)).workers_alive == 0:
                metrics.rule_answers.labels(model=model).inc()
                return rule_answer(exc.request_id, model, rule, (time.perf_counter() - started) * 1000)
            return SafeJSONResponse({"detail": str(exc), "id": exc.request_id}, status_code=504)
        elapsed = time.perf_counter() - started
        metrics.latency.labels(model=model).observe(elapsed)
        for stage in ("produce", "end_to_end"):
            metrics.stage.labels(model=model, stage=stage).observe(result.timings.get(f"{stage}_ms", 0.0) / 1000)
        answer = result.model_dump(mode="json")
        answer["timings"]["gateway_ms"] = elapsed * 1000
        return answer

    @routes.post("/v1/models/{model}/requests", status_code=202, response_model=Accepted, openapi_extra=BODY_DOC,
                 summary="Submit without waiting; poll /v1/results/{id}", responses=INPUT_ERRORS)
    async def submit(model: str, body: Body) -> Accepted:
        request = fleet.build_request(model, body.text, timeout=timeout_of(body),
                                      reply=ReplyTo(topic=body.results_topic), options=options_of(body))
        await fleet.publish(request)
        return Accepted(id=request.id, result_url=f"/v1/results/{request.id}")

    return routes


def ops_routes(fleet: FleetClient, metrics: GatewayMetrics, *, auth_required: bool) -> APIRouter:
    routes = APIRouter()

    @routes.get("/v1/results/{request_id}", summary="A result by request id", dependencies=KEY_SCHEMES,
                responses={401: {"description": "missing, unknown or revoked API key"},
                           404: {"description": "not ready yet, expired, never submitted, or another tenant's"},
                           503: {"description": "Redis unavailable; see Retry-After"}})
    async def result(request_id: Annotated[RequestId, Path(description="32 hex chars")],
                     caller: Annotated[Caller, Depends(caller_of)]) -> Any:
        found = await fleet.result(request_id)
        # Another tenant's result is answered exactly as a missing one: ids must not be probed.
        if found is None or (auth_required and found.tenant != caller.tenant):
            raise HTTPException(404, f"no result for {request_id} (not ready yet, expired, or unknown)")
        return found.model_dump(mode="json")

    @routes.get("/healthz", summary="The process is alive")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @routes.get("/readyz", summary="Kafka and Redis answer and the reply reader reads")
    async def readyz() -> JSONResponse:
        checks = {"redis": await _answers(fleet.redis.ping()),
                  "kafka": await _answers(fleet.producer.client.fetch_all_metadata())}
        reasons = {} if (down := _reader_down(fleet)) is None else {"reply_reader": down}
        checks["reply_reader"] = not reasons
        ready = all(checks.values())
        return SafeJSONResponse({"ready": ready, "checks": checks, "reasons": reasons,
                                 "auth": "required" if auth_required else "disabled"},
                                status_code=200 if ready else 503)

    @routes.get("/metrics", summary="Prometheus metrics (a key of a metrics tenant)", dependencies=KEY_SCHEMES)
    async def prometheus() -> Response:
        return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    return routes


def _reader_down(fleet: FleetClient) -> str | None:
    try:
        return fleet.waiter.down_reason
    except RuntimeError:
        return "client not started"


async def _answers(check: Any) -> bool:
    try:
        await asyncio.wait_for(check, READY_TIMEOUT_S)
        return True
    except Exception:
        return False
