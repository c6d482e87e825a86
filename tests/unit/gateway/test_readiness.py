"""/readyz's checks: one at a time, shared by every caller meanwhile, fresh for a second."""

import asyncio

from gateway.readiness import Readiness


class Dependency:
    def __init__(self, delay_s: float = 0.01, fails: bool = False) -> None:
        self.asked = 0
        self.delay_s = delay_s
        self.fails = fails

    async def ping(self) -> None:
        self.asked += 1
        await asyncio.sleep(self.delay_s)
        if self.fails:
            raise ConnectionError("down")


async def test_a_burst_of_callers_shares_one_check() -> None:
    redis, kafka = Dependency(), Dependency(fails=True)
    readiness = Readiness({"redis": redis.ping, "kafka": kafka.ping}, timeout_s=1.0)
    answers = await asyncio.gather(*(readiness.checks() for _ in range(300)))
    assert answers == [{"redis": True, "kafka": False}] * 300
    assert (redis.asked, kafka.asked) == (1, 1)


async def test_an_answer_serves_until_it_is_stale() -> None:
    redis = Dependency()
    readiness = Readiness({"redis": redis.ping}, timeout_s=1.0, fresh_s=0.05)
    await readiness.checks()
    await readiness.checks()
    assert redis.asked == 1
    await asyncio.sleep(0.06)
    redis.fails = True
    assert await readiness.checks() == {"redis": False}
    assert redis.asked == 2


async def test_a_hanging_dependency_is_down_after_the_timeout() -> None:
    readiness = Readiness({"kafka": Dependency(delay_s=60).ping}, timeout_s=0.05)
    assert await asyncio.wait_for(readiness.checks(), 1.0) == {"kafka": False}


async def test_a_caller_that_goes_away_does_not_cancel_the_others_check() -> None:
    redis = Dependency(delay_s=0.05)
    readiness = Readiness({"redis": redis.ping}, timeout_s=1.0)
    leaving = asyncio.ensure_future(readiness.checks())
    staying = asyncio.ensure_future(readiness.checks())
    await asyncio.sleep(0.01)
    leaving.cancel()
    assert await staying == {"redis": True}
    assert redis.asked == 1
