"""The worker's compute stage: prepared batches through the model, computed batches out in order.

On a device that queues work (a GPU, the simulated device) the next batch is handed over while
the current one runs, so the device goes from one batch to the next without waiting for the
event loop to notice the first has finished and start the second: that round trip (the thread's
result, the loop's turn, the next thread hop) cost about a tenth of a 55 ms batch. On a CPU one
batch runs at a time: two would only split the cores between them. Either way batches leave in
the order they came, so delivery and commits stay in batch order.
"""

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor

from workers.compute.compute import Computed, compute, failed
from workers.compute.prepare import Prepared
from workers.compute.threads import in_thread
from workers.ordered import in_order

log = logging.getLogger(__name__)
QUEUEING_DEVICES = frozenset({"cuda", "sim"})


def batches_in_flight(device: str, configured: int | None) -> int:
    """How many batches may be handed to the model at once: the setting, else 2 on a device that queues work."""
    if configured is not None:
        return configured
    return 2 if device in QUEUEING_DEVICES else 1


class ModelActivity:
    """What the model holds: batches handed to it and not computed yet (the batching policy waits
    for none), and since when the oldest running batch runs (the health watchdog's hung-device check)."""

    def __init__(self) -> None:
        self.pending = 0
        self.free = asyncio.Event()
        self.free.set()
        self._running: deque[float] = deque()

    @property
    def busy_since(self) -> float | None:
        return self._running[0] if self._running else None

    def handed(self, batches: int = 1) -> None:
        self.pending += batches
        if self.pending:
            self.free.clear()

    def started(self) -> float:
        at = time.monotonic()
        self._running.append(at)
        return at

    def finished(self, started: float | None) -> None:
        if started is not None:
            self._running.remove(started)
        self.pending -= 1
        if self.pending == 0:
            self.free.set()


class ComputeStage:
    def __init__(self, activity: ModelActivity, depth: int, computed: Callable[[Computed], None],
                 threads: Executor | None = None) -> None:
        """`depth` batches run at once at most, in `threads` (default: the loop's pool); `computed`
        sees each batch once it is done, in order."""
        if depth < 1:
            raise ValueError(f"batches in flight must be at least 1, got {depth}")
        self._activity = activity
        self._depth = depth
        self._computed = computed
        self._threads = threads

    async def run(self, inbox: "asyncio.Queue[Prepared | None]", out: "asyncio.Queue[Computed | None]") -> None:
        await in_order(inbox, out, self._one, self._depth, self._computed)

    async def _one(self, batch: Prepared) -> Computed:
        started = self._activity.started() if batch.needs_model else None
        try:
            # A batch the caches answered whole skips the thread hop: nothing to compute.
            return await in_thread(self._threads, compute, batch) if batch.needs_model else compute(batch)
        except Exception as exc:  # run_batch isolates rows; this is the net under a bug, not the plan
            log.exception("computing a batch of %d failed; its requests are answered with an error",
                          len(batch.records))
            return failed(batch, exc)
        finally:
            self._activity.finished(started)
