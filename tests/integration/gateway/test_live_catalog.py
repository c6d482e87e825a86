"""A running gateway follows the model catalogue in Redis (gateway/catalog.py): a model made stable is
served within the poll bound with no restart, with the card its workers wrote (never another task's),
a retired model or version is refused, readiness means a live worker serves the stable version, and
each gateway says what it serves."""

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable

import httpx
from redis.asyncio import Redis

from common.catalog import list_gateways
from common.settings import FleetSettings
from gateway.settings import GatewaySettings
from schemas.model_card import CardTensor, ModelCard
from schemas.names import card_key
from tests.integration.gateway.gateway_harness import in_process
from versions import VersionPointers
from workers.health.heartbeat import Heartbeat

POLL_S = 0.5
BOUND_S = 3 * POLL_S  # the documented bound is one poll; the rest is this machine's slack
ACTOR = "test@live-catalog"


def new_model() -> tuple[str, str]:
    name = f"live-{uuid.uuid4().hex[:10]}"
    return name, f"{name}-20261206-001"


def tensor_card(model: str, version: str) -> ModelCard:
    return ModelCard(name=model, version=version, task="tensor", platform="onnxruntime",
                     inputs=(CardTensor(name="float_input", datatype="FP32", shape=(-1, 4)),),
                     outputs=(CardTensor(name="probabilities", datatype="FP32", shape=(-1, 3)),))


async def within(bound_s: float, check: Callable[[], Awaitable[bool]]) -> float:
    """Seconds until `check()` holds; fails the test past `bound_s`."""
    started = time.monotonic()
    while not await check():
        assert time.monotonic() - started < bound_s, f"not within {bound_s} s"
        await asyncio.sleep(0.05)
    return time.monotonic() - started


def settings_following(stack: FleetSettings, **extra: object) -> GatewaySettings:
    return GatewaySettings(**{**stack.model_dump(), "models": None, "catalog_poll_s": POLL_S, **extra})


async def test_a_model_made_stable_is_served_with_its_own_card_without_a_restart(stack: FleetSettings,
                                                                                 redis: Redis) -> None:
    model, version = new_model()
    async with in_process(settings_following(stack)) as http:
        unknown = await http.get(f"/v2/models/{model}")
        assert unknown.status_code == 404 and "no stable version is set" in unknown.json()["error"]
        assert (await http.post(f"/v1/models/{model}/requests", json={"text": "x"})).status_code == 404

        await VersionPointers(redis, model).set_stable(version, ACTOR, "imported")

        async def known() -> bool:
            return (await http.get(f"/v2/models/{model}")).status_code != 404

        await within(BOUND_S, known)
        # Served, but no worker has said what it takes: a 503 with the reason, never an embedding's card.
        no_card = await http.get(f"/v2/models/{model}")
        assert no_card.status_code == 503 and "card" in no_card.json()["error"], no_card.text
        assert int(no_card.headers["retry-after"]) >= 1

        await redis.set(card_key(model), tensor_card(model, version).encode(), px=60_000)
        await asyncio.sleep(2.1)  # the gateway's card cache (2 s)
        metadata = (await http.get(f"/v2/models/{model}")).json()
        assert metadata["parameters"] == {"task": "tensor"}
        assert metadata["inputs"] == [{"name": "float_input", "datatype": "FP32", "shape": [-1, 4]}]

        await redis.set(card_key(model), b'{"v": 99, "garbage": true}', px=60_000)
        await asyncio.sleep(2.1)
        broken = await http.get(f"/v2/models/{model}")
        assert broken.status_code == 503 and "cannot be read" in broken.json()["error"], broken.text


async def test_readiness_is_a_live_worker_of_the_stable_version(stack: FleetSettings, redis: Redis) -> None:
    model, version = new_model()
    await VersionPointers(redis, model).set_stable(version, ACTOR, "imported")
    async with in_process(settings_following(stack)) as http:
        await within(BOUND_S, lambda: _status_is(http, f"/v2/models/{model}/ready", 503))
        not_ready = await http.get(f"/v2/models/{model}/ready")
        assert not_ready.json() == {"name": model, "ready": False, "reason": f"no live worker serves version {version} "
                                                                              f"of {model}"}
        assert (await http.get(f"/v2/models/{model}/ready?readiness=queued")).json() == {"name": model, "ready": True}
        assert (await http.get("/v2/health/ready")).status_code == 503  # a model it serves is not ready
        assert (await http.get("/v2/health/ready?readiness=queued")).status_code == 200
        assert (await http.get("/v2/health/ready?readiness=maybe")).status_code == 400

        beat = Heartbeat(redis, model=model, worker_id=f"{model}-w1", role="primary", device="cpu", ttl_s=30)
        await beat.beat("healthy", "", f"{model}-19990101-001", 0)  # another version than stable: not ready
        await asyncio.sleep(1.1)  # readiness reads workers at most once a second
        assert (await http.get(f"/v2/models/{model}/ready")).status_code == 503
        await beat.beat("healthy", "", version, 0)
        await asyncio.sleep(1.1)
        assert (await http.get(f"/v2/models/{model}/ready")).json() == {"name": model, "ready": True}
        await beat.remove()


async def test_a_retired_model_or_version_is_refused_and_set_stable_brings_it_back(stack: FleetSettings,
                                                                                  redis: Redis) -> None:
    from common.catalog import retire

    model, version = new_model()
    old = f"{model}-20261101-001"
    await VersionPointers(redis, model).set_stable(version, ACTOR, "imported")
    await redis.set(card_key(model), tensor_card(model, version).encode(), px=60_000)
    async with in_process(settings_following(stack)) as http:
        await within(BOUND_S, lambda: _status_is(http, f"/v2/models/{model}", 200))

        await retire(redis, model, old, ACTOR, "superseded", serving=frozenset({version}))
        await asyncio.sleep(POLL_S * 1.5)
        pinned = await http.get(f"/v2/models/{model}/versions/{old}")
        assert pinned.status_code == 404 and "retired" in pinned.json()["error"] and "superseded" in pinned.json()["error"]
        assert (await http.get(f"/v2/models/{model}")).status_code == 200

        await retire(redis, model, None, ACTOR, "replaced by churn-v2")
        await within(BOUND_S, lambda: _status_is(http, f"/v2/models/{model}", 404))
        assert "replaced by churn-v2" in (await http.get(f"/v2/models/{model}")).json()["error"]
        refused = await http.post(f"/v1/models/{model}/requests", json={"inputs": {"float_input": [[1, 2, 3, 4]]}})
        assert refused.status_code == 404 and "retired" in refused.text

        await VersionPointers(redis, model).set_stable(version, ACTOR, "back in service")
        await within(BOUND_S, lambda: _status_is(http, f"/v2/models/{model}", 200))


async def test_an_allow_list_serves_its_models_only_and_each_gateway_says_what_it_serves(stack: FleetSettings,
                                                                                        redis: Redis) -> None:
    model, version = new_model()
    listed = f"allowed-{uuid.uuid4().hex[:8]}"
    await VersionPointers(redis, model).set_stable(version, ACTOR, "imported")
    async with in_process(settings_following(stack, models=[listed])) as http:
        refused = await http.get(f"/v2/models/{model}")
        assert refused.status_code == 404 and "allow-list" in refused.json()["error"]
        # Accepted and queued before any worker serves it, as a pipeline producing ahead of its workers expects
        # (once the gateway reads its replies: a moment after it starts).
        await within(5.0, lambda: _status_is(http, f"/v2/models/{listed}/ready?readiness=queued", 200))
        assert (await http.get(f"/v2/models/{listed}/ready")).status_code == 503

        async def beat_written() -> bool:
            return any(beat.served == (listed,) and beat.allow_list == (listed,) for beat in await list_gateways(redis))

        await within(BOUND_S, beat_written)
    # A gateway that stops takes its beat with it.
    assert not any(beat.served == (listed,) for beat in await list_gateways(redis))


async def _status_is(http: httpx.AsyncClient, path: str, status: int) -> bool:
    return (await http.get(path)).status_code == status
