"""The same refusals, in the same order, through /v1, /v2 REST and gRPC of a gateway over the real
Kafka and Redis, its gRPC service on a real port: an unknown key (looked up in Redis), a tenant
over its quota, an oversized body and a flood that fills the process's in-flight bound (a sync
infer of a model no worker serves, waiting for its deadline)."""

import asyncio
import time

import grpc
import orjson
from tritonclient.grpc import service_pb2 as pb

from common.auth_keys import new_key
from common.settings import FleetSettings
from fleet.ports import free_port
from gateway.refusals import KIND_HEADER, Kind
from gateway.settings import GatewaySettings, TenantQuota
from tests.integration.gateway.gateway_harness import GatewayHttp, bearer, in_process, issue_key

MODEL = "admission-refusals-model"  # accepted by the gateway, served by no worker
LIMIT = 1024
SPENT = "admission-one-wait"  # one request in flight at most
SMALL, BIG = 10, 2 * LIMIT
HOLD_MS = 20_000  # the flood's deadline: it holds the one place until the test lets it go


async def over_v1(http: GatewayHttp, key: str, size: int) -> Kind:
    answer = await http.post(f"/v1/models/{MODEL}/infer", content=orjson.dumps({"text": "x" * size}),
                             headers={**bearer(key), "content-type": "application/json"})
    kind = Kind[answer.headers[KIND_HEADER]]
    assert answer.status_code == kind.status and answer.json()["refusal"] == kind.name
    return kind


async def over_v2_rest(http: GatewayHttp, key: str, size: int) -> Kind:
    body = {"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": ["x" * size]}]}
    answer = await http.post(f"/v2/models/{MODEL}/infer", content=orjson.dumps(body), headers=bearer(key))
    kind = Kind[answer.headers[KIND_HEADER]]
    assert answer.status_code == kind.status and answer.json()["refusal"] == kind.name
    return kind


async def over_grpc(address: str, key: str, size: int) -> Kind:
    message = pb.ModelInferRequest(model_name=MODEL, id="x" * size).SerializeToString()
    async with grpc.aio.insecure_channel(address) as channel:
        infer = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
        try:
            await infer(message, metadata=(("authorization", f"Bearer {key}"),), timeout=10)
        except grpc.aio.AioRpcError as refused:
            kind = Kind[dict(refused.trailing_metadata() or ())[KIND_HEADER]]
            assert refused.code() == getattr(grpc.StatusCode, kind.grpc_code)
            return kind
    raise AssertionError("the call was let in")


async def test_every_protocol_refuses_alike_and_in_the_one_order(stack: FleetSettings) -> None:
    grpc_port = free_port()
    settings = GatewaySettings(models=[MODEL], max_in_flight=1, max_body_bytes=LIMIT, oip_max_body_bytes=LIMIT,
                               grpc_port=grpc_port, tenant_quotas={SPENT: TenantQuota(max_waits=1)})
    spent = await issue_key(stack.redis_url, SPENT)
    unknown = new_key()[0]
    async with in_process(settings) as http:
        good = http.headers["authorization"].removeprefix("Bearer ")
        address = f"127.0.0.1:{grpc_port}"

        async def through_each(cases: list[tuple[str, int]]) -> dict[str, list[Kind]]:
            return {"/v1": [await over_v1(http, key, size) for key, size in cases],
                    "/v2 REST": [await over_v2_rest(http, key, size) for key, size in cases],
                    "gRPC": [await over_grpc(address, key, size) for key, size in cases]}

        flood = asyncio.create_task(http.post(f"/v1/models/{MODEL}/infer", json={"text": "hold", "timeout_ms": HOLD_MS},
                                              headers=bearer(spent), timeout=HOLD_MS / 1000 + 10))
        await _until_busy(http, good)
        during = await through_each([(unknown, BIG), (spent, BIG), (spent, SMALL), (good, BIG), (good, SMALL)])
        assert not flood.done(), "the flood held its place all along"
        flood.cancel()
        await asyncio.gather(flood, return_exceptions=True)
        await _until_free(http, good)
        after = await through_each([(unknown, SMALL), (good, BIG)])
    expected = [Kind.unauthenticated, Kind.over_quota, Kind.over_quota, Kind.busy, Kind.busy]
    assert during == {name: expected for name in during}
    assert after == {name: [Kind.unauthenticated, Kind.too_large] for name in after}


async def _until_busy(http: GatewayHttp, key: str) -> None:
    """Until the flood holds the one place (it is admitted as soon as its request is read)."""
    give_up = time.monotonic() + 10
    while await over_v1(http, key, BIG) is not Kind.busy:
        assert time.monotonic() < give_up, "the flood was never admitted"
        await asyncio.sleep(0.01)


async def _until_free(http: GatewayHttp, key: str) -> None:
    give_up = time.monotonic() + 10
    while await over_v1(http, key, BIG) is Kind.busy:
        assert time.monotonic() < give_up, "the flood's place was never given back"
        await asyncio.sleep(0.01)
