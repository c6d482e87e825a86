"""Nothing stranded when every primary is gone (issue: CPU fallback).

Pipelines produce to the primary topic directly, so when no healthy primary worker of a
model is left, a fallback worker also joins the primary consumer group and serves that
topic, answering `degraded`; as soon as a healthy primary heartbeats again it finishes its
batch, commits and leaves, and the primary gets its partitions back.
"""

import asyncio
import logging
import time

from workers.worker import Worker
from common.heartbeats import healthy_primaries

log = logging.getLogger(__name__)


class PrimaryTakeover:
    def __init__(self, fallback: Worker, *, grace_s: float, poll_s: float = 0.5) -> None:
        self._fallback = fallback
        self._grace_s = grace_s
        self._poll_s = poll_s
        self._serving: Worker | None = None
        self._task: asyncio.Task[int] | None = None
        self.takeovers = 0

    @property
    def active(self) -> bool:
        return self._serving is not None

    async def watch(self) -> None:
        """Run until cancelled: take the primary topic over while no healthy primary exists."""
        fallback = self._fallback
        redis = fallback.redis
        without_primary_since: float | None = None
        try:
            while True:
                primaries = await healthy_primaries(redis, fallback.settings.model)
                now = time.monotonic()
                if primaries == 0:
                    without_primary_since = without_primary_since or now
                    if not self.active and now - without_primary_since >= self._grace_s:
                        await self._take_over()
                else:
                    without_primary_since = None
                    if self.active:
                        await self._hand_back()
                await asyncio.sleep(self._poll_s)
        finally:
            if self.active:
                await self._hand_back()

    async def _take_over(self) -> None:
        fallback = self._fallback
        settings = fallback.settings.model_copy(update={"worker_id": f"{fallback.worker_id}-takeover"})
        worker = Worker(settings, backend=fallback.backend, redis=fallback.redis, producer=fallback.producer,
                        metrics=fallback.metrics, takeover=True)
        await worker.start()
        self._serving = worker
        self._task = asyncio.create_task(worker.run(), name="primary-takeover")
        self.takeovers += 1
        log.warning("no healthy primary for %s: %s serves the primary topic, degraded", settings.model,
                    fallback.worker_id)

    async def _hand_back(self) -> None:
        worker, task = self._serving, self._task
        self._serving, self._task = None, None
        if worker is None or task is None:
            return
        worker.request_stop()
        try:
            await task
        finally:
            await worker.stop()
        log.warning("a healthy primary is back: %s hands the primary topic back", self._fallback.worker_id)
