"""Publishing the model cards of the versions a worker serves (schemas/model_card.py).

Written at start, after every switch of the serving set (checked every `check_s`), and every
`refresh_s` with a TTL of a few refreshes, so the cards of versions nobody serves any more expire by
themselves (the keys stay bounded by what is served). Primary and fallback workers also write
the model's unversioned card, the stable version's: what a request without a pin gets. A Redis
outage is waited out: the next refresh writes again.
"""

import asyncio
import logging
import time

from common.redis_cluster import AnyRedis
from models.cards import card_of
from schemas.names import card_key
from schemas.wire import now_ms
from workers.serving.model_set import ModelSet

log = logging.getLogger(__name__)
TTL_REFRESHES = 6


class CardPublisher:
    def __init__(self, redis: AnyRedis, model: str, models: ModelSet, *, check_s: float, serves_stable: bool,
                 refresh_s: float = 30.0) -> None:
        self._redis = redis
        self._model = model
        self._models = models
        self._check_s = check_s
        self._refresh_s = refresh_s
        self._serves_stable = serves_stable
        self.written = 0

    async def publish_once(self) -> bool:
        """Write the serving versions' cards; False (logged) when Redis is away."""
        serving = self._models.serving
        written_ms = now_ms()
        ttl_ms = max(int(self._refresh_s * 1000 * TTL_REFRESHES), 10_000)
        cards = [card_of(backend.manifest, written_ms=written_ms)
                 for backend in (serving.stable, serving.candidate) if backend is not None]
        try:
            for card in cards:
                await self._redis.set(card_key(self._model, card.version), card.encode(), px=ttl_ms)
            if self._serves_stable:
                await self._redis.set(card_key(self._model), cards[0].encode(), px=ttl_ms)
        except Exception as exc:  # Redis away: the next refresh writes again
            log.warning("cannot write the model cards of %s (%s); retrying in %.0f s", self._model, exc,
                        self._refresh_s)
            return False
        self.written += 1
        return True

    async def run(self) -> None:
        published = self._models.pointers
        due = time.monotonic() + self._refresh_s
        while True:
            await asyncio.sleep(self._check_s)
            wanted = self._models.pointers
            if wanted != published or time.monotonic() >= due:
                due = time.monotonic() + self._refresh_s
                if await self.publish_once():
                    published = wanted
