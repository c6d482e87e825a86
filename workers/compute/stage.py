"""The worker's compute stage: prepared batches through the model, computed batches out in order.

Up to `depth` batches are in the model at once (workers/compute/parallelism.py says how many);
batches leave in the order they came however long each took, so delivery and commits stay in
batch order.
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


class ModelActivity:
    """What the model holds: batches handed to it and not computed yet, whether it has room for
    another (fewer than `capacity` pending: the batching policy holds a part batch back while it
    has none), and since when the oldest running batch runs (the health watchdog's hung-device
    check)."""

    def __init__(self, capacity: int = 1) -> None:
        self.pending = 0
        self.capacity = capacity
        self.has_room = asyncio.Event()
        self.has_room.set()
        self._running: deque[float] = deque()

    @property
    def busy_since(self) -> float | None:
        return self._running[0] if self._running else None

    def resize(self, capacity: int) -> None:
        """The batches the model takes at once (the compute stage's depth)."""
        self.capacity = capacity
        self._note_room()

    def handed(self, batches: int = 1) -> None:
        self.pending += batches
        self._note_room()

    def started(self) -> float:
        at = time.monotonic()
        self._running.append(at)
        return at

    def finished(self, started: float | None) -> None:
        if started is not None:
            self._running.remove(started)
        self.pending -= 1
        self._note_room()

    def _note_room(self) -> None:
        if self.pending < self.capacity:
            self.has_room.set()
        else:
            self.has_room.clear()


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
