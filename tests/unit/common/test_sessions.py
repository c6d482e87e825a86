"""The console's server-side sessions (common/sessions.py) on a Redis in memory and a clock the
test moves: idle and absolute expiry, sign-out of one session, every session of a key ended with
the key, the oldest signed out past a key's bound, a short Redis outage ridden out."""

import asyncio

import pytest

from common.auth_keys import create_key, key_digest, revoke_key
from common.sessions import SESSION_PREFIX, Session, SessionPolicy, SessionStore, SessionsUnavailable
from tests.unit.common.memory_redis import MemoryRedis

IDLE_S, ABSOLUTE_S = 60.0, 300.0


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def store(max_per_key: int = 5, outage_grace_s: float = 0.0) -> tuple[SessionStore, MemoryRedis, Clock]:
    clock = Clock()
    redis = MemoryRedis(clock)
    policy = SessionPolicy(idle_s=IDLE_S, absolute_s=ABSOLUTE_S, max_per_key=max_per_key, outage_grace_s=outage_grace_s)
    return SessionStore(redis, policy, clock), redis, clock  # type: ignore[arg-type]


def found(sessions: SessionStore, token: str, *, touch: bool = True) -> Session | None:
    return asyncio.run(sessions.find(token, touch=touch))


def test_redis_holds_neither_the_key_nor_the_token() -> None:
    sessions, redis, _ = store()
    key = "fk_0123456789ab_secret"
    token = asyncio.run(sessions.start(key_digest(key), "0123456789ab"))
    assert len(token) >= 43 and token != asyncio.run(sessions.start(key_digest(key), "0123456789ab"))
    stored = b" ".join(redis.keys_alive()) + repr(redis._data).encode()
    assert token.encode() not in stored and key.encode() not in stored
    session = found(sessions, token)
    assert session is not None and session.digest == key_digest(key) and session.key_id == "0123456789ab"


def test_a_session_without_activity_ends_at_its_idle_expiry() -> None:
    sessions, _, clock = store()
    token = asyncio.run(sessions.start("d" * 64, "k1"))
    clock.now += IDLE_S - 1
    assert found(sessions, token) is not None  # activity: the idle expiry starts again
    clock.now += IDLE_S - 1
    assert found(sessions, token, touch=False) is not None  # a page's own refresh: no activity
    clock.now += 1
    assert found(sessions, token) is None
    clock.now -= 10  # gone for good, not merely out of date
    assert found(sessions, token) is None


def test_an_active_session_ends_at_its_absolute_expiry() -> None:
    sessions, _, clock = store()
    token = asyncio.run(sessions.start("d" * 64, "k1"))
    started = clock.now
    while clock.now + IDLE_S / 2 < started + ABSOLUTE_S:
        clock.now += IDLE_S / 2
        assert found(sessions, token) is not None
    clock.now = started + ABSOLUTE_S
    assert found(sessions, token) is None


def test_signing_out_ends_that_session_only() -> None:
    sessions, _, _ = store()
    laptop, phone = (asyncio.run(sessions.start("d" * 64, "k1")) for _ in range(2))
    asyncio.run(sessions.end(laptop))
    assert found(sessions, laptop) is None and found(sessions, phone) is not None
    asyncio.run(sessions.end(laptop))  # twice, or a token never issued: nothing to end, no error
    asyncio.run(sessions.end("never issued"))


def test_revoking_a_key_ends_every_session_of_it_and_no_other() -> None:
    sessions, redis, _ = store()

    async def scenario() -> tuple[list[Session | None], Session | None]:
        issued = await create_key(redis, "ops", now_ms=1)  # type: ignore[arg-type]
        other = await create_key(redis, "ops", now_ms=1)  # type: ignore[arg-type]
        own = [await sessions.start(key_digest(issued.key), issued.record.key_id) for _ in range(3)]
        kept = await sessions.start(key_digest(other.key), other.record.key_id)
        await revoke_key(redis, issued.record.key_id, now_ms=2)  # type: ignore[arg-type]
        return [await sessions.find(token) for token in own], await sessions.find(kept)

    ended, kept = asyncio.run(scenario())
    assert ended == [None, None, None] and kept is not None
    records = [key for key in redis.keys_alive() if key.startswith(SESSION_PREFIX.encode())]
    assert records == [(SESSION_PREFIX + kept.id).encode()]  # nothing of the revoked key's sessions is left


def test_signing_in_past_a_keys_bound_signs_its_oldest_session_out() -> None:
    sessions, _, clock = store(max_per_key=2)
    tokens = []
    for _ in range(3):
        tokens.append(asyncio.run(sessions.start("d" * 64, "k1")))
        clock.now += 1
    assert [found(sessions, token) is not None for token in tokens] == [False, True, True]


def test_a_short_redis_outage_keeps_sessions_read_lately_and_no_others() -> None:
    sessions, redis, clock = store(outage_grace_s=30)
    token = asyncio.run(sessions.start("d" * 64, "k1"))
    stranger = asyncio.run(sessions.start("e" * 64, "k2"))
    assert found(sessions, token) is not None
    redis.down = True
    remembered = found(sessions, token)
    assert remembered is not None and remembered.remembered
    with pytest.raises(SessionsUnavailable):  # never read by this process: not let in unverified
        found(sessions, stranger)
    clock.now += 31
    with pytest.raises(SessionsUnavailable):
        found(sessions, token)
