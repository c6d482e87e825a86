"""`inference.GRPCInferenceService` (KServe v2 gRPC: ServerLive, ServerReady, ModelReady,
ServerMetadata, ModelMetadata, ModelInfer) on FLEET_GRPC_PORT, on the gateway's own event loop:
the same fleet client as REST, through the same `OipService`.

ServerLive, ServerReady and ServerMetadata are open, as their REST routes are. The model calls meet
the one admission (gateway/admission.py) at /v2's door, as REST does: the key from the call's
metadata, tenant, quota, in-flight, then the message's size against the door's body limit (the
message arrives as bytes and is parsed only once admitted), then, for an infer, its rows. A
refusal is aborted with its kind's gRPC code (gateway/refusals.py), the kind and Retry-After in
the trailing metadata. A message over `grpc_max_message_bytes` is refused by gRPC itself
(RESOURCE_EXHAUSTED) before any of this: the transport's own bound, as the HTTP server's on
headers (431) comes before admission.

The messages are those of tritonclient's `service_pb2` (NVIDIA's maintained build of Triton's
grpc_service.proto, a superset of KServe's grpc_predict_v2.proto with the same field numbers):
no generated code of ours to keep in step with protobuf, and exactly what tritonclient.grpc sends.
The API key comes from the call's metadata (`authorization: Bearer <key>` or `x-api-key`)."""

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import grpc
from google.protobuf.message import DecodeError, Message
from tritonclient.grpc import service_pb2 as pb

from gateway.admission import Admission, Door, Pass
from gateway.oip.errors import OipError, bad_input
from gateway.oip.grpc_calls import call_of, response_of
from gateway.oip.service import OipService, server_metadata
from gateway.oip.settings import OipSettings
from gateway.refusals import Refusal, Refused

log = logging.getLogger(__name__)

SERVICE = "inference.GRPCInferenceService"
Handler = Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]
Parsed = TypeVar("Parsed", bound=Message)
CREDENTIALS = ("authorization", "x-api-key")


class Servicer:
    def __init__(self, service: OipService, admission: Admission, door: Door) -> None:
        self._service = service
        self._admission = admission
        self._door = door

    async def server_live(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return pb.ServerLiveResponse(live=True)

    async def server_ready(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return pb.ServerReadyResponse(ready=(await self._service.server_ready()).ready)

    async def server_metadata(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return pb.ServerMetadataResponse(**server_metadata())

    async def model_ready(self, raw: bytes, context: grpc.aio.ServicerContext) -> Any:
        async with self._admitted(raw, context):
            request = parsed(pb.ModelReadyRequest, raw)
            served = await self._service.model_ready(request.name, request.version or None)
        return pb.ModelReadyResponse(ready=served.ready)

    async def model_metadata(self, raw: bytes, context: grpc.aio.ServicerContext) -> Any:
        async with self._admitted(raw, context):
            request = parsed(pb.ModelMetadataRequest, raw)
            document = await self._service.model_metadata(request.name, request.version or None)
        response = pb.ModelMetadataResponse(name=document["name"], versions=document["versions"],
                                            platform=document["platform"])
        for kind in ("inputs", "outputs"):
            for spec in document[kind]:
                getattr(response, kind).add(name=spec["name"], datatype=spec["datatype"], shape=spec["shape"])
        return response

    async def model_infer(self, raw: bytes, context: grpc.aio.ServicerContext) -> Any:
        service = self._service
        async with self._admitted(raw, context) as admitted:
            request = parsed(pb.ModelInferRequest, raw)
            model, version = request.model_name, request.model_version or None
            task = await service.task(model, version)
            call = call_of(request, service.limits)
            texts = service.rows_of(task, call, service.max_text_chars)
            if (refusal := admitted.rows(len(texts))) is not None:
                raise Refused(refusal)
            answer = await service.infer(model, version, task, call, texts, admitted.caller)
        return response_of(answer)

    @asynccontextmanager
    async def _admitted(self, raw: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[Pass]:
        """The call admitted at /v2's door, its message within the door's limit; released when the call ends."""
        headers = [(str(key).lower().encode("latin-1"), _text(value).encode("latin-1", "replace"))
                   for key, value in context.invocation_metadata() or () if str(key).lower() in CREDENTIALS]
        admitted = await self._admission.admit(self._door, headers)
        if isinstance(admitted, Refusal):
            raise Refused(admitted)
        try:
            if (refusal := admitted.size(len(raw))) is not None:
                raise Refused(refusal)
            yield admitted
        finally:
            admitted.release()


def parsed(kind: type[Parsed], raw: bytes) -> Parsed:
    """The message, parsed only once its caller is admitted; 400 (INVALID_ARGUMENT) when it is not one."""
    try:
        return kind.FromString(raw)
    except DecodeError:
        raise bad_input(f"the message is not a {kind.DESCRIPTOR.name}") from None


def _text(value: str | bytes) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else value


def answering(handler: Handler) -> Handler:
    """The handler with a refusal or an `OipError` as its gRPC status, and any other exception (a bug)
    as UNAVAILABLE."""
    async def answer(request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            return await handler(request, context)
        except Refused as exc:
            refusal = exc.refusal
            await context.abort(getattr(grpc.StatusCode, refusal.kind.grpc_code), refusal.detail,
                                trailing_metadata=refusal.grpc_metadata())
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
    # The model calls take their message as bytes (None): it is parsed once the caller is admitted.
    methods: dict[str, tuple[Handler, Callable[[bytes], Any] | None]] = {
        "ServerLive": (servicer.server_live, pb.ServerLiveRequest.FromString),
        "ServerReady": (servicer.server_ready, pb.ServerReadyRequest.FromString),
        "ServerMetadata": (servicer.server_metadata, pb.ServerMetadataRequest.FromString),
        "ModelReady": (servicer.model_ready, None), "ModelMetadata": (servicer.model_metadata, None),
        "ModelInfer": (servicer.model_infer, None)}
    handlers = {name: grpc.unary_unary_rpc_method_handler(answering(handler), request_deserializer=parse,
                                                          response_serializer=_serialized)
                for name, (handler, parse) in methods.items()}
    return grpc.method_handlers_generic_handler(SERVICE, handlers)


def _serialized(message: Any) -> bytes:
    serialized: bytes = message.SerializeToString()
    return serialized


class GrpcServer:
    """The gRPC listener's life cycle, inside the gateway's lifespan; nothing at all without a port."""

    def __init__(self, settings: OipSettings) -> None:
        self._settings = settings
        self._servicer: Servicer | None = None
        self._server: grpc.aio.Server | None = None

    def serve(self, service: OipService, admission: Admission, door: Door) -> None:
        self._servicer = Servicer(service, admission, door)

    def handler(self) -> grpc.GenericRpcHandler:
        """The service's methods as the server runs them (what `start` registers)."""
        if self._servicer is None:
            raise RuntimeError("nothing to serve: serve() was not called")
        return generic_handler(self._servicer)

    async def start(self) -> None:
        settings = self._settings
        if settings.grpc_port is None or self._servicer is None:
            return
        options = [("grpc.max_receive_message_length", settings.grpc_max_message_bytes),
                   ("grpc.max_send_message_length", settings.grpc_max_message_bytes),
                   ("grpc.max_concurrent_streams", settings.grpc_max_streams), ("grpc.so_reuseport", 1)]
        server = grpc.aio.server(options=options, maximum_concurrent_rpcs=settings.grpc_max_concurrent_rpcs)
        server.add_generic_rpc_handlers((self.handler(),))
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
