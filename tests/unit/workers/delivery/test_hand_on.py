"""Handing a batch to the next stage: a cancelled session is cancelled, however the race falls.

Python 3.11's `asyncio.wait_for` drops a cancellation that arrives in the loop step in which the
awaited put completes. The collector then carried on after its session had been cancelled (a
stage had failed), waited for good on a queue no one read, kept the consumer in its group with
every partition paused, and the worker neither answered nor exited.
"""

import asyncio
from typing import Any

import pytest

from workers.delivery.offsets import hand_on


class IdleConsumer:
    def __init__(self) -> None:
        self.polls = 0

    def assignment(self) -> set[Any]:
        return set()

    def paused(self) -> set[Any]:
        return set()

    def pause(self, *partitions: Any) -> None: ...

    def resume(self, *partitions: Any) -> None: ...

    async def getmany(self, timeout_ms: int = 0) -> dict[Any, Any]:
        self.polls += 1
        return {}


async def test_a_cancellation_as_the_put_completes_is_not_lost() -> None:
    queue: asyncio.Queue[str] = asyncio.Queue(maxsize=1)
    queue.put_nowait("the batch before")
    handing = asyncio.create_task(hand_on(IdleConsumer(), queue, "this batch", patience_s=60))  # type: ignore[arg-type]
    await asyncio.sleep(0.01)  # parked in put: the queue is full
    queue.get_nowait()  # the next stage takes the batch before: the put can complete...
    handing.cancel()  # ...and the session is cancelled in the same loop step
    with pytest.raises(asyncio.CancelledError):
        await handing


async def test_a_full_queue_is_waited_on_with_the_partitions_polled() -> None:
    queue: asyncio.Queue[str] = asyncio.Queue(maxsize=1)
    queue.put_nowait("the batch before")
    consumer = IdleConsumer()
    handing = asyncio.create_task(hand_on(consumer, queue, "this batch", patience_s=0.02))  # type: ignore[arg-type]
    await asyncio.sleep(0.1)
    assert not handing.done() and consumer.polls >= 2  # polling keeps the consumer in its group
    queue.get_nowait()
    await asyncio.wait_for(handing, 1)
    assert queue.get_nowait() == "this batch"


class LanePausedConsumer(IdleConsumer):
    """Owns two partitions; the lane gate paused the bulk one before the stages behind were held up."""

    def __init__(self) -> None:
        super().__init__()
        self.owned = {"interactive-0", "bulk-0"}
        self.paused_now = {"bulk-0"}

    def assignment(self) -> set[Any]:
        return set(self.owned)

    def paused(self) -> set[Any]:
        return set(self.paused_now)

    def pause(self, *partitions: Any) -> None:
        self.paused_now |= set(partitions)

    def resume(self, *partitions: Any) -> None:
        self.paused_now -= set(partitions)


async def test_partitions_a_lane_paused_stay_paused_after_the_hold_up() -> None:
    queue: asyncio.Queue[str] = asyncio.Queue(maxsize=1)
    queue.put_nowait("the batch before")
    consumer = LanePausedConsumer()
    handing = asyncio.create_task(hand_on(consumer, queue, "this batch", patience_s=0.02))  # type: ignore[arg-type]
    await asyncio.sleep(0.1)
    assert consumer.paused_now == {"interactive-0", "bulk-0"}  # held up: nothing is fetched
    queue.get_nowait()
    await asyncio.wait_for(handing, 1)
    assert consumer.paused_now == {"bulk-0"}  # the lane's pause is the gate's to lift, not hand_on's
