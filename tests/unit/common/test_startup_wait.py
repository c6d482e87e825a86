"""Start-up waits out an outage with bounded retries, then ends with one line (common/startup.py)."""

import asyncio
import logging

import pytest
from aiokafka.errors import KafkaConnectionError
from redis.exceptions import AuthenticationError, ConnectionError as RedisConnectionError

from common.startup import StartupTimedOut, waited


class Flaky:
    """Fails with `error` the first `failures` calls, then answers "up"."""

    def __init__(self, failures: int, error: BaseException) -> None:
        self.failures = failures
        self.error = error
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return "up"


async def test_an_outage_shorter_than_the_window_is_waited_out(caplog: pytest.LogCaptureFixture) -> None:
    step = Flaky(3, KafkaConnectionError("Unable to bootstrap from [('127.0.0.1', 1)]"))
    with caplog.at_level(logging.WARNING, logger="common.startup"):
        assert await waited("worker", "Kafka at 127.0.0.1:1", step, timeout_s=20) == "up"
    assert step.calls == 4
    waits = [r.getMessage() for r in caplog.records]
    assert len(waits) == 1, "one line per LOG_EVERY_S, not one per attempt"
    assert waits[0].startswith("worker waiting for Kafka at 127.0.0.1:1 (KafkaConnectionError")


async def test_an_outage_longer_than_the_window_ends_with_one_line() -> None:
    step = Flaky(10**6, RedisConnectionError("Error 111 connecting to 127.0.0.1:1.\nConnection refused."))
    with pytest.raises(StartupTimedOut) as ended:
        await waited("gateway", "Redis at redis://127.0.0.1:1/0", step, timeout_s=0.5)
    message = str(ended.value)
    assert message == ("gateway cannot start: Redis at redis://127.0.0.1:1/0 did not answer within 0.5 s; "
                       "last error: ConnectionError: Error 111 connecting to 127.0.0.1:1.")
    assert "\n" not in message
    assert step.calls >= 2, "it retried before giving up"


async def test_a_step_that_hangs_is_cut_off_at_the_deadline() -> None:
    async def hangs() -> None:
        await asyncio.Event().wait()

    with pytest.raises(StartupTimedOut, match="did not answer within 0.3 s; last error: TimeoutError"):
        await waited("shadow", "Kafka", hangs, timeout_s=0.3)


@pytest.mark.parametrize("error", [AuthenticationError("WRONGPASS"), ValueError("a bug is no outage")])
async def test_refusals_and_bugs_are_not_retried(error: BaseException) -> None:
    step = Flaky(1, error)
    with pytest.raises(type(error)):
        await waited("worker", "Redis", step, timeout_s=20)
    assert step.calls == 1
