"""Following a model's version pointers in Redis (written only by `fleet rollout` / `fleet models`).

Until an operator sets pointers, the worker serves the version its settings resolved. A
pointer naming a version that cannot be loaded leaves the serving set as it is and is
reported once, not on every poll.
"""

import asyncio
import logging


from common.redis_cluster import AnyRedis
from versions.pointers import ServingPointers, read_pointers
from workers.serving.model_set import ModelSet

log = logging.getLogger(__name__)


class PointerWatcher:
    def __init__(self, redis: AnyRedis, model: str, models: ModelSet, *, poll_s: float) -> None:
        self._redis = redis
        self._model = model
        self._models = models
        self._poll_s = poll_s
        self._failed: ServingPointers | None = None
        self.synced = asyncio.Event()  # set after the first successful read, for tests and readiness

    async def sync_once(self) -> bool:
        """Read the pointers and apply them; True when the serving set changed."""
        try:
            wanted = (await read_pointers(self._redis, self._model)).serving
        except Exception as exc:  # Redis away: keep serving what is resident
            log.warning("cannot read version pointers (%s); serving %s", exc, self._models.pointers)
            return False
        self.synced.set()
        if wanted is None or wanted == self._failed:
            return False
        try:
            return await self._models.apply(wanted)
        except Exception as exc:
            self._failed = wanted
            log.error("cannot serve pointers %s (%s: %s); still serving %s", wanted, type(exc).__name__, exc,
                      self._models.pointers)
            return False

    async def run(self) -> None:
        while True:
            await self.sync_once()
            await asyncio.sleep(self._poll_s)
