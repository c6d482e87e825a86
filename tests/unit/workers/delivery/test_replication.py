"""The replication wait: off by default, short replicas logged and counted, a master that does not
answer raised so that delivery writes the batch again (stand-in Redis)."""

import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from workers.delivery.replication import Replication


class Plain(Redis):
    def __init__(self, answers: list[object]) -> None:  # no connection: only WAIT is asked
        self.answers, self.asked = answers, []

    async def execute_command(self, *args: object, **options: object) -> object:
        self.asked.append(args)
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer


async def test_off_by_default_and_without_keys() -> None:
    redis = Plain([])
    await Replication().acknowledged(redis, ["fleet:result:a"])
    await Replication(replicas=1).acknowledged(redis, [])
    assert redis.asked == []


async def test_short_replicas_are_counted_and_a_dead_master_raises() -> None:
    replication = Replication(replicas=1, timeout_ms=50)
    redis = Plain([1, 0, RedisConnectionError("master gone")])
    await replication.acknowledged(redis, ["fleet:result:a"])
    assert replication.unreplicated == 0 and redis.asked == [("WAIT", 1, 50)]
    await replication.acknowledged(redis, ["fleet:result:a"])
    assert replication.unreplicated == 1
    with pytest.raises(RedisConnectionError):
        await replication.acknowledged(redis, ["fleet:result:a"])
