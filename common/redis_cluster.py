"""What the fleet does differently on a Redis Cluster (FLEET_REDIS_CLUSTER=true), in one place.

A cluster refuses a command, script or MULTI whose keys lie in more than one hash slot. The
key names are part of the wire contract (schemas/names.py: `fleet:result:<id>`,
`fleet:reply:<waiter>`, ...), so they get no hash tags; instead the multi-key operations below
split their keys by slot on a cluster and keep the one-call form on a plain Redis:

    values = await mget_all(redis, keys)           # MGET, or one MGET per slot
    await set_all(redis, pairs, ttl_s, script)     # one script call, or SETs in a cluster pipeline
    async with multi_key_pipeline(redis) as pipe:  # MULTI, or a plain pipeline across slots
        ...

`redis.asyncio.cluster.RedisCluster` itself routes each single-key command to the master of its
slot, follows MOVED/ASK after a failover, runs SCAN on every master (`scan_iter`) and splits
DEL/UNLINK by slot, so code that uses only those needs nothing from here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import Any, TypeAlias, TypeVar

from redis import exceptions as redis_exceptions
from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.asyncio.cluster import ClusterPipeline, RedisCluster
from redis.commands.core import AsyncScript
from redis.crc import key_slot
from redis.exceptions import ConnectionError as RedisConnectionError, RedisClusterException, RedisError, \
    SlotNotCoveredError

# What common.clients.redis_client builds: a plain client, or a cluster client when FLEET_REDIS_CLUSTER is true.
AnyRedis: TypeAlias = Redis | RedisCluster
AnyPipeline: TypeAlias = Pipeline | ClusterPipeline
# Errors of a Redis that is down or failing over. SlotNotCoveredError (no master known for a slot
# while a failover is under way) is no RedisError in redis-py, so `except RedisError` misses it.
REDIS_DOWN: tuple[type[BaseException], ...] = (RedisError, OSError, SlotNotCoveredError)


def text_of(value: bytes | str) -> str:
    """A reply as text, from a client made with or without decode_responses."""
    return value.decode() if isinstance(value, bytes) else value

K = TypeVar("K", str, bytes)

# What redis-py raises when no node answers: a bare RedisClusterException, or in redis-py 8.2 its
# subclass RedisClusterUnreachableError (still no RedisError).
_NO_NODE_ANSWERED: tuple[type[RedisClusterException], ...] = (RedisClusterException, getattr(
    redis_exceptions, "RedisClusterUnreachableError", RedisClusterException))


class FleetRedisCluster(RedisCluster):
    """RedisCluster whose connection failures read as a plain client's do.

    When no node answers, redis-py's cluster client raises a bare RedisClusterException (in 8.2
    its subclass RedisClusterUnreachableError; no RedisError) that wraps the real cause, so the
    fleet's `except RedisError` handlers (delivery waiting out an outage, "cannot reach Redis"
    from the CLI, a refused password at start) would miss it. Here the cause comes out instead:
    the ConnectionError, TimeoutError or AuthenticationError itself; a cluster without full slot
    coverage is a ConnectionError. A node that is no cluster node (FLEET_REDIS_CLUSTER=true
    against a plain Redis) still raises as is.

    And while a node fails, redis-py 8 (before 8.2) can close a connection that another task is
    sending on; that task dies of `'NoneType' object has no attribute 'writelines'` inside
    redis/asyncio/connection.py (seen here under a master SIGKILL, in commands and pipelines).
    That is a lost connection, so it is raised as a ConnectionError, which delivery waits out and
    callers already handle; an AttributeError raised anywhere else is a bug and stays one.
    """

    def pipeline(self, transaction: Any | None = None, shard_hint: Any | None = None) -> ClusterPipeline:
        if shard_hint:
            raise RedisClusterException("shard_hint is deprecated in cluster mode")
        return _FleetClusterPipeline(self, transaction)

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().execute_command(*args, **kwargs)
        except AttributeError as exc:
            if not _raised_in_redis_connection(exc):
                raise
            raise _lost_connection(exc) from exc

    async def initialize(self, *args: Any, **kwargs: Any) -> RedisCluster:
        try:
            return await super().initialize(*args, **kwargs)
        except RedisClusterException as exc:
            if type(exc) not in _NO_NODE_ANSWERED or "Cluster mode is not enabled" in str(exc):
                raise
            if isinstance(exc.__cause__, (RedisError, OSError)):
                raise exc.__cause__ from None
            raise RedisConnectionError(str(exc)) from None


class _FleetClusterPipeline(ClusterPipeline):
    async def execute(self, raise_on_error: bool = True, allow_redirections: bool = True) -> list[Any]:
        try:
            return await super().execute(raise_on_error=raise_on_error, allow_redirections=allow_redirections)
        except AttributeError as exc:
            if not _raised_in_redis_connection(exc):
                raise
            raise _lost_connection(exc) from exc


def _lost_connection(exc: AttributeError) -> RedisConnectionError:
    return RedisConnectionError(f"connection closed under a command (a node failing): {exc}")


def _raised_in_redis_connection(exc: BaseException) -> bool:
    """The innermost frame of `exc` is in redis-py's asyncio connection module (see FleetRedisCluster)."""
    tb: TracebackType | None = exc.__traceback__
    last = None
    while tb is not None:
        last, tb = tb, tb.tb_next
    return last is not None and last.tb_frame.f_code.co_filename.replace("\\", "/").endswith(
        "redis/asyncio/connection.py")


def is_cluster(redis: AnyRedis) -> bool:
    return isinstance(redis, RedisCluster)


def slot_of(key: str | bytes) -> int:
    """The hash slot of `key` (0..16383), hash tags respected: what a cluster routes by."""
    return key_slot(key.encode() if isinstance(key, str) else key)


def group_by_slot(keys: Iterable[K]) -> dict[int, list[int]]:
    """Positions of `keys` grouped by hash slot: slot -> positions in order (a key repeated keeps each position)."""
    groups: dict[int, list[int]] = {}
    for position, key in enumerate(keys):
        groups.setdefault(slot_of(key), []).append(position)
    return groups


def single_slot(keys: Iterable[str | bytes]) -> bool:
    """True when every key lies in one slot (or there are none): a script or MULTI over them runs on a cluster."""
    return len({slot_of(key) for key in keys}) <= 1


async def mget_all(redis: AnyRedis, keys: Sequence[str]) -> list[bytes | None]:
    """MGET of `keys`, one answer per key in order; on a cluster one MGET per slot (not atomic across slots)."""
    if not keys:
        return []
    if isinstance(redis, RedisCluster):
        values: list[bytes | None] = await redis.mget_nonatomic(list(keys))
    else:
        values = await redis.mget(list(keys))
    return values


async def set_all(redis: AnyRedis, pairs: Sequence[tuple[str, bytes]], ttl_s: int, script: AsyncScript) -> None:
    """SET key value EX ttl_s for every pair. `script` takes KEYS = keys and ARGV = ttl, then the
    values: one call on a plain Redis. On a cluster, SETs in one pipeline (one round trip per master)."""
    if not pairs:
        return
    if isinstance(redis, RedisCluster):
        async with redis.pipeline(transaction=False) as pipe:
            for key, value in pairs:
                pipe.set(key, value, ex=ttl_s)
            await pipe.execute()
        return
    await script(keys=[key for key, _ in pairs], args=[ttl_s, *(value for _, value in pairs)])


def multi_key_pipeline(redis: AnyRedis, *, transaction: bool = True) -> Any:
    """A pipeline over keys of different slots: MULTI/EXEC on a plain Redis (when `transaction`),
    a plain pipeline on a cluster, which refuses a transaction across slots. Use it only where
    the commands need not be all-or-nothing (each one is safe to see alone)."""
    return redis.pipeline(transaction=transaction and not isinstance(redis, RedisCluster))
