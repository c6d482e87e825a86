"""The same refusals, in the same order, through every protocol of the gateway: /v1 (the fast
path and the routes FastAPI serves), /v2 REST and gRPC, all of one app made by `create_app`
(gateway/admission.py decides, each entry point only translates). No Kafka and no Redis: keys
come from a keys file, and a key not in it meets a Redis that knows no key."""

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import orjson
import pytest
from tritonclient.grpc import service_pb2 as pb

from common.auth_keys import key_digest, new_key
from gateway.app import GatewayApp, create_app
from gateway.client import FleetClient
from gateway.refusals import KIND_HEADER, Kind
from gateway.settings import GatewaySettings, TenantQuota

MODEL = "admission-model"
LIMIT = 1024  # the body limit of /v1 and of /v2 (REST and gRPC)
GOOD, SPENT = "admitted-tenant", "one-wait-tenant"  # SPENT may have one request in flight, no more
SMALL, BIG = 10, 2 * LIMIT
Protocol = Callable[[GatewayApp, str, int], Awaitable[Kind]]


class NoKeysRedis:
    """The Redis a key not in the keys file is looked up in: it knows no key."""

    async def hget(self, name: str, key: str) -> None:
        return None


class Aborted(Exception):
    """What `ServicerContext.abort` raises: the call ends with this status."""

    def __init__(self, code: grpc.StatusCode, details: str, trailing: dict[str, str]) -> None:
        super().__init__(details)
        self.code, self.trailing = code, trailing


class CallContext:
    def __init__(self, metadata: tuple[tuple[str, str], ...]) -> None:
        self._metadata = metadata

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._metadata

    async def abort(self, code: grpc.StatusCode, details: str, trailing_metadata: Any = ()) -> None:
        raise Aborted(code, details, dict(trailing_metadata))


class MethodCall:
    """A `grpc.HandlerCallDetails`: which method the generic handler is asked for."""

    def __init__(self, method: str) -> None:
        self.method = method
        self.invocation_metadata: tuple[tuple[str, str], ...] = ()


async def http_call(app: GatewayApp, path: str, key: str, body: bytes,
                    receive: Callable[[], Awaitable[dict[str, Any]]] | None = None) -> tuple[int, dict[str, str]]:
    """The request straight onto the app's ASGI channel; its status and headers (0 when unanswered)."""
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "", "server": ("t", 80),
             "client": ("t", 1), "headers": [(b"authorization", f"Bearer {key}".encode()),
                                             (b"content-type", b"application/json"),
                                             (b"content-length", str(len(body)).encode())]}
    answer: dict[str, Any] = {}

    async def whole_body() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            answer["status"] = message["status"]
            answer["headers"] = {k.decode(): v.decode() for k, v in message["headers"]}

    await app(scope, receive or whole_body, send)
    return answer.get("status", 0), answer.get("headers", {})


def padded(size: int) -> bytes:
    return orjson.dumps({"text": "x" * size})


async def over_v1(app: GatewayApp, key: str, size: int) -> Kind:
    status, headers = await http_call(app, f"/v1/models/{MODEL}/infer", key, padded(size))
    kind = Kind[headers[KIND_HEADER]]
    assert status == kind.status
    return kind


async def over_v1_fastapi(app: GatewayApp, key: str, size: int) -> Kind:
    """/v1 as FastAPI serves it (the fast path off): the routes behind gateway/http_admission.py."""
    fast, app.fast_routes = app.fast_routes, None
    try:
        return await over_v1(app, key, size)
    finally:
        app.fast_routes = fast


async def over_v2_rest(app: GatewayApp, key: str, size: int) -> Kind:
    status, headers = await http_call(app, f"/v2/models/{MODEL}/infer", key, padded(size))
    kind = Kind[headers[KIND_HEADER]]
    assert status == kind.status
    return kind


async def over_grpc(app: GatewayApp, key: str, size: int) -> Kind:
    assert app.grpc is not None
    method = app.grpc.handler().service(MethodCall("/inference.GRPCInferenceService/ModelInfer"))
    assert method is not None and method.request_deserializer is None  # bytes: parsed once admitted
    message = pb.ModelInferRequest(model_name=MODEL, id="x" * size).SerializeToString()
    with pytest.raises(Aborted) as aborted:
        await method.unary_unary(message, CallContext((("authorization", f"Bearer {key}"),)))
    kind = Kind[aborted.value.trailing[KIND_HEADER]]
    assert aborted.value.code == getattr(grpc.StatusCode, kind.grpc_code)
    return kind


PROTOCOLS: dict[str, Protocol] = {"/v1": over_v1, "/v1 FastAPI": over_v1_fastapi, "/v2 REST": over_v2_rest,
                                  "gRPC": over_grpc}


def gateway(tmp_path: Path) -> tuple[GatewayApp, dict[str, str]]:
    keys = {tenant: new_key()[0] for tenant in (GOOD, SPENT)}
    keys_file = tmp_path / "keys"
    keys_file.write_text("".join(f"{key_digest(key)} {tenant}\n" for tenant, key in keys.items()))
    settings = GatewaySettings(models=[MODEL], max_in_flight=1, max_body_bytes=LIMIT, oip_max_body_bytes=LIMIT,
                               auth_keys_file=keys_file, tenant_quotas={SPENT: TenantQuota(max_waits=1)})
    return create_app(settings, client=FleetClient(settings, redis=NoKeysRedis())), keys  # type: ignore[arg-type]


async def refusals(app: GatewayApp, cases: list[tuple[str, int]], protocol: Protocol) -> list[Kind]:
    return [await protocol(app, key, size) for key, size in cases]


async def test_every_protocol_refuses_alike_and_in_the_one_order(tmp_path: Path) -> None:
    app, keys = gateway(tmp_path)
    good, spent, unknown = keys[GOOD], keys[SPENT], new_key()[0]
    # SPENT's one request in flight, which is also the process's one: it waits for a body never sent.
    admitted, body_sent = asyncio.Event(), asyncio.Event()

    async def body_later() -> dict[str, Any]:
        admitted.set()  # its body is read only once it holds its places
        await body_sent.wait()
        return {"type": "http.disconnect"}

    holder = asyncio.create_task(http_call(app, f"/v1/models/{MODEL}/infer", spent, padded(SMALL), body_later))
    await admitted.wait()
    # key, then tenant quota, then the in-flight bound, then the body: the first that fails answers
    during_flood = [(unknown, BIG), (spent, BIG), (spent, SMALL), (good, BIG), (good, SMALL)]
    expected_during = [Kind.unauthenticated, Kind.over_quota, Kind.over_quota, Kind.busy, Kind.busy]
    after_flood = [(unknown, SMALL), (good, BIG)]
    expected_after = [Kind.unauthenticated, Kind.too_large]
    seen = {name: await refusals(app, during_flood, protocol) for name, protocol in PROTOCOLS.items()}
    body_sent.set()
    assert await holder == (0, {})  # its client went away before sending its body: nothing to answer
    for name, protocol in PROTOCOLS.items():
        seen[name] += await refusals(app, after_flood, protocol)
    assert seen == {name: expected_during + expected_after for name in PROTOCOLS}

