"""gateway/deadline.py: a deadline that behaves as asyncio.timeout_at, and request ids as random as
secrets.token_hex(16) makes them."""

import asyncio
import re

import pytest

from gateway.deadline import IDS_PER_READ, Deadline, RequestIds


async def test_a_block_past_its_deadline_ends_in_timeout_error_at_the_deadline() -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(TimeoutError):
        async with Deadline(loop, started + 0.05):
            await asyncio.sleep(5)
    assert 0.05 <= loop.time() - started < 1.0
    await asyncio.sleep(0)  # no cancellation is left pending on the task


async def test_a_block_within_its_deadline_is_untouched() -> None:
    loop = asyncio.get_running_loop()
    async with Deadline(loop, loop.time() + 5):
        await asyncio.sleep(0.01)
        value = 42
    assert value == 42
    await asyncio.sleep(0.06)  # the timer was cancelled: nothing fires later


async def test_a_cancellation_from_outside_stays_a_cancellation() -> None:
    loop = asyncio.get_running_loop()

    async def guarded() -> None:
        async with Deadline(loop, loop.time() + 5):
            await asyncio.sleep(5)

    task = asyncio.create_task(guarded())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_request_ids_are_128_random_bits_in_hex_and_never_repeat() -> None:
    ids = RequestIds()
    made = [ids.new() for _ in range(IDS_PER_READ * 5 + 3)]  # across several reads of the random source
    assert all(re.fullmatch(r"[0-9a-f]{32}", made_id) for made_id in made)
    assert len(set(made)) == len(made)
    assert RequestIds().new() != RequestIds().new()
