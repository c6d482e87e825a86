"""The model catalogue: which models the fleet serves, which are retired, and what each gateway serves.

The registry on disk (models/registry.py) holds every version ever built or imported, including
the cache verifier the workers use internally, benchmark copies and abandoned imports. What the
fleet *serves* is smaller, and lives in Redis so that every gateway and the console see the same
list without a restart:

- `fleet:catalog` (hash): model -> JSON `CatalogEntry`. A model is listed the first time a stable
  version is set (versions/pointers.py writes it with the pointers), and stays listed until an
  operator retires it (`fleet models retire`); a retired version of a listed model stays in the
  entry, so pins to it are refused.
- `fleet:gateway:<id>` (string, JSON `GatewayBeat`, with a TTL) and the index `fleet:gateways`
  (sorted set scored by expiry, as the workers' index): each gateway process says what it serves.

A gateway serves the listed models and the models live workers serve (a fleet whose pointers
predate the catalogue keeps working), less the retired ones; `FLEET_MODELS`, when set, is an
allow-list instead (gateway/catalog.py).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from enum import StrEnum

from redis.exceptions import WatchError

from common.redis_cluster import AnyRedis, text_of
from schemas.names import CATALOG_KEY, GATEWAYS_KEY, gateway_key

MAX_WATCH_RETRIES = 50
MAX_RETIRED_VERSIONS = 1000  # a model's retired versions kept in its entry (oldest dropped)
MAX_REASON_CHARS = 200  # every gateway reads every entry every poll: reasons stay short
GATEWAY_INDEX_GRACE_MS = 60_000


class Listing(StrEnum):
    served = "served"
    retired = "retired"


class CatalogError(Exception):
    """A catalogue change that makes no sense now; the message says why."""


@dataclass(frozen=True)
class CatalogEntry:
    listing: Listing
    retired_versions: tuple[str, ...] = ()
    actor: str = ""
    reason: str = ""
    updated_ms: int = 0

    def encode(self) -> str:
        return json.dumps({**asdict(self), "listing": self.listing.value,
                           "retired_versions": list(self.retired_versions)})

    @classmethod
    def decode(cls, raw: bytes | str) -> CatalogEntry | None:
        """The entry, or None for one that does not parse (a hand-edited hash must not stop a gateway)."""
        try:
            fields = json.loads(raw)
            return cls(listing=Listing(fields["listing"]),
                       retired_versions=tuple(map(str, fields.get("retired_versions", ()))),
                       actor=str(fields.get("actor", "")), reason=str(fields.get("reason", "")),
                       updated_ms=int(fields.get("updated_ms", 0)))
        except (ValueError, KeyError, TypeError):
            return None

    @property
    def retired(self) -> bool:
        return self.listing is Listing.retired

    def why_retired(self, model: str, version: str | None = None, *, for_callers: bool = False) -> str:
        """For callers (a 404 a tenant reads): when and why, not which operator (the audit log says)."""
        what = f"version {version[:80]} of {model[:80]}" if version is not None else f"model {model[:80]}"
        when = time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(self.updated_ms / 1000)) if self.updated_ms else "?"
        who = "" if for_callers else f"by {self.actor or '?'} "
        return f"{what} is retired ({who}at {when}: {self.reason or 'no reason given'})"


_Mutation = Callable[[CatalogEntry | None], CatalogEntry]


async def read_catalog(redis: AnyRedis) -> dict[str, CatalogEntry]:
    raw: Mapping[bytes | str, bytes | str] = await redis.hgetall(CATALOG_KEY)  # type: ignore[misc]
    return {text_of(model): entry for model, value in raw.items() if (entry := CatalogEntry.decode(value)) is not None}


async def read_entry(redis: AnyRedis, model: str) -> CatalogEntry | None:
    raw = await redis.hget(CATALOG_KEY, model)  # type: ignore[misc]
    return CatalogEntry.decode(raw) if raw is not None else None


async def list_model(redis: AnyRedis, model: str, actor: str, reason: str) -> None:
    """List `model` as served unless it is listed already (a retired model stays retired)."""
    entry = CatalogEntry(Listing.served, actor=actor, reason=reason, updated_ms=int(time.time() * 1000))
    await redis.hsetnx(CATALOG_KEY, model, entry.encode())  # type: ignore[misc]


async def serve_model(redis: AnyRedis, model: str, version: str, actor: str, reason: str) -> CatalogEntry:
    """List `model` as served with `version` stable: a retirement of the model, or of that version, is lifted
    (the model's other retired versions stay retired)."""
    return await _change(redis, model, lambda entry: CatalogEntry(
        Listing.served, tuple(v for v in (entry.retired_versions if entry is not None else ()) if v != version),
        actor, reason[:MAX_REASON_CHARS], _now_ms()))


async def retire(redis: AnyRedis, model: str, version: str | None, actor: str, reason: str, *,
                 serving: frozenset[str] = frozenset()) -> CatalogEntry:
    """Retire `model`, or one `version` of it; `serving` are the versions its pointers name (stable,
    candidate): a version that serves cannot be retired alone."""
    reason = reason[:MAX_REASON_CHARS]
    if version is not None and version in serving:
        raise CatalogError(f"{version} is a version {model} serves now (stable or candidate); point stable "
                           "elsewhere or roll the candidate back first, or retire the whole model")

    def change(entry: CatalogEntry | None) -> CatalogEntry:
        if version is None:
            return CatalogEntry(Listing.retired, entry.retired_versions if entry is not None else (), actor, reason,
                                _now_ms())
        retired = tuple(v for v in (entry.retired_versions if entry is not None else ()) if v != version)
        listing = entry.listing if entry is not None else Listing.served
        return CatalogEntry(listing, (*retired, version)[-MAX_RETIRED_VERSIONS:], actor, reason, _now_ms())

    return await _change(redis, model, change)


async def _change(redis: AnyRedis, model: str, mutate: _Mutation) -> CatalogEntry:
    async with redis.pipeline(transaction=True) as pipe:
        for _ in range(MAX_WATCH_RETRIES):
            try:
                await pipe.watch(CATALOG_KEY)
                raw = await pipe.hget(CATALOG_KEY, model)  # type: ignore[misc]
                after = mutate(CatalogEntry.decode(raw) if raw is not None else None)
                pipe.multi()
                pipe.hset(CATALOG_KEY, model, after.encode())
                await pipe.execute()
                return after
            except WatchError:
                continue
            finally:
                await pipe.reset()
    raise CatalogError(f"{CATALOG_KEY} kept changing; gave up after {MAX_WATCH_RETRIES} tries")


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class GatewayBeat:
    """What one gateway process serves now."""

    gateway: str  # host:pid
    served: tuple[str, ...]
    allow_list: tuple[str, ...] | None = None  # FLEET_MODELS, when set
    written_ms: int = 0

    def encode(self) -> str:
        return json.dumps({**asdict(self), "served": list(self.served),
                           "allow_list": list(self.allow_list) if self.allow_list is not None else None})

    @classmethod
    def decode(cls, raw: bytes | str) -> GatewayBeat | None:
        try:
            fields = json.loads(raw)
            allow = fields.get("allow_list")
            return cls(gateway=str(fields["gateway"]), served=tuple(map(str, fields["served"])),
                       allow_list=tuple(map(str, allow)) if allow is not None else None,
                       written_ms=int(fields.get("written_ms", 0)))
        except (ValueError, KeyError, TypeError):
            return None

    def with_time(self) -> GatewayBeat:
        return replace(self, written_ms=_now_ms())


async def write_gateway_beat(redis: AnyRedis, beat: GatewayBeat, ttl_s: float) -> None:
    """Write the beat; the index drops gateways gone for a minute (each restart is a new host:pid)."""
    ttl_ms = max(int(ttl_s * 1000), 1000)
    written = beat.with_time()
    await redis.set(gateway_key(beat.gateway), written.encode(), px=ttl_ms)
    await redis.zadd(GATEWAYS_KEY, {beat.gateway: written.written_ms + ttl_ms})
    await redis.zremrangebyscore(GATEWAYS_KEY, "-inf", written.written_ms - GATEWAY_INDEX_GRACE_MS)


async def remove_gateway_beat(redis: AnyRedis, gateway: str) -> None:
    await redis.delete(gateway_key(gateway))
    await redis.zrem(GATEWAYS_KEY, gateway)


async def list_gateways(redis: AnyRedis) -> list[GatewayBeat]:
    """The gateways whose beat has not expired, by id."""
    now_ms = _now_ms()
    await redis.zremrangebyscore(GATEWAYS_KEY, "-inf", now_ms - GATEWAY_INDEX_GRACE_MS)
    ids = [text_of(member) for member in await redis.zrangebyscore(GATEWAYS_KEY, now_ms, "+inf")]
    beats = []
    for gateway in ids:  # not one MGET: on a Redis Cluster the keys lie in different slots
        raw = await redis.get(gateway_key(gateway))
        if raw is not None and (beat := GatewayBeat.decode(raw)) is not None:
            beats.append(beat)
    return sorted(beats, key=lambda beat: beat.gateway)

