"""Who is calling: the API key a request presents, and the key's record (its tenant), looked up
in the keys file and in Redis.

This module answers "which key, whose is it"; gateway/admission.py decides what follows from the
answer (refused or let in, in its one order), for every entry point alike. A key comes as
`Authorization: Bearer <key>` or `X-API-Key: <key>` (gRPC metadata of the same names), or, in the
console, from the server-side session it signed in (common/sessions.py).

Lookups are reused for at most `auth_cache_s` (0.5 s): a revoked key is refused within it.
The key itself is hashed at once and never logged, stored or echoed.
"""

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fastapi import HTTPException, Request
from redis.exceptions import RedisError

from common.redis_cluster import AnyRedis
from common.auth_keys import KeyRecord, KeysFileError, find_key, read_keys_file
from common.logs import LogThrottle
from gateway.errors import FleetUnavailable

log = logging.getLogger(__name__)

MAX_KEY_CHARS = 256  # a longer "key" is refused unread: no key the fleet makes is that long
MAX_CACHED = 10_000
# Redis lookups at once: a flood of new keys must not take every connection of the client's pool
# (100), which the reply reader and result lookups share.
MAX_CONCURRENT_LOOKUPS = 16


@dataclass(frozen=True)
class Caller:
    """The authenticated tenant of a request; both None only while authentication is switched off."""

    tenant: str | None
    key_id: str | None


ANONYMOUS = Caller(tenant=None, key_id=None)


class AmbiguousKey(ValueError):
    """More than one credential, which a proxy in front might read differently from the gateway."""


def presented_key(headers: list[tuple[bytes, bytes]]) -> str | None:
    """The key in `Authorization: Bearer` (preferred) or `X-API-Key`, or None; AmbiguousKey when
    either header comes twice."""
    found: dict[bytes, str] = {}
    for name, value in headers:
        if name in (b"authorization", b"x-api-key"):
            if name in found:
                raise AmbiguousKey(f"the {name.decode()} header is sent more than once")
            found[name] = value.decode("latin-1").strip()
    scheme, _, token = found.get(b"authorization", "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return found.get(b"x-api-key") or None


class KeysFile:
    """The mounted keys file, re-read when its modification time changes (checked at most every `every_s`).
    A file that cannot be read lets no one in by it until it is fixed."""

    def __init__(self, path: Path, every_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self._every_s = every_s
        self._clock = clock
        self._throttle = LogThrottle(log, 10.0)
        self._mtime_ns = path.stat().st_mtime_ns
        self._keys = read_keys_file(path)  # at start an unreadable file is an error the process reports
        self._checked = clock()

    def get(self, digest: str) -> KeyRecord | None:
        now = self._clock()
        if now - self._checked >= self._every_s:
            self._checked = now
            self._reload()
        return self._keys.get(digest)

    def _reload(self) -> None:
        try:
            mtime_ns = self.path.stat().st_mtime_ns
            if mtime_ns != self._mtime_ns:
                self._keys, self._mtime_ns = read_keys_file(self.path), mtime_ns
        except (OSError, KeysFileError) as exc:
            self._keys, self._mtime_ns = {}, -1
            self._throttle.log(logging.ERROR, "keys-file", "API keys file unusable, its keys are refused: %s", exc)


class KeyDirectory:
    """Key digest -> record, from the keys file first, then Redis; answers reused for `cache_s`.

    While Redis does not answer, a key Redis verified as active within the last `outage_grace_s`
    is let in on that verification (`OutageGrace`): a Redis restart shorter than that is not seen
    by callers whose keys were in use. A key never seen, or seen longer ago, is 503 meanwhile."""

    def __init__(self, redis: Callable[[], AnyRedis], *, cache_s: float, lookup_timeout_s: float,
                 keys_file: Path | None = None, outage_grace_s: float = 0.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._redis = redis
        self._cache_s = cache_s
        self._timeout_s = lookup_timeout_s
        self._clock = clock
        self._file = KeysFile(keys_file, cache_s, clock) if keys_file is not None else None
        self._cache: dict[str, tuple[float, KeyRecord | None]] = {}
        self._flights: dict[str, asyncio.Future[KeyRecord | None]] = {}
        self._lookups = asyncio.Semaphore(MAX_CONCURRENT_LOOKUPS)
        self.grace = OutageGrace(outage_grace_s, clock)

    async def lookup_digest(self, digest: str) -> KeyRecord | None:
        """The record (revoked ones included) of the key whose sha256 this is (the key is hashed at
        once; a console session holds only the digest), None for an unknown key; FleetUnavailable
        when Redis does not answer in time."""
        if self._file is not None and (record := self._file.get(digest)) is not None:
            return record
        cached = self._cache.get(digest)
        if cached is not None and cached[0] > self._clock():
            return cached[1]
        # Requests arriving together with the same key share one Redis lookup.
        flight = self._flights.get(digest)
        if flight is None:
            flight = self._flights[digest] = asyncio.ensure_future(self._query(digest))
            flight.add_done_callback(lambda done: self._landed(digest, done))
        try:
            return await asyncio.shield(flight)
        except FleetUnavailable:
            if (verified := self.grace.get(digest)) is not None:
                return verified
            raise

    async def _query(self, digest: str) -> KeyRecord | None:
        started = self._clock()
        try:
            async with asyncio.timeout(self._timeout_s), self._lookups:
                record = await find_key(self._redis(), digest)
        except (RedisError, OSError, TimeoutError) as exc:
            # Only the error's kind: its text could carry the command, and with it the digest.
            raise FleetUnavailable("redis", f"API key lookup failed ({type(exc).__name__})") from None
        self._remember(digest, record, started)
        self.grace.verified(digest, record, started)
        return record

    def _landed(self, digest: str, flight: "asyncio.Future[KeyRecord | None]") -> None:
        self._flights.pop(digest, None)
        if not flight.cancelled():
            flight.exception()  # retrieved here, so one no request awaited any more is not reported as lost

    def _remember(self, digest: str, record: KeyRecord | None, now: float) -> None:
        if self._cache_s <= 0:
            return
        if len(self._cache) >= MAX_CACHED:
            self._cache = {d: entry for d, entry in self._cache.items() if entry[0] > now}
            if len(self._cache) >= MAX_CACHED:
                self._cache.clear()
        self._cache[digest] = (now + self._cache_s, record)


class OutageGrace:
    """Keys Redis verified as active lately, to let in while Redis does not answer: each for at
    most `grace_s` after its last verification (0: never), MAX_CACHED keys at most. A key Redis
    calls unknown or revoked is dropped at once. The threat model's price: a key revoked less than
    `grace_s` before an outage began still works during that outage, up to `grace_s` after it was
    last verified (docs/operations/resilience.md)."""

    def __init__(self, grace_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.grace_s = grace_s
        self._clock = clock
        self._verified: dict[str, tuple[float, KeyRecord]] = {}
        self.used = 0  # lookups answered from here: requests let in during an outage

    def verified(self, digest: str, record: KeyRecord | None, at: float) -> None:
        if record is None or not record.active:
            self._verified.pop(digest, None)
            return
        if self.grace_s <= 0:
            return
        if digest not in self._verified and len(self._verified) >= MAX_CACHED:
            self._verified = {d: entry for d, entry in self._verified.items() if at - entry[0] < self.grace_s}
            if len(self._verified) >= MAX_CACHED:
                return  # full of fresh verifications: this key is not remembered
        self._verified[digest] = (at, record)

    def get(self, digest: str) -> KeyRecord | None:
        entry = self._verified.get(digest)
        if entry is None or self._clock() - entry[0] >= self.grace_s:
            return None
        self.used += 1
        return entry[1]


def caller_of(request: Request) -> Caller:
    """The request's caller as admission found it (gateway/http_admission.py); a route it did not
    run for lets no one in."""
    caller = getattr(request.state, "caller", None)
    if not isinstance(caller, Caller):
        raise HTTPException(401, "an API key is required", headers={"WWW-Authenticate": "Bearer"})
    return caller
