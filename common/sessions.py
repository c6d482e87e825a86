"""Server-side sessions of the operator console: the browser holds a random token, Redis holds the
session, and neither holds the key it signed in with.

A session is `fleet:console:session:<sha256 of the token>` -> JSON {digest (the key's sha256),
key_id, created_ms, seen_ms}, stored with a TTL so Redis forgets it at its idle or its absolute
expiry, whichever comes first; the same two expiries are checked on the record itself against the
store's clock (what a test moves instead of waiting). A key's sessions are listed in the sorted
set `fleet:console:sessions:<key id>` (token hash -> created ms), at most `max_per_key`: signing in
once more ends the oldest. Only the token's hash is stored, so what Redis holds is no cookie.

A session ends on its own (`end`: sign-out) or with every other session of its key
(`end_sessions_of`), which revoking the key does (common/auth_keys.py `revoke_key`). The key is
also checked on every request that presents a session (gateway/admission.py `admit_session`), so
a key revoked any other way signs its sessions out at their next request all the same.

Every command names one key, so the store works on a Redis Cluster as on one server.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, replace

from common.redis_cluster import REDIS_DOWN, AnyRedis

SESSION_PREFIX = "fleet:console:session:"
SESSIONS_OF_PREFIX = "fleet:console:sessions:"
TOKEN_BYTES = 32  # 256 random bits, as a key's secret
MAX_TOKEN_CHARS = 100
MAX_REMEMBERED = 1000  # sessions kept in memory to ride out a Redis outage


@dataclass(frozen=True)
class SessionPolicy:
    idle_s: float  # ended after this long without a request that counts as activity
    absolute_s: float  # ended this long after sign-in, whatever happens
    max_per_key: int  # a key's sessions at once; signing in again ends the oldest
    outage_grace_s: float = 0.0  # while Redis does not answer, a session read within this long still stands


@dataclass(frozen=True)
class Session:
    id: str  # sha256 of the token: what Redis names it by, and what the console's CSRF tokens are bound to
    digest: str  # sha256 of the key it signed in with
    key_id: str
    created_ms: int
    seen_ms: int
    remembered: bool = False  # answered from memory because Redis does not answer now

    def stored(self) -> str:
        return json.dumps({"id": self.id, "digest": self.digest, "key_id": self.key_id,
                           "created_ms": self.created_ms, "seen_ms": self.seen_ms})

    def ends_at_ms(self, policy: SessionPolicy) -> int:
        """When it ends if nothing more is seen: its idle expiry or its absolute one, the sooner."""
        return min(self.seen_ms + int(policy.idle_s * 1000), self.created_ms + int(policy.absolute_s * 1000))


class SessionsUnavailable(ConnectionError):
    """Redis did not answer, and no session read lately stands in for it."""


def session_id(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def _session_key(sid: str) -> str:
    return SESSION_PREFIX + sid


def _index_key(key_id: str) -> str:
    return SESSIONS_OF_PREFIX + key_id


class SessionStore:
    def __init__(self, redis: AnyRedis, policy: SessionPolicy, clock: Callable[[], float] = time.time) -> None:
        self._redis = redis
        self.policy = policy
        self._clock = clock
        self._remembered: dict[str, tuple[Session, float]] = {}  # id -> (session, when Redis last had it)

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    async def start(self, digest: str, key_id: str) -> str:
        """A new session of the key whose sha256 is `digest`; returns its token (the cookie's value), kept nowhere."""
        token = secrets.token_urlsafe(TOKEN_BYTES)
        now = self._now_ms()
        session = Session(session_id(token), digest, key_id, now, now)
        redis, index = self._redis, _index_key(key_id)
        await redis.set(_session_key(session.id), session.stored(), px=self._ttl_ms(session, now))
        await redis.zadd(index, {session.id: now})
        await redis.pexpire(index, int(self.policy.absolute_s * 1000))  # outlives every session it lists
        overflow = await redis.zrange(index, 0, -self.policy.max_per_key - 1)
        for old in overflow:
            await self._forget(_text(old), key_id)
        return token

    async def find(self, token: str, *, touch: bool = True) -> Session | None:
        """The token's session, None when it has none or it has expired; `touch` counts this as
        activity (the idle expiry starts again). SessionsUnavailable while Redis does not answer."""
        if not token or len(token) > MAX_TOKEN_CHARS:
            return None
        sid = session_id(token)
        now = self._now_ms()
        try:
            raw = await self._redis.get(_session_key(sid))
        except REDIS_DOWN as exc:
            return self._remembered_session(sid, now, exc)
        session = _decode(raw, sid)
        if session is None or session.ends_at_ms(self.policy) <= now:
            self._remembered.pop(sid, None)
            if session is not None:
                with suppress(*REDIS_DOWN):  # its TTL ends it in Redis anyway
                    await self._forget(sid, session.key_id)
            return None
        if touch:
            session = Session(sid, session.digest, session.key_id, session.created_ms, now)
            # Read a moment ago, it stands if this write fails: its idle expiry restarts at the next request.
            with suppress(*REDIS_DOWN):
                # xx: only while it exists, so a request racing a sign-out cannot bring the session back.
                await self._redis.set(_session_key(sid), session.stored(), px=self._ttl_ms(session, now), xx=True)
        self._remember(session)
        return session

    async def end(self, token: str) -> None:
        """Sign-out: this session ends, the key's others stay."""
        sid = session_id(token)
        self._remembered.pop(sid, None)
        raw = await self._redis.get(_session_key(sid))
        session = _decode(raw, sid)
        await self._forget(sid, session.key_id if session is not None else None)

    async def end_all(self, key_id: str) -> int:
        for sid in [sid for sid, (session, _) in self._remembered.items() if session.key_id == key_id]:
            del self._remembered[sid]
        return await end_sessions_of(self._redis, key_id)

    def _ttl_ms(self, session: Session, now_ms: int) -> int:
        return max(session.ends_at_ms(self.policy) - now_ms, 1)

    async def _forget(self, sid: str, key_id: str | None) -> None:
        await self._redis.delete(_session_key(sid))
        if key_id is not None:
            await self._redis.zrem(_index_key(key_id), sid)

    def _remember(self, session: Session) -> None:
        if self.policy.outage_grace_s <= 0:
            return
        if session.id not in self._remembered and len(self._remembered) >= MAX_REMEMBERED:
            self._remembered.clear()
        self._remembered[session.id] = (session, self._clock())

    def _remembered_session(self, sid: str, now_ms: int, exc: BaseException) -> Session:
        entry = self._remembered.get(sid)
        if (entry is None or self._clock() - entry[1] > self.policy.outage_grace_s
                or entry[0].ends_at_ms(self.policy) <= now_ms):
            raise SessionsUnavailable(f"session lookup failed ({type(exc).__name__})") from exc
        return replace(entry[0], remembered=True)


async def end_sessions_of(redis: AnyRedis, key_id: str) -> int:
    """End every session of the key with this id (its revocation); returns how many there were."""
    index = _index_key(key_id)
    sids = [_text(sid) for sid in await redis.zrange(index, 0, -1)]
    for sid in sids:
        await redis.delete(_session_key(sid))
    await redis.delete(index)
    return len(sids)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _decode(raw: bytes | str | None, sid: str) -> Session | None:
    """A stored session, or None when there is none or it cannot be read (a broken record lets no one in)."""
    if raw is None:
        return None
    try:
        fields = json.loads(raw)
        session = Session(sid, str(fields["digest"]), str(fields["key_id"]), int(fields["created_ms"]),
                          int(fields["seen_ms"]))
    except (ValueError, KeyError, TypeError):
        return None
    return session if fields.get("id") == sid else None
