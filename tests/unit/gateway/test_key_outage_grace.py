"""While Redis does not answer, keys it verified lately are let in, for a bounded time only."""

import json

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from common.auth_keys import KeyRecord, key_digest
from gateway.auth import KeyDirectory, OutageGrace
from gateway.errors import FleetUnavailable
from schemas.names import API_KEYS_KEY


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FlakyRedis:
    """HGET of the keys hash from a dict, or a connection error while `down`."""

    def __init__(self) -> None:
        self.records: dict[str, bytes] = {}
        self.down = False

    async def hget(self, name: str, field: str) -> bytes | None:
        assert name == API_KEYS_KEY
        if self.down:
            raise RedisConnectionError("Error 111 connecting")
        return self.records.get(field)


def stored(redis: FlakyRedis, key: str, *, revoked: bool = False) -> None:
    record = {"tenant": "acme", "key_id": "k1", "created_ms": 1, "revoked_ms": 2 if revoked else None}
    redis.records[key_digest(key)] = json.dumps(record).encode()


def directory(redis: FlakyRedis, clock: Clock, grace_s: float = 30.0) -> KeyDirectory:
    return KeyDirectory(lambda: redis, cache_s=0.5, lookup_timeout_s=1.0, outage_grace_s=grace_s,  # type: ignore[arg-type, return-value]
                        clock=clock)


async def test_a_key_verified_lately_is_let_in_during_an_outage_until_the_grace_ends() -> None:
    redis, clock = FlakyRedis(), Clock()
    keys = directory(redis, clock)
    stored(redis, "fk_good")
    assert (await keys.lookup_digest(key_digest("fk_good"))).tenant == "acme"  # type: ignore[union-attr]
    redis.down = True
    clock.now += 29.0
    assert (await keys.lookup_digest(key_digest("fk_good"))).tenant == "acme"  # type: ignore[union-attr]
    assert keys.grace.used == 1
    clock.now += 1.0  # 30 s after the verification
    with pytest.raises(FleetUnavailable):
        await keys.lookup_digest(key_digest("fk_good"))


async def test_unknown_never_seen_and_revoked_keys_get_no_grace() -> None:
    redis, clock = FlakyRedis(), Clock()
    keys = directory(redis, clock)
    stored(redis, "fk_revoked")
    assert (await keys.lookup_digest(key_digest("fk_revoked"))).active  # type: ignore[union-attr]
    stored(redis, "fk_revoked", revoked=True)
    clock.now += 1.0
    assert not (await keys.lookup_digest(key_digest("fk_revoked"))).active  # type: ignore[union-attr]
    redis.down = True
    clock.now += 1.0
    for key in ("fk_revoked", "fk_never_seen"):
        with pytest.raises(FleetUnavailable):
            await keys.lookup_digest(key_digest(key))


async def test_no_grace_when_switched_off() -> None:
    redis, clock = FlakyRedis(), Clock()
    keys = directory(redis, clock, grace_s=0)
    stored(redis, "fk_good")
    await keys.lookup_digest(key_digest("fk_good"))
    redis.down = True
    clock.now += 1.0
    with pytest.raises(FleetUnavailable):
        await keys.lookup_digest(key_digest("fk_good"))


def test_the_grace_holds_a_bounded_number_of_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("gateway.auth.MAX_CACHED", 3)
    grace = OutageGrace(30.0, Clock())
    record = KeyRecord(tenant="acme", key_id="k")
    for i in range(10):
        grace.verified(f"digest-{i}", record, 1000.0)
    assert [grace.get(f"digest-{i}") is not None for i in range(10)].count(True) == 3
