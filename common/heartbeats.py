"""Reading worker heartbeats and drain switches in Redis; the health states they report.

Each worker keeps a hash `fleet:worker:<model>:<worker_id>` fresh with its role, device,
health, model version and lag. The key expires `ttl_s` after the last beat, so a worker that
dies (SIGKILL, lost host) disappears by itself; nothing has to clean up after it. The writer is
workers/health/heartbeat.py; the gateway and the operator's tool read through this module. Workers are
found through a per-model index (a sorted set scored by expiry), never by SCAN: the same
Redis holds millions of cache entries and results, and a SCAN would walk them all.

`fleet:drain:<worker_id>` is the operator's switch to take a worker out of service; it has
no TTL and stays until `undrain`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from enum import StrEnum


from common.redis_cluster import AnyRedis
from schemas.names import WORKER_MODELS_KEY, drain_key, worker_key, workers_index_key

log = logging.getLogger(__name__)


class HealthState(StrEnum):
    """A worker's health as its heartbeat reports it (workers/health/monitor.py derives it)."""

    healthy = "healthy"
    degraded = "degraded"
    failed = "failed"


PRIMARY = "primary"  # the value of workers.settings.Role.primary
SHADOW = "shadow"  # a shadow consumer's role (Role.shadow): it answers no caller
SERVING_STATES = frozenset({HealthState.healthy.value, HealthState.degraded.value})
CACHE_FIELD_PREFIX = "cache_"  # heartbeat fields `cache_<tier>_hits`, `cache_<tier>_misses`
INDEX_GRACE_MS = 60_000  # index entries this long past their expiry are pruned


def _text(value: bytes | str) -> str:
    # Works with clients made with or without decode_responses.
    return value.decode() if isinstance(value, bytes) else value


@dataclass(frozen=True)
class BeatFields:
    """What changes from beat to beat."""

    state: str
    reason: str
    version: str
    lag: int
    batch: int = 0  # records in the worker's last batch
    max_batch: int = 0  # its effective max batch size now (0: not reported)
    cache: tuple[tuple[str, int], ...] = ()  # lookups since start: (`<tier>_hits` | `<tier>_misses`, count)


@dataclass(frozen=True)
class WorkerInfo:
    worker: str
    model: str
    role: str
    device: str
    state: str
    reason: str
    version: str
    lag: int
    beat_ms: int
    age_s: float  # since the last beat, when listed
    drained: bool = False
    batch: int = 0  # last batch's records; 0 in a heartbeat written before batch sizes were reported
    max_batch: int = 0
    cache: tuple[tuple[str, int], ...] = ()  # from the `cache_*` fields; empty in older heartbeats

    @property
    def answering(self) -> bool:
        """A primary or fallback (not a shadow) that is healthy or degraded and not drained: it answers callers."""
        return self.role != SHADOW and self.state in SERVING_STATES and not self.drained

    @property
    def serving_primary(self) -> bool:
        """A primary that is healthy or degraded and not drained: it can take the model's traffic."""
        return self.role == PRIMARY and self.state in SERVING_STATES and not self.drained


async def list_workers(redis: AnyRedis, model: str | None = None, *, now_s: float | None = None) -> list[WorkerInfo]:
    """Live workers (of one model), sorted by model then worker id."""
    models = [model] if model is not None else sorted(_text(m) for m in await redis.smembers(WORKER_MODELS_KEY))
    now = time.time() if now_s is None else now_s
    keys = [worker_key(name, _text(worker)) for name in models for worker in await _indexed(redis, name, now)]
    if not keys:
        return []
    async with redis.pipeline(transaction=False) as pipe:
        for key in keys:
            pipe.hgetall(key)
        hashes: list[dict[bytes | str, bytes | str]] = await pipe.execute()
    found = [info for raw in hashes if (info := _parse(raw, now)) is not None
             and (model is None or info.model == model)]
    drained = await _drained_ids(redis, [info.worker for info in found])
    found = [_with_drained(info, info.worker in drained) for info in found]
    return sorted(found, key=lambda info: (info.model, info.worker))


async def _indexed(redis: AnyRedis, model: str, now_s: float) -> list[bytes | str]:
    """Worker ids of `model` whose heartbeat has not expired (the hash itself has the last word)."""
    index = workers_index_key(model)
    now_ms = int(now_s * 1000)
    async with redis.pipeline(transaction=False) as pipe:
        pipe.zremrangebyscore(index, "-inf", now_ms - INDEX_GRACE_MS)
        pipe.zrangebyscore(index, now_ms, "+inf")
        pipe.zcard(index)
        _, workers, remaining = await pipe.execute()
    if not remaining:
        await redis.srem(WORKER_MODELS_KEY, model)  # a model nobody has served for a while
    return list(workers)


async def healthy_primaries(redis: AnyRedis, model: str) -> int:
    """Primaries of `model` that can serve: healthy or degraded, and not drained."""
    return sum(info.serving_primary for info in await list_workers(redis, model))


async def is_drained(redis: AnyRedis, worker_id: str) -> bool:
    return bool(await redis.exists(drain_key(worker_id)))


async def drain(redis: AnyRedis, worker_id: str) -> None:
    """Ask `worker_id` to stop taking work; it stays drained until `undrain`."""
    await redis.set(drain_key(worker_id), str(int(time.time() * 1000)))


async def undrain(redis: AnyRedis, worker_id: str) -> bool:
    """Let `worker_id` take work again; False when it was not drained."""
    return bool(await redis.delete(drain_key(worker_id)))


async def _drained_ids(redis: AnyRedis, worker_ids: list[str]) -> set[str]:
    if not worker_ids:
        return set()
    async with redis.pipeline(transaction=False) as pipe:
        for worker_id in worker_ids:
            pipe.exists(drain_key(worker_id))
        flags: list[int] = await pipe.execute()
    return {worker_id for worker_id, flag in zip(worker_ids, flags, strict=True) if flag}


def _parse(raw: dict[bytes | str, bytes | str], now_s: float) -> WorkerInfo | None:
    fields = {_text(k): _text(v) for k, v in raw.items()}
    if not fields:
        return None  # expired between reading the index and HGETALL
    try:
        beat_ms = int(fields.get("beat_ms", "0"))
        return WorkerInfo(worker=fields["worker"], model=fields["model"], role=fields.get("role", ""),
                          device=fields.get("device", ""), state=fields.get("state", ""),
                          reason=fields.get("reason", ""), version=fields.get("version", ""),
                          lag=int(fields.get("lag", "0")), beat_ms=beat_ms, age_s=max(now_s - beat_ms / 1000, 0.0),
                          batch=int(fields.get("batch", "0")), max_batch=int(fields.get("max_batch", "0")),
                          cache=tuple(sorted((k.removeprefix(CACHE_FIELD_PREFIX), int(v)) for k, v in fields.items()
                                             if k.startswith(CACHE_FIELD_PREFIX))))
    except (KeyError, ValueError):
        log.warning("unreadable heartbeat %r", fields)
        return None


def _with_drained(info: WorkerInfo, drained: bool) -> WorkerInfo:
    return info if info.drained == drained else replace(info, drained=drained)
