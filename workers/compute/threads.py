"""The threads a worker's prepare and compute stages run in: a pool of their own, sized to the stages.

asyncio's default pool has cpu_count + 4 threads (6 on two cores), shared with health probes,
traces and model loads. Four batches in preparation and two in the model would take all of it,
and a health probe would wait behind batch work for a thread; the other way round, a stage could
wait behind a slow probe. A pool per worker session holds exactly what its stages may use.
"""

import asyncio
import contextvars
import functools
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


def stage_threads(prepare_depth: int, compute_depth: int) -> ThreadPoolExecutor:
    """One thread per batch the prepare and compute stages may hold at once."""
    return ThreadPoolExecutor(max_workers=prepare_depth + compute_depth, thread_name_prefix="fleet-stage")


async def in_thread(threads: Executor | None, work: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`asyncio.to_thread` on `threads` (None: the loop's default pool), context variables included."""
    context = contextvars.copy_context()
    call = functools.partial(context.run, work, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(threads, call)
