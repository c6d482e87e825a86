"""Tenants at the gateway, against the real Kafka and Redis: a result is its tenant's alone, sync
replies go to the tenant that asked, and one tenant's quota breach leaves the other untouched."""

import asyncio
import secrets

import httpx
import numpy as np
import pytest
from redis.asyncio import Redis

from common.settings import FleetSettings
from gateway.settings import GatewaySettings, TenantQuota
from schemas.names import result_key
from schemas.wire import Result, Status
from tests.integration.conftest import MODEL
from tests.integration.gateway.gateway_harness import echo_worker, in_process, issue_key

TENANT_A, TENANT_B = "tenant-a", "tenant-b"
ECHO_MODEL = "gw-tenants-echo"
IDLE_MODEL = "gw-tenants-idle"  # served by no worker: its waits last until their deadline
UNKNOWN_ID = "ef" * 16


def as_tenant(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


@pytest.fixture
async def keys(stack: FleetSettings) -> dict[str, str]:
    return {tenant: await issue_key(stack.redis_url, tenant) for tenant in (TENANT_A, TENANT_B)}


async def test_a_result_is_readable_by_its_tenant_only(stack: FleetSettings, keys: dict[str, str], serve) -> None:  # type: ignore[no-untyped-def]
    async with in_process(GatewaySettings(models=[MODEL]), key=keys[TENANT_A]) as http:
        refused = await http.post(f"/v1/models/{MODEL}/requests", json={"text": "hi", "tenant": TENANT_B})
        accepted = await http.post(f"/v1/models/{MODEL}/requests", json={"text": "whose is this?", "timeout_ms": 30000})
        request_id = accepted.json()["id"]
        not_yet = await http.get(f"/v1/results/{request_id}")  # as unknown as any id, for now
        async with serve():
            for _ in range(300):
                if (owned := await http.get(f"/v1/results/{request_id}")).status_code == 200:
                    break
                await asyncio.sleep(0.05)
        other = await http.get(f"/v1/results/{request_id}", headers=as_tenant(keys[TENANT_B]))
        unknown = await http.get(f"/v1/results/{UNKNOWN_ID}", headers=as_tenant(keys[TENANT_B]))
    assert refused.status_code == 422 and "tenant" in refused.text, "the body may not name another tenant"
    assert owned.status_code == 200 and owned.json()["tenant"] == TENANT_A, owned.text
    assert other.status_code == 404 == not_yet.status_code
    assert other.content == not_yet.content, "another tenant's result reads exactly as an unknown id"
    assert unknown.json()["detail"] == other.json()["detail"].replace(request_id, UNKNOWN_ID)
    assert other.headers["content-type"] == unknown.headers["content-type"]


async def test_sync_replies_go_only_to_the_tenant_that_asked(stack: FleetSettings, keys: dict[str, str],
                                                             redis: Redis) -> None:
    async with in_process(GatewaySettings(models=[ECHO_MODEL]), key=keys[TENANT_A]) as http, \
            echo_worker(stack, ECHO_MODEL, redis):
        async def ask(tenant: str, n: int) -> tuple[str, str, httpx.Response]:
            text = f"{tenant} question {n}"
            response = await http.post(f"/v1/models/{ECHO_MODEL}/infer", json={"text": text, "timeout_ms": 20000},
                                       headers=as_tenant(keys[tenant]))
            return tenant, text, response

        answers = await asyncio.gather(*(ask(tenant, n) for n in range(60) for tenant in (TENANT_A, TENANT_B)))
    for tenant, text, response in answers:
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["tenant"] == tenant and body["outputs"] == {"echo": text}, f"{tenant} got {body}"
    assert len({r.json()["id"] for _, _, r in answers}) == len(answers)


async def test_a_tenant_over_its_rate_gets_429_and_the_other_is_unaffected(stack: FleetSettings,
                                                                          keys: dict[str, str]) -> None:
    settings = GatewaySettings(models=[IDLE_MODEL], tenant_quotas={TENANT_A: TenantQuota(rps=0.5, burst=3)})
    async with in_process(settings, key=keys[TENANT_A]) as http:
        a_codes = [(await http.get(f"/v1/results/{UNKNOWN_ID}")) for _ in range(6)]
        b_codes = [(await http.get(f"/v1/results/{UNKNOWN_ID}", headers=as_tenant(keys[TENANT_B]))).status_code
                   for _ in range(6)]
        metrics = await http.metrics()
    assert [r.status_code for r in a_codes] == [404] * 3 + [429] * 3
    assert all(int(r.headers["retry-after"]) >= 1 and r.json()["quota"] == "rate" for r in a_codes[3:])
    assert b_codes == [404] * 6
    assert f'fleet_gateway_quota_rejections_total{{kind="rate",tenant="{TENANT_A}"}} 3.0' in metrics
    assert f'tenant="{TENANT_B}"' not in metrics


async def test_a_tenant_at_its_waits_gets_429_and_the_other_still_waits(stack: FleetSettings,
                                                                       keys: dict[str, str]) -> None:
    settings = GatewaySettings(models=[IDLE_MODEL], tenant_max_waits=2, retry_after_s=2)
    infer = f"/v1/models/{IDLE_MODEL}/infer"
    async with in_process(settings, key=keys[TENANT_A]) as http:
        waiting = [asyncio.create_task(http.post(infer, json={"text": f"a {i}", "timeout_ms": 1500})) for i in range(2)]
        await asyncio.sleep(0.4)
        refused = await http.post(infer, json={"text": "a one too many", "timeout_ms": 1500})
        other = await http.post(infer, json={"text": "b", "timeout_ms": 500}, headers=as_tenant(keys[TENANT_B]))
        answered = await asyncio.gather(*waiting)
        after = await http.post(infer, json={"text": "a again", "timeout_ms": 300})
        metrics = await http.metrics()
    assert refused.status_code == 429 and refused.headers["retry-after"] == "2" and refused.json()["quota"] == "waits"
    assert other.status_code == 504, "tenant B waited its own deadline out, not refused"
    assert [r.status_code for r in answered] == [504, 504] and after.status_code == 504
    assert f'fleet_gateway_quota_rejections_total{{kind="waits",tenant="{TENANT_A}"}} 1.0' in metrics


async def test_a_pipelines_f32le_result_reads_as_floats_over_http(stack: FleetSettings, keys: dict[str, str],
                                                                   redis: Redis) -> None:
    """A pipeline asked for raw float32 bytes; the gateway's JSON still carries a list of floats."""
    row = np.linspace(-1, 1, 8, dtype=np.float32)
    request_id = secrets.token_hex(16)
    stored = Result(id=request_id, model=MODEL, status=Status.ok, outputs={"embedding": row}, tenant=TENANT_A)
    await redis.set(result_key(request_id), stored.encode(embedding_encoding="f32le"), ex=60)
    async with in_process(GatewaySettings(models=[MODEL]), key=keys[TENANT_A]) as http:
        found = await http.get(f"/v1/results/{request_id}")
    assert found.status_code == 200, found.text
    body = found.json()
    assert body["outputs"]["embedding"] == row.tolist() and body.get("embedding_encoding") is None


async def test_a_tenants_flood_on_the_interactive_lane_leaves_the_other_tenant_served_in_time(
        stack: FleetSettings, keys: dict[str, str], serve) -> None:  # type: ignore[no-untyped-def]
    """Fairness inside a lane comes from per-tenant limits at intake (docs/concepts/lanes.md): tenant A's
    flood of priority-9 calls is admitted at its own rate and the rest refused with 429, so tenant B's
    calls on the same lane never queue behind more than A's bounded share."""
    rps, burst = 4.0, 4
    settings = GatewaySettings(models=[MODEL], tenant_quotas={TENANT_A: TenantQuota(rps=rps, burst=burst)})
    infer = f"/v1/models/{MODEL}/infer"
    async with serve(), in_process(settings, key=keys[TENANT_A]) as http:
        warm = await http.post(infer, json={"text": "warm", "priority": 9}, headers=as_tenant(keys[TENANT_B]))
        assert warm.status_code == 200, warm.text
        started = asyncio.get_running_loop().time()
        flood = [asyncio.create_task(http.post(infer, json={"text": f"flood {i}", "priority": 9, "timeout_ms": 10000}))
                 for i in range(1500)]

        async def b_call(i: int) -> httpx.Response:
            await asyncio.sleep(0.1 * i)
            return await http.post(infer, json={"text": f"b needs this {i}", "priority": 9, "timeout_ms": 3000},
                                   headers=as_tenant(keys[TENANT_B]))

        b_answers = await asyncio.gather(*(b_call(i) for i in range(10)))
        a_answers = await asyncio.gather(*flood)
        elapsed = asyncio.get_running_loop().time() - started
    assert [r.status_code for r in b_answers] == [200] * 10, [r.text for r in b_answers if r.status_code != 200]
    admitted = [r for r in a_answers if r.status_code != 429]
    assert len(admitted) <= burst + rps * elapsed + 1, f"{len(admitted)} of A's flood admitted in {elapsed:.1f} s"
    assert all(r.status_code == 200 for r in admitted), {r.status_code for r in admitted}
    assert len(a_answers) - len(admitted) >= 1400, "the flood past A's rate is refused at intake"
