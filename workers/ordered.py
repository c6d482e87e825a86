"""A pipeline stage that works on several items at once and passes them on in the order they came.

The prepare stage works on four batches, each mostly waiting for the GIL between its thread hops;
the compute stage keeps two batches on a device that queues work; the deliver stage keeps three
deliveries in flight, so one batch's writes go out while the previous batches' acknowledgements
are on their way. Either way what leaves the stage leaves in arrival order, which is what lets the
settle stage commit offsets in order and never past an undelivered batch.
"""

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

In = TypeVar("In")
Out = TypeVar("Out")


async def in_order(inbox: "asyncio.Queue[In | None]", out: "asyncio.Queue[Out | None]",
                   work: Callable[[In], Awaitable[Out]], depth: int,
                   done: Callable[[Out], None] = lambda _: None) -> None:
    """`work` on up to `depth` items at once until the None that ends the inbox; each result is
    given to `done`, then put on `out`, in inbox order; None follows the last. A failing `work`
    fails the stage (the task group cancels the rest), as a failure of the stage itself would."""
    if depth < 1:
        raise ValueError(f"items in flight must be at least 1, got {depth}")
    slots = asyncio.Semaphore(depth)
    running: asyncio.Queue[asyncio.Task[Out] | None] = asyncio.Queue()  # bounded by the slots
    async with asyncio.TaskGroup() as tasks:
        tasks.create_task(_submit(inbox, running, slots, tasks, work))
        while (task := await running.get()) is not None:
            result = await task
            slots.release()
            done(result)
            await out.put(result)
    await out.put(None)


async def _submit(inbox: "asyncio.Queue[In | None]", running: "asyncio.Queue[asyncio.Task[Out] | None]",
                  slots: asyncio.Semaphore, tasks: asyncio.TaskGroup, work: Callable[[In], Awaitable[Out]]) -> None:
    while (item := await inbox.get()) is not None:
        await slots.acquire()
        running.put_nowait(tasks.create_task(work(item)))  # type: ignore[arg-type]
    running.put_nowait(None)


async def flatten(inbox: "asyncio.Queue[list[Out] | None]", out: "asyncio.Queue[Out | None]") -> None:
    """Each item of the lists arriving on `inbox` on to `out`, in order; None follows the last."""
    while (items := await inbox.get()) is not None:
        for item in items:
            await out.put(item)
    await out.put(None)
