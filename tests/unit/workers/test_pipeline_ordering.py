"""The ordered stage: items worked on together leave in arrival order; a failure fails the stage."""

import asyncio
import random

import pytest

from workers.delivery.turns import Turns
from workers.pipeline import flatten, in_order


async def run_stage(items: list[int], depth: int, delays: dict[int, float]) -> tuple[list[int | None], int]:
    inbox: asyncio.Queue[int | None] = asyncio.Queue()
    out: asyncio.Queue[int | None] = asyncio.Queue()
    for item in [*items, None]:
        inbox.put_nowait(item)
    running = peak = 0

    async def work(item: int) -> int:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(delays.get(item, 0.0))
        running -= 1
        return item * 10

    await asyncio.wait_for(in_order(inbox, out, work, depth), 10)
    return [out.get_nowait() for _ in range(out.qsize())], peak


async def test_items_overlap_up_to_the_depth_and_leave_in_arrival_order() -> None:
    rng = random.Random(7)
    delays = {item: rng.uniform(0, 0.02) for item in range(20)}
    seen, peak = await run_stage(list(range(20)), 3, delays)
    assert seen == [item * 10 for item in range(20)] + [None]
    assert peak == 3


async def test_depth_one_works_on_one_item_at_a_time() -> None:
    seen, peak = await run_stage([1, 2, 3], 1, {1: 0.01})
    assert seen == [10, 20, 30, None] and peak == 1


async def test_a_failing_item_fails_the_stage() -> None:
    inbox: asyncio.Queue[int | None] = asyncio.Queue()
    out: asyncio.Queue[int | None] = asyncio.Queue()
    for item in (1, 2, None):
        inbox.put_nowait(item)

    async def work(item: int) -> int:
        if item == 2:
            raise RuntimeError("bad item")
        return item

    with pytest.raises(BaseExceptionGroup) as failure:
        await in_order(inbox, out, work, 2)
    assert failure.group_contains(RuntimeError, match="bad item")


def test_a_depth_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        asyncio.run(in_order(asyncio.Queue(), asyncio.Queue(), lambda item: asyncio.sleep(0), 0))


async def test_turns_go_in_the_order_taken_whoever_asks_first() -> None:
    turns = Turns()
    first, second, third = turns.take(), turns.take(), turns.take()
    order: list[str] = []

    async def use(name: str, turn, delay: float) -> None:  # type: ignore[no-untyped-def]
        await asyncio.sleep(delay)
        async with turn:
            order.append(name)

    await asyncio.gather(use("third", third, 0.0), use("second", second, 0.0), use("first", first, 0.02))
    assert order == ["first", "second", "third"]


async def test_a_released_turn_lets_the_next_go_without_being_used() -> None:
    turns = Turns()
    unused, next_one = turns.take(), turns.take()
    unused.release()
    async with next_one:
        pass
    async with unused:  # a retry may enter a released turn again
        pass


async def test_flatten_passes_each_item_on_in_order() -> None:
    inbox: asyncio.Queue[list[int] | None] = asyncio.Queue()
    out: asyncio.Queue[int | None] = asyncio.Queue()
    for items in ([1, 2], [], [3], None):
        inbox.put_nowait(items)
    await asyncio.wait_for(flatten(inbox, out), 5)
    assert [out.get_nowait() for _ in range(out.qsize())] == [1, 2, 3, None]
