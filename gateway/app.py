"""The HTTP gateway: validates, routes and waits. It never runs a model.

Routes (OpenAPI at /docs):
  POST /v1/models/{model}/infer     publish and await the result (504 with the id on timeout)
  POST /v1/models/{model}/requests  publish and return 202 with the id
  GET  /v1/results/{request_id}     the result, to its own tenant only; 404 until it is ready, after it
                                    expires, and for every other tenant
  /v1/batches                       batch jobs: upload a JSONL file, status, output, errors, cancel
                                    (gateway/batch_routes.py)
  GET  /healthz  /readyz            open to all: probes
  GET  /docs  /openapi.json         open to all: the API's documentation (gateway/docs_page.py)
  GET  /metrics                     only with a key of a tenant in `metrics_tenants`

Every request but the probes and the docs meets one admission (gateway/admission.py): the API key,
the tenant, its quota, the in-flight bound and the body limit, in that order, with one set of
refusals (gateway/refusals.py). The tenant comes from the key, never from the body. The entry points
share that admission and its state: the fast path (gateway/fast_routes.py) for the two model routes,
which carry nearly all the traffic; one middleware for the routes FastAPI serves
(gateway/http_admission.py), FastAPI documenting the model routes too; the Open Inference Protocol's
REST routes (gateway/oip/rest.py) and its gRPC service (gateway/oip/grpc_server.py). After admission,
the model routes give the same answers on either path (gateway/model_requests.py): bad input is a 4xx
naming the field (gateway/body.py), a Kafka or Redis outage 503 with Retry-After
(gateway/responses.py).
"""

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Path, Request, Security
from fastapi.responses import JSONResponse, Response
from fastapi.security import APIKeyHeader, HTTPBearer
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel
from starlette.types import Receive, Scope, Send

from common.process import cancel_within
from gateway.admission import Admission, Door
from gateway.auth import Caller, KeyDirectory, caller_of
from gateway.batch_jobs import BatchJobs
from gateway.batch_routes import batch_routes
from gateway.body import InferBody
from gateway.catalog import ServedModels
from gateway.client import FleetClient
from gateway.docs_page import OPENAPI_PATH, install_docs
from gateway.fast_routes import FastRoutes, fast_route
from gateway.http_admission import AdmitHttp
from gateway.limits import InFlight
from gateway.metrics import GatewayMetrics
from gateway.oip.grpc_server import GrpcServer
from gateway.oip.openapi import install_openapi
from gateway.oip.rest import OipRoutes, is_oip
from gateway.oip.service import OipService
from gateway.model_requests import INFER_ROUTE, SUBMIT_ROUTE, ModelRequests
from gateway.quotas import QuotaBook
from gateway.tenant_usage import UsageTally, publish_usage
from gateway.readiness import Readiness
from gateway.responses import InternalErrors, Outcomes, SafeJSONResponse, install_error_handlers
from gateway.settings import GatewaySettings
from schemas.wire import RequestId

__all__ = ["GatewayApp", "GatewayMetrics", "create_app", "gateway_client"]

log = logging.getLogger("gateway")

READY_TIMEOUT_S = 2.0
# Documents the credentials in OpenAPI; admission (gateway/http_admission.py) checks them before any route runs.
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


class GatewayApp(FastAPI):
    """FastAPI, with the fast path in front of all it and Starlette wrap a request in (their
    middlewares, error layers and telemetry checks cost as much again as the fast path itself)."""

    fast_routes: FastRoutes | None = None
    oip_routes: OipRoutes | None = None
    grpc: GrpcServer | None = None  # served beside the app, on its own port, within its lifespan

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.oip_routes is not None and is_oip(scope):
            await self.oip_routes(scope, receive, send)
            return
        if self.fast_routes is not None and (matched := fast_route(scope)) is not None:
            await self.fast_routes.answer(scope, receive, send, *matched)
            return
        await super().__call__(scope, receive, send)


def gateway_client(settings: GatewaySettings) -> FleetClient:
    """A client whose pending replies are bounded by the gateway's in-flight cap."""
    return FleetClient(settings.model_copy(update={"max_waits": min(settings.max_waits, settings.max_in_flight)}))


def _lifespan(settings: GatewaySettings, fleet: FleetClient, metrics: GatewayMetrics, grpc: GrpcServer, *,
              auth_on: bool, usage: UsageTally, models: ServedModels) -> Callable[[FastAPI],
                                                                                   AbstractAsyncContextManager[None]]:
    """Start the client and the gRPC server with the app; stop them, bounded, with it."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if not auth_on:
            log.warning("AUTHENTICATION IS OFF (FLEET_AUTH_REQUIRED=false): anyone who reaches this gateway may "
                        "infer, submit and read every result")
        await fleet.start()
        await grpc.start()  # nothing without FLEET_GRPC_PORT
        following = (asyncio.create_task(metrics.follow_reader(lambda: _reader_down(fleet)))
                     if metrics.multiprocess else None)
        publishing = asyncio.create_task(publish_usage(lambda: fleet.redis, usage, _rps_of(settings)))
        catalogue = asyncio.create_task(models.follow())
        try:
            yield
        finally:
            await cancel_within((publishing, catalogue), settings.shutdown_grace_s / 4)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(settings.shutdown_grace_s / 4):
                    await models.leave()
            if following is not None:
                following.cancel()
                await asyncio.gather(following, return_exceptions=True)
            await grpc.stop(settings.shutdown_grace_s / 4)
            # A producer flushing into a dead Kafka must not hold the process past its grace period.
            try:
                async with asyncio.timeout(settings.shutdown_grace_s / 2):
                    await fleet.stop()
            except TimeoutError:
                pass

    return lifespan


def _rps_of(settings: GatewaySettings) -> Callable[[str], float]:
    return lambda tenant: settings.quota_of(tenant).rps or settings.tenant_rps


def create_app(settings: GatewaySettings, *, client: FleetClient | None = None) -> GatewayApp:
    fleet = client if client is not None else gateway_client(settings)
    metrics = GatewayMetrics()
    if not metrics.multiprocess:
        metrics.reader_up.set_function(lambda: 0.0 if _reader_down(fleet) else 1.0)

    directory = key_directory(settings, fleet)
    grpc = GrpcServer(settings)

    usage = UsageTally()
    models = ServedModels(settings.models, lambda: fleet.redis, poll_s=settings.catalog_poll_s)
    lifespan = _lifespan(settings, fleet, metrics, grpc, auth_on=directory is not None, usage=usage, models=models)

    admission = gateway_admission(settings, directory, metrics, usage)
    doors = gateway_doors(settings)
    internal_errors = InternalErrors(metrics.internal_errors, settings.retry_after_s)
    model_requests = ModelRequests(settings, fleet, metrics, models)

    # No trailing-slash redirect: Starlette takes its Location from the caller's Host (an open redirect).
    app = GatewayApp(title="Inference fleet gateway", version="1", lifespan=lifespan, docs_url=None, redoc_url=None,
                     openapi_url=OPENAPI_PATH, default_response_class=SafeJSONResponse, redirect_slashes=False)
    install_docs(app)  # Swagger UI from our own files: /docs works without internet (gateway/docs_page.py)
    app.include_router(model_routes(model_requests))
    app.include_router(ops_routes(fleet, metrics, auth_required=directory is not None))
    app.include_router(batch_routes(BatchJobs(fleet, settings), models))
    install_error_handlers(app, metrics.unavailable_of, settings.retry_after_s)
    # Added innermost first: a request meets Outcomes (counts, and answers a bug with 503), then admission.
    app.add_middleware(AdmitHttp, admission=admission, v1=doors.v1, metrics=doors.metrics, batches=doors.batches)
    app.add_middleware(Outcomes, requests=metrics.requests_of, internal_errors=internal_errors)
    if settings.fast_routes:
        app.fast_routes = FastRoutes(admission=admission, door=doors.v1, requests=model_requests, metrics=metrics,
                                     internal_errors=internal_errors, retry_after_s=settings.retry_after_s)
    oip = OipService(settings, fleet, metrics, models)
    app.oip_routes = OipRoutes(service=oip, admission=admission, door=doors.v2, metrics=metrics,
                               internal_errors=internal_errors)
    grpc.serve(oip, admission, doors.v2)
    app.grpc = grpc
    install_openapi(app)
    return app


@dataclass(frozen=True)
class GatewayDoors:
    """The gateway's doors (gateway/admission.py `Door`): /v1, /v2 (REST and gRPC), /metrics."""

    v1: Door
    v2: Door
    metrics: Door
    batches: Door


def gateway_doors(settings: GatewaySettings) -> GatewayDoors:
    return GatewayDoors(
        v1=Door("v1", settings.max_body_bytes),
        v2=Door("v2", settings.oip_max_body_bytes),
        metrics=Door("metrics", settings.max_body_bytes, metered=False, tenants=frozenset(settings.metrics_tenants),
                     not_for="/metrics needs a key of a metrics tenant"),
        batches=Door("batches", settings.batch_max_file_bytes, streams_body=True))


def gateway_admission(settings: GatewaySettings, directory: KeyDirectory | None, metrics: GatewayMetrics,
                      usage: UsageTally) -> Admission:
    """The one admission of the process and its state, shared by every entry point."""
    quotas = QuotaBook(settings.quota_of, metrics.quota_rejections, retry_after_s=settings.retry_after_s, usage=usage)
    # One process reads its count when scraped; processes summed from files must write it as it changes.
    in_flight = InFlight(settings.max_in_flight, settings.retry_after_s,
                         metrics.in_flight if metrics.multiprocess else None)
    if not metrics.multiprocess:
        metrics.in_flight.set_function(lambda: in_flight.count)
    return Admission(directory, quotas=quotas, in_flight=in_flight, reserved=frozenset(settings.metrics_tenants),
                     reserved_for="this key may only read /metrics", retry_after_s=settings.retry_after_s,
                     failures=metrics.auth_failures, unavailable=metrics.unavailable)


def key_directory(settings: GatewaySettings, fleet: FleetClient) -> KeyDirectory | None:
    """Where keys are looked up; None when authentication is switched off."""
    if not settings.auth_required:
        return None
    return KeyDirectory(lambda: fleet.redis, cache_s=settings.auth_cache_s,
                        lookup_timeout_s=settings.auth_lookup_timeout_s, keys_file=settings.auth_keys_file,
                        outage_grace_s=settings.auth_outage_grace_s)


def model_routes(model_requests: ModelRequests) -> APIRouter:
    """The model routes as FastAPI serves them when the fast path is off, and as OpenAPI documents them."""
    routes = APIRouter(dependencies=KEY_SCHEMES)

    async def infer_body(model: str, request: Request) -> InferBody:
        return await model_requests.body(model, await request.body(), request.headers.get("content-type"),
                                         caller_of(request))

    Body = Annotated[InferBody, Depends(infer_body)]

    @routes.post(INFER_ROUTE, summary="Infer and wait for the result", openapi_extra=BODY_DOC,
                 responses={**INPUT_ERRORS, 504: {"description": "deadline passed; body has the id"}})
    async def infer(model: str, body: Body) -> Any:
        reply = await model_requests.infer(model, body)
        return Response(reply.body, status_code=reply.status, media_type="application/json")

    @routes.post(SUBMIT_ROUTE, status_code=202, response_model=Accepted, openapi_extra=BODY_DOC,
                 summary="Submit without waiting; poll /v1/results/{id}",
                 responses={**INPUT_ERRORS, 504: {"description": "deadline passed before Kafka acknowledged; body has "
                                                                "the id"}})
    async def submit(model: str, body: Body) -> Any:
        reply = await model_requests.submit(model, body)
        return Response(reply.body, status_code=reply.status, media_type="application/json")

    return routes


def ops_routes(fleet: FleetClient, metrics: GatewayMetrics, *, auth_required: bool) -> APIRouter:
    routes = APIRouter()
    readiness = Readiness({"redis": lambda: fleet.redis.ping(),
                           "kafka": lambda: fleet.producer.client.fetch_all_metadata()}, timeout_s=READY_TIMEOUT_S)

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
        return found.as_floats().model_dump(mode="json")  # a pipeline may have asked for f32le

    @routes.get("/healthz", summary="The process is alive")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @routes.get("/readyz", summary="Kafka and Redis answer and the reply reader reads")
    async def readyz() -> JSONResponse:
        checks = await readiness.checks()
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
