"""Result delivery on a Redis Cluster (workers/delivery/cluster_writes.py) without a server: each
attempt sends only the commands still unanswered, and a reply goes out only for a written result.
(Against a real cluster: tests/integration/fleet_dev/stack/test_fleet_on_redis_cluster.py.)"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from workers.delivery.cluster_writes import ResultWrite, write_on_cluster


class _Pipe:
    """Records the commands queued on it; `execute` answers each from `answer(command)`."""

    def __init__(self, log: list[list[tuple[Any, ...]]], answer: Callable[[tuple[Any, ...]], Any]) -> None:
        self.log, self.answer, self.queued = log, answer, []

    async def __aenter__(self) -> _Pipe:
        return self

    async def __aexit__(self, *exc: object) -> None:
        pass

    def set(self, key: str, value: bytes, ex: int, nx: bool = False) -> None:
        self.queued.append(("SET", key, "NX" if nx else "REPLACE"))

    def xadd(self, stream: str, fields: dict[str, Any], maxlen: int, approximate: bool) -> None:
        self.queued.append(("XADD", stream, fields["id"]))

    def expire(self, stream: str, ttl: int) -> None:
        self.queued.append(("EXPIRE", stream))

    async def execute(self, raise_on_error: bool = True) -> list[Any]:
        assert raise_on_error is False
        self.log.append(self.queued)
        return [self.answer(command) for command in self.queued]


class _Cluster:
    def __init__(self, answer: Callable[[tuple[Any, ...]], Any]) -> None:
        self.sent: list[list[tuple[Any, ...]]] = []
        self.answer = answer

    def pipeline(self, transaction: bool) -> _Pipe:
        assert transaction is False
        return _Pipe(self.sent, self.answer)


async def _retry_until_done(attempt: Callable[[], Awaitable[None]]) -> None:
    for _ in range(5):
        try:
            return await attempt()
        except RedisConnectionError:
            continue
    raise AssertionError("still failing after 5 attempts")


async def test_cluster_delivery_retries_only_what_failed_and_replies_only_when_written() -> None:
    failures = {("SET", "k2", "NX"): 1, ("XADD", "s1", "r1"): 1}  # fail once each, as a failover would

    def answer(command: tuple[Any, ...]) -> Any:
        if failures.get(command):
            failures[command] -= 1
            return RedisConnectionError("node went away")
        if command == ("SET", "k3", "NX"):
            return None  # a stored result is not replaced by a non-final one
        return True

    cluster = _Cluster(answer)
    writes = [ResultWrite("k1", "r1", b"ok", "s1", final=True), ResultWrite("k2", "r2", b"err", "s1", final=False),
              ResultWrite("k3", "r3", b"err", "s2", final=False), ResultWrite("k4", "r4", b"ok", None, final=True)]
    written = await write_on_cluster(cluster, writes, ttl_s=60, maxlen=100,  # type: ignore[arg-type]
                                     retry=_retry_until_done)
    assert written == [True, True, False, True]
    sets_first, sets_again, adds_first, adds_again = cluster.sent
    assert [c[1] for c in sets_first] == ["k1", "k2", "k3", "k4"] and sets_again == [("SET", "k2", "NX")]
    # k2 went through on its retry, so its reply is sent; k3 was not written: no reply; k4 has no waiter.
    assert adds_first == [("XADD", "s1", "r1"), ("XADD", "s1", "r2"), ("EXPIRE", "s1"), ("EXPIRE", "s2")]
    assert adds_again == [("XADD", "s1", "r1")]


async def test_cluster_delivery_passes_a_refusal_on() -> None:
    cluster = _Cluster(lambda command: ValueError("WRONGTYPE"))
    with pytest.raises(ValueError, match="WRONGTYPE"):
        await write_on_cluster(cluster, [ResultWrite("k", "r", b"ok", None, True)],  # type: ignore[arg-type]
                               ttl_s=1, maxlen=1, retry=_retry_until_done)
