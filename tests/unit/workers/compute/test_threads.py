"""The stage threads: a pool of the worker's own, sized to its stages, apart from asyncio's default pool."""

import asyncio
import contextvars
import threading

from workers.compute.threads import in_thread, stage_threads

CALLER = contextvars.ContextVar("caller", default="nobody")


async def test_work_runs_on_the_given_pool_with_the_callers_context() -> None:
    CALLER.set("the stage")
    with stage_threads(prepare_depth=1, compute_depth=1) as pool:
        name, seen = await in_thread(pool, lambda: (threading.current_thread().name, CALLER.get()))
    assert name.startswith("fleet-stage") and seen == "the stage"


async def test_busy_stage_threads_leave_the_default_pool_free_for_probes() -> None:
    release = threading.Event()
    with stage_threads(prepare_depth=2, compute_depth=1) as pool:
        busy = [asyncio.ensure_future(in_thread(pool, release.wait, 10)) for _ in range(3)]
        try:
            # Every stage thread is taken; a health probe on the default pool answers regardless.
            assert await asyncio.wait_for(asyncio.to_thread(lambda: "probed"), 5) == "probed"
            assert not any(task.done() for task in busy)
        finally:
            release.set()
        assert await asyncio.gather(*busy) == [True, True, True]


def test_one_thread_per_batch_the_stages_may_hold() -> None:
    with stage_threads(prepare_depth=4, compute_depth=2) as pool:
        assert pool._max_workers == 6
