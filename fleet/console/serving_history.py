"""The overview's serving plots: per model, throughput (req/s), p99 latency and batch sizes over
the last hour. Sampled in the background every `console_lag_sample_s`, like the lag history, from
the sources the overview reads (the version stats through `ThroughputMemory`, the heartbeats'
`batch` and `max_batch`), and kept in the console process: `console_history_points` samples per
model, so memory stays bounded whatever runs for how long."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from common.heartbeats import WorkerInfo, list_workers
from common.process import cancel_within
from common.redis_cluster import AnyRedis
from fleet.console.settings import ConsoleSettings
from fleet.console.throughput import ThroughputMemory, VersionFigures

log = logging.getLogger("fleet.console")
MAX_MODELS = 1000  # models come and go; beyond this, only the ones still sampled are kept
SAMPLE_TIMEOUT_S = 15.0
STOP_S = 5.0  # the most a stop waits for the sampling task to end
COLUMNS = ("t", "per_s", "p99_ms", "batch", "max_batch")


@dataclass(frozen=True)
class ServingPoint:
    at_s: float  # Unix seconds
    per_s: float | None  # all served versions together; None until a stats window exists
    p99_ms: float | None  # the slowest version's p99
    batch: float | None  # mean records in the workers' last batches
    max_batch: int | None  # the largest effective max batch size


def serving_point(at_s: float, figures: Sequence[VersionFigures], workers: Sequence[WorkerInfo]) -> ServingPoint:
    """One sample of a model from its versions' recent figures and its live workers' heartbeats."""
    rates = [f.per_s for f in figures if f.per_s is not None]
    p99s = [f.p99_ms for f in figures if f.p99_ms is not None]
    batching = [w for w in workers if w.max_batch]  # 0: a heartbeat from before batch sizes were reported
    return ServingPoint(at_s, round(sum(rates), 3) if rates else None, max(p99s) if p99s else None,
                        round(sum(w.batch for w in batching) / len(batching), 2) if batching else None,
                        max(w.max_batch for w in batching) if batching else None)


class ServingHistory:
    def __init__(self, settings: ConsoleSettings) -> None:
        self.settings = settings
        self.history: dict[str, deque[ServingPoint]] = {}
        self._task: asyncio.Task[None] | None = None

    def record(self, model: str, point: ServingPoint) -> None:
        points = self.history.setdefault(model, deque(maxlen=self.settings.console_history_points))
        points.append(point)

    def forget_all_but(self, models: set[str]) -> None:
        if len(self.history) > MAX_MODELS:
            self.history = {k: v for k, v in self.history.items() if k in models}

    def series(self, model: str) -> dict[str, list[float | None]]:
        """Columns for uPlot, keyed by COLUMNS."""
        points = list(self.history.get(model, ()))
        return {"t": [p.at_s for p in points], "per_s": [p.per_s for p in points],
                "p99_ms": [_finite(p.p99_ms) for p in points], "batch": [p.batch for p in points],
                "max_batch": [None if p.max_batch is None else float(p.max_batch) for p in points]}

    async def sample(self, redis: AnyRedis, memory: ThroughputMemory, now_s: float) -> None:
        """One point per model that has live workers."""
        workers = await list_workers(redis)
        models = {w.model for w in workers if "." not in w.model}  # shadow groups show under their model
        for model in sorted(models):
            serving = [w for w in workers if w.model == model]
            figures = [await memory.figures(redis, model, v) for v in sorted({w.version for w in serving if w.version})]
            self.record(model, serving_point(now_s, figures, serving))
        self.forget_all_but(models)

    def start(self, redis: AnyRedis, memory: ThroughputMemory) -> None:
        self._task = asyncio.create_task(self._run(redis, memory), name="console-serving-history")

    async def stop(self) -> None:
        if self._task is not None:
            # Bounded: a sample blocked on a dead Kafka may swallow one cancellation (aiokafka's start-up
            # retries inside asyncio.wait_for), and a console must still stop within its grace.
            await cancel_within((self._task,), STOP_S)

    async def _run(self, redis: AnyRedis, memory: ThroughputMemory) -> None:
        while True:
            try:
                await asyncio.wait_for(self.sample(redis, memory, time.time()), SAMPLE_TIMEOUT_S)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a Redis outage is said by the page's own reads; sampling goes on
                log.debug("serving history sample failed: %s", type(exc).__name__)
            await asyncio.sleep(self.settings.console_lag_sample_s)


def _finite(value: float | None) -> float | None:
    """A p99 above the stats' last latency bound is infinite, which JSON cannot carry: the page would
    fail to read every plot. It shows as a gap."""
    return value if value is None or math.isfinite(value) else None
