"""What keeps a worker honest about itself: its health, its heartbeat, its drain switch.

`Supervisor` owns the HealthMonitor (probes, error streaks), writes the heartbeat to Redis
with a TTL (a dead worker disappears by itself) and reads the operator's drain switch.
The worker asks it one question between batches: may I serve right now?
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable


from common.heartbeats import HealthState
from common.process import BACKGROUND_STOP_S, cancel_within
from common.redis_cluster import AnyRedis
from workers.health.monitor import HealthMonitor
from common.heartbeats import BeatFields, is_drained
from workers.health.heartbeat import Heartbeat
from workers.settings import WorkerSettings

log = logging.getLogger(__name__)


class Supervisor:
    def __init__(self, settings: WorkerSettings, redis: AnyRedis, worker_id: str, device: str, version: Callable[[], str],
                 probe: Callable[[], None], backlog: Callable[[], int],
                 batch_sizes: Callable[[], tuple[int, int]] = lambda: (0, 0),
                 cache_lookups: Callable[[], tuple[tuple[str, int], ...]] = tuple) -> None:
        self.health = HealthMonitor.from_settings(settings, probe)
        self.drained = False
        self._settings = settings
        self._redis = redis
        self._worker_id = worker_id
        self._version = version
        self._backlog = backlog
        self._batch_sizes = batch_sizes  # (last batch's records, effective max batch size)
        self._cache_lookups = cache_lookups
        self._heartbeat = Heartbeat(redis, model=settings.model, worker_id=worker_id, role=settings.role.value,
                                    device=device, ttl_s=settings.heartbeat_ttl_s)
        self._tasks: list[asyncio.Task[None]] = []
        self.health.add_listener(self._log_change)

    @property
    def may_serve(self) -> bool:
        return self.health.state is not HealthState.failed and not self.drained

    def start(self, *, probing: bool = True) -> None:
        if self._tasks:
            return
        self._tasks.append(asyncio.create_task(self._beat_forever(), name=f"heartbeat-{self._worker_id}"))
        if probing:
            self._tasks.append(asyncio.create_task(self.health.run_probes(), name=f"probes-{self._worker_id}"))

    async def stop(self) -> None:
        tasks, self._tasks = self._tasks, []
        await cancel_within(tasks, BACKGROUND_STOP_S)
        try:
            await self._heartbeat.remove()
        except Exception as exc:  # the heartbeat expires by itself anyway
            log.warning("could not remove heartbeat: %s", exc)

    async def wait_until_may_serve(self, stop: asyncio.Event, poll_s: float = 0.2) -> None:
        while not self.may_serve and not stop.is_set():
            await asyncio.sleep(poll_s)

    def fields(self) -> BeatFields:
        state = "drained" if self.drained and self.health.state is not HealthState.failed else self.health.state.value
        batch, max_batch = self._batch_sizes()
        return BeatFields(state=state, reason=self.health.reason, version=self._version(), lag=self._backlog(),
                          batch=batch, max_batch=max_batch, cache=self._cache_lookups())

    async def _beat_forever(self) -> None:
        while True:
            try:
                self.drained = await is_drained(self._redis, self._worker_id)
                beat = self.fields()
                await self._heartbeat.beat(beat.state, beat.reason, beat.version, beat.lag, batch=beat.batch,
                                           max_batch=beat.max_batch, cache=beat.cache)
            except Exception as exc:  # one missed beat is not a reason to stop serving
                log.warning("heartbeat failed: %s", exc)
            await asyncio.sleep(self._settings.heartbeat_interval_s)

    def _log_change(self, old: HealthState, new: HealthState, reason: str) -> None:
        log.warning("worker %s health %s -> %s: %s", self._worker_id, old.value, new.value, reason)


async def beat_failed(redis: AnyRedis, settings: WorkerSettings, worker_id: str,
                      reason: str) -> Callable[[], Awaitable[None]]:
    """Heartbeat `failed` with `reason` until the returned callback stops it (a worker that
    could not load its model on its device)."""
    heartbeat = Heartbeat(redis, model=settings.model, worker_id=worker_id, role=settings.role.value,
                          device=settings.device, ttl_s=settings.heartbeat_ttl_s)
    fields = BeatFields(state="failed", reason=reason, version="", lag=0)
    beating = asyncio.create_task(heartbeat.run(settings.heartbeat_interval_s, lambda: fields))

    async def stop_beating() -> None:
        await cancel_within([beating], BACKGROUND_STOP_S)
        await heartbeat.remove()

    return stop_beating
