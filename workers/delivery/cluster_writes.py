"""A batch's result keys and reply-stream entries written on a Redis Cluster.

On a plain Redis the sink writes them in one script call (DELIVER_SCRIPT). A cluster refuses a
script whose keys lie in more than one hash slot, and the key names are fixed by the wire
contract (`fleet:result:<id>`, `fleet:reply:<waiter>`), so the work is split in two steps, each
one pipeline that redis-py's cluster client sends as one round trip per master:

1. every result key: SET EX (a final ok/degraded result replaces a stored one) or SET EX NX
   (an error/expired result never replaces one), noting which were written;
2. for the written results that have a waiter, XADD to its reply stream (MAXLEN ~), then EXPIRE
   on each stream touched.

Each step retries only the commands that failed (a failover mid-batch), so a SET NX that went
through is not retried into "not written" and its reply is not dropped; a retried XADD may
repeat a reply, which the waiter ignores (first reply wins). Not atomic across the two steps: a
worker that dies between them has not committed the batch, and the redelivered batch writes the
final results and their replies again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from redis.asyncio.cluster import ClusterPipeline, RedisCluster

Retry = Callable[[Callable[[], Awaitable[None]]], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class ResultWrite:
    key: str  # fleet:result:<id>
    request_id: str
    payload: bytes
    stream: str | None  # fleet:reply:<waiter>, None without a waiter
    final: bool


Command = Callable[[ClusterPipeline], Any]


async def write_on_cluster(redis: RedisCluster, writes: Sequence[ResultWrite], *, ttl_s: int, maxlen: int,
                           retry: Retry) -> list[bool]:
    """Both steps; returns, per write, whether its result key was written."""
    sets: list[Command] = [_set_command(write, ttl_s) for write in writes]
    replies = await _all_done(redis, sets, retry)
    written = [bool(reply) for reply in replies]
    adds: list[Command] = [_xadd_command(write, maxlen) for write, ok in zip(writes, written, strict=True)
                           if ok and write.stream is not None]
    streams = sorted({write.stream for write in writes if write.stream is not None})
    adds += [_expire_command(stream, ttl_s) for stream in streams]
    if adds:
        await _all_done(redis, adds, retry)
    return written


def _set_command(write: ResultWrite, ttl_s: int) -> Command:
    if write.final:
        return lambda pipe: pipe.set(write.key, write.payload, ex=ttl_s)
    return lambda pipe: pipe.set(write.key, write.payload, ex=ttl_s, nx=True)


def _xadd_command(write: ResultWrite, maxlen: int) -> Command:
    assert write.stream is not None
    fields = {"id": write.request_id, "result": write.payload}
    return lambda pipe: pipe.xadd(write.stream, fields, maxlen=maxlen, approximate=True)


def _expire_command(stream: str, ttl_s: int) -> Command:
    return lambda pipe: pipe.expire(stream, ttl_s)


async def _all_done(redis: RedisCluster, commands: Sequence[Command], retry: Retry) -> list[Any]:
    """Run `commands` in cluster pipelines until each has a reply; `retry` repeats an attempt that
    raised, and every attempt sends only the commands still without one."""
    replies: dict[int, Any] = {}

    async def attempt() -> None:
        pending = [i for i in range(len(commands)) if i not in replies]
        async with redis.pipeline(transaction=False) as pipe:
            for i in pending:
                commands[i](pipe)
            answers = await pipe.execute(raise_on_error=False)
        failed = [answer for answer in answers if isinstance(answer, BaseException)]
        replies.update((i, answer) for i, answer in zip(pending, answers, strict=True)
                       if not isinstance(answer, BaseException))
        if failed:
            raise failed[0]  # an outage (patience waits it out) or a refusal (it propagates), as on a plain Redis

    await retry(attempt)
    return [replies[i] for i in range(len(commands))]
