"""`inference.GRPCInferenceService` (KServe v2 gRPC: ServerLive, ServerReady, ModelReady,
ServerMetadata, ModelMetadata, ModelInfer) on FLEET_GRPC_PORT, on the gateway's own event loop:
the same fleet client, keys, quotas and in-flight cap as REST, through the same `OipService`.

The messages are those of tritonclient's `service_pb2` (NVIDIA's maintained build of Triton's
grpc_service.proto, a superset of KServe's grpc_predict_v2.proto with the same field numbers):
no generated code of ours to keep in step with protobuf, and exactly what tritonclient.grpc sends.
The API key comes from the call's metadata (`authorization: Bearer <key>` or `x-api-key`)."""

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from tritonclient.grpc import service_pb2 as pb

from gateway.answers import Refusal
from gateway.auth import Caller, Gatekeeper
from gateway.limits import InFlight
from gateway.oip.errors import Failure, OipError
from gateway.oip.grpc_calls import call_of, response_of
from gateway.oip.rest import TenantRows, refusal_error
from gateway.oip.service import OipService, server_metadata
from gateway.oip.settings import OipSettings
from gateway.quotas import QuotaBook

log = logging.getLogger(__name__)

SERVICE = "inference.GRPCInferenceService"
GRPC_PATH = "/v2/grpc"
Handler = Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]


class Servicer:
    def __init__(self, service: OipService, gatekeeper: Gatekeeper, quotas: QuotaBook, in_flight: InFlight) -> None:
        self._service = service
        self._gatekeeper = gatekeeper
        self._quotas = quotas
        self._in_flight = in_flight

    async def server_live(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return pb.ServerLiveResponse(live=True)

    async def server_ready(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return pb.ServerReadyResponse(ready=self._service.server_ready())

    async def server_metadata(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return pb.ServerMetadataResponse(**server_metadata())

    async def model_ready(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        caller = await self._caller(context)
        with TenantRows(self._quotas, caller.tenant, 1):
            ready = await self._service.model_ready(request.name, request.version or None)
        return pb.ModelReadyResponse(ready=ready)

    async def model_metadata(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        caller = await self._caller(context)
        with TenantRows(self._quotas, caller.tenant, 1):
            document = await self._service.model_metadata(request.name, request.version or None)
        response = pb.ModelMetadataResponse(name=document["name"], versions=document["versions"],
                                            platform=document["platform"])
        for kind in ("inputs", "outputs"):
            for spec in document[kind]:
                getattr(response, kind).add(name=spec["name"], datatype=spec["datatype"], shape=spec["shape"])
        return response

    async def model_infer(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        caller = await self._caller(context)
        service = self._service
        model, version = request.model_name, request.model_version or None
        task = await service.task(model, version)
        if (refusal := self._in_flight.enter()) is not None:
            raise refusal_error(refusal)
        try:
            call = call_of(request, service.limits)
            texts = service.rows_of(task, call, service.max_text_chars)
            with TenantRows(self._quotas, caller.tenant, len(texts)):
                answer = await service.infer(model, version, task, call, texts, caller)
        finally:
            self._in_flight.leave()
        return response_of(answer)

    async def _caller(self, context: grpc.aio.ServicerContext) -> Caller:
        metadata = context.invocation_metadata() or ()
        headers = [(str(key).lower().encode("latin-1"), _text(value).encode("latin-1", "replace"))
                   for key, value in metadata if str(key).lower() in ("authorization", "x-api-key")]
        caller = await self._gatekeeper.check(GRPC_PATH, headers)
        if isinstance(caller, Refusal):
            raise refusal_error(caller)
        return caller


def _text(value: str | bytes) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else value


def answering(handler: Handler) -> Handler:
    """The handler with an `OipError` as its gRPC status, and any other exception (a bug) as UNAVAILABLE."""
    async def answer(request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            return await handler(request, context)
        except OipError as exc:
            details = exc.message + (f" (ids: {','.join(exc.ids)})" if exc.ids else "")
            if exc.retry_after_s is not None:
                context.set_trailing_metadata((("retry-after", str(exc.retry_after_s)),))
            await context.abort(getattr(grpc.StatusCode, exc.failure.grpc_code), details)
        except grpc.aio.AbortError:
            raise
        except Exception:
            log.exception("internal error answering a gRPC call")
            await context.abort(grpc.StatusCode.UNAVAILABLE, "internal error, retry")
    return answer


def generic_handler(servicer: Servicer) -> grpc.GenericRpcHandler:
    methods = {"ServerLive": (servicer.server_live, pb.ServerLiveRequest),
               "ServerReady": (servicer.server_ready, pb.ServerReadyRequest),
               "ServerMetadata": (servicer.server_metadata, pb.ServerMetadataRequest),
               "ModelReady": (servicer.model_ready, pb.ModelReadyRequest),
               "ModelMetadata": (servicer.model_metadata, pb.ModelMetadataRequest),
               "ModelInfer": (servicer.model_infer, pb.ModelInferRequest)}
    handlers = {name: grpc.unary_unary_rpc_method_handler(answering(handler), request_deserializer=kind.FromString,
                                                          response_serializer=lambda message: message.SerializeToString())
                for name, (handler, kind) in methods.items()}
    return grpc.method_handlers_generic_handler(SERVICE, handlers)


class GrpcServer:
    """The gRPC listener's life cycle, inside the gateway's lifespan; nothing at all without a port."""

    def __init__(self, settings: OipSettings) -> None:
        self._settings = settings
        self._servicer: Servicer | None = None
        self._server: grpc.aio.Server | None = None

    def serve(self, service: OipService, gatekeeper: Gatekeeper, quotas: QuotaBook, in_flight: InFlight) -> None:
        self._servicer = Servicer(service, gatekeeper, quotas, in_flight)

    async def start(self) -> None:
        settings = self._settings
        if settings.grpc_port is None or self._servicer is None:
            return
        options = [("grpc.max_receive_message_length", settings.grpc_max_message_bytes),
                   ("grpc.max_send_message_length", settings.grpc_max_message_bytes),
                   ("grpc.max_concurrent_streams", settings.grpc_max_streams), ("grpc.so_reuseport", 1)]
        server = grpc.aio.server(options=options, maximum_concurrent_rpcs=settings.grpc_max_concurrent_rpcs)
        server.add_generic_rpc_handlers((generic_handler(self._servicer),))
        address = f"{_host(settings)}:{settings.grpc_port}"
        if server.add_insecure_port(address) == 0:
            raise OSError(f"gRPC cannot listen on {address}")
        await server.start()
        self._server = server
        log.info("gateway gRPC (inference.GRPCInferenceService) listening on %s", address)

    async def stop(self, grace_s: float) -> None:
        if self._server is not None:
            await self._server.stop(grace_s)
            self._server = None


def _host(settings: OipSettings) -> str:
    host = getattr(settings, "host", "127.0.0.1")
    return f"[{host}]" if ":" in host else host
