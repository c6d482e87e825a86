"""A Kafka member's stop is bounded: a join that never settles and a leave that never returns
give way to `request_stop()` and to LEAVE_TIMEOUT_S instead of hanging the process."""

import asyncio

import pytest

from common.settings import FleetSettings
from common.startup import StartupTimedOut
from workers import membership
from workers.membership import KafkaMember


class NeverStops:
    """A consumer whose stop() waits forever, as aiokafka's does in a group that never settles."""

    def __init__(self) -> None:
        self.stopping = False

    async def stop(self) -> None:
        self.stopping = True
        await asyncio.Event().wait()


class Member(KafkaMember):
    async def _open(self) -> None:
        return None


async def test_a_stop_request_cancels_a_step_that_would_never_finish() -> None:
    member = Member()
    cancelled = asyncio.Event()

    async def join_forever() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    asyncio.get_running_loop().call_later(0.05, member.request_stop)
    assert await asyncio.wait_for(member._unless_stopped(join_forever()), 5) is False
    assert cancelled.is_set()


async def test_a_step_that_finishes_first_reports_true_and_passes_its_error_on() -> None:
    member = Member()

    async def quick() -> None:
        return None

    async def broken() -> None:
        raise ValueError("join refused")

    assert await member._unless_stopped(quick()) is True
    with pytest.raises(ValueError, match="join refused"):
        await member._unless_stopped(broken())


async def test_leaving_gives_up_after_the_timeout(monkeypatch: pytest.MonkeyPatch,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(membership, "LEAVE_TIMEOUT_S", 0.1)
    member = Member()
    consumer = NeverStops()
    member._consumer = consumer  # type: ignore[assignment]
    await asyncio.wait_for(member.stop(), 5)  # a guard against a hang, not a measurement
    # The consumer never stops: stop() returning at all is giving up, and the log says after how long.
    assert consumer.stopping
    assert member.assignment() == frozenset()
    assert "did not leave its group within 0.1 s" in caplog.text


class NeverJoins(NeverStops):
    """A consumer whose start() waits for an assignment that never comes."""

    async def start(self) -> None:
        await asyncio.Event().wait()


async def test_a_start_cut_off_by_the_startup_window_does_not_wait_for_its_stop(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(membership, "LEAVE_TIMEOUT_S", 0.1)
    consumers: list[NeverJoins] = []

    def make() -> NeverJoins:
        consumers.append(NeverJoins())
        return consumers[-1]

    settings = FleetSettings(startup_timeout_s=0.2)
    with pytest.raises(StartupTimedOut, match="joining the group"):  # wait_for: a guard against a hang
        await asyncio.wait_for(membership.started_consumer(settings, "worker", make), 5)  # type: ignore[arg-type]
    assert consumers and all(consumer.stopping for consumer in consumers)
    assert "worker did not leave its group within 0.1 s" in caplog.text
