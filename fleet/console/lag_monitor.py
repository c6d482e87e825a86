"""The overview's lag: `collect_lag` (what `fleet lag` runs) sampled in the background, its latest
figures and a bounded history per group for the plot. Pages read the last sample and never wait
for Kafka, so a page loads in milliseconds and a Kafka outage costs the lag section alone."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque

from common.clients import new_admin
from common.process import cancel_within
from fleet.commands.lag import GroupLag, collect_lag
from fleet.console.assignments import Assignments, describe_assignments
from fleet.console.settings import ConsoleSettings

log = logging.getLogger(__name__)

SAMPLE_TIMEOUT_S = 15.0
STOP_S = 5.0  # the most a stop waits for the sampling task to end


class LagMonitor:
    def __init__(self, settings: ConsoleSettings) -> None:
        self.settings = settings
        self.latest: dict[str, GroupLag] = {}
        self.assignments: Assignments = {}  # who holds which partition, from the same sample
        self.history: dict[str, deque[tuple[float, int]]] = {}
        self.problem: str | None = None  # why the last sample failed
        self.sampled_at = 0.0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="console-lag-monitor")

    async def stop(self) -> None:
        if self._task is not None:
            # Bounded: a sample blocked on a dead Kafka may swallow one cancellation (aiokafka's start-up
            # retries inside asyncio.wait_for), and a console must still stop within its grace.
            await cancel_within((self._task,), STOP_S)

    async def _run(self) -> None:
        while True:
            try:
                groups = await asyncio.wait_for(
                    collect_lag(self.settings, None, self.settings.console_lag_sample_s), SAMPLE_TIMEOUT_S)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # an outage of Kafka is shown in words, and sampling goes on
                self.problem = f"Kafka at {self.settings.kafka_bootstrap} does not answer ({type(exc).__name__})"
                await asyncio.sleep(self.settings.console_lag_sample_s)
                continue
            self.record(groups, time.time())
            # Who holds which partition is a second look: when it fails, the lag just taken stands.
            try:
                self.assignments = await asyncio.wait_for(self._assignments([g.group for g in groups]),
                                                          SAMPLE_TIMEOUT_S)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001
                log.warning("console: partition assignments not read: %s: %s", type(exc).__name__, exc)

    async def _assignments(self, groups: list[str]) -> Assignments:
        admin = new_admin(self.settings)
        await admin.start()
        try:
            return await describe_assignments(admin, groups)
        finally:
            await admin.close()

    def record(self, groups: list[GroupLag], now_s: float) -> None:
        self.problem = None
        self.sampled_at = now_s
        self.latest = {g.group: g for g in groups}
        for group in groups:
            points = self.history.setdefault(group.group, deque(maxlen=self.settings.console_history_points))
            points.append((now_s, group.lag))
        if len(self.history) > 1000:  # groups come and go; keep the ones still sampled
            self.history = {k: v for k, v in self.history.items() if k in self.latest}

    def series(self, group: str) -> tuple[list[float], list[int]]:
        points = list(self.history.get(group, ()))
        return [t for t, _ in points], [lag for _, lag in points]
