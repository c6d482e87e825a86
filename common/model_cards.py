"""Reading model cards (schemas/model_card.py), which the serving workers write to Redis.

Cached for `ttl_s` per key, so a gateway checking every request against its model's card asks
Redis at most once per key per `ttl_s`; the cache holds at most `max_entries` keys (a flood of
made-up version pins only evicts the oldest). A card that is missing is None, one that is there
but cannot be read is CardUnreadable (never taken for a missing one: a reader would fall back to a
guess), and a Redis that does not answer is CardsUnavailable: the caller decides what not knowing
the model means.
"""

from __future__ import annotations

import time
from collections import OrderedDict

from common.redis_cluster import AnyRedis
from schemas.model_card import CARD_VERSION, ModelCard
from schemas.names import card_key


class CardsUnavailable(RuntimeError):
    """Redis did not answer the card read (remembered for `ttl_s`, so an outage costs one wait per key)."""


class CardUnreadable(ValueError):
    """A card is there but is not one this reader understands (another card version, or damaged): a
    reader must say so rather than guess what the model takes."""


class ModelCards:
    def __init__(self, redis: AnyRedis, *, ttl_s: float = 2.0, max_entries: int = 1024) -> None:
        self._redis = redis
        self._ttl_s = ttl_s
        self._max_entries = max_entries
        self._cached: OrderedDict[str, tuple[float, ModelCard | None | CardsUnavailable | CardUnreadable]] = \
            OrderedDict()

    async def get(self, model: str, version: str | None = None) -> ModelCard | None:
        """The card of `version` of `model`, or of the version its primary workers serve."""
        key = card_key(model, version)
        now = time.monotonic()
        cached = self._cached.get(key)
        if cached is not None and cached[0] > now:
            if isinstance(cached[1], CardsUnavailable | CardUnreadable):
                raise cached[1]
            return cached[1]
        card: ModelCard | None | CardsUnavailable | CardUnreadable
        try:
            raw = await self._redis.get(key)
            card = ModelCard.decode(raw) if raw is not None else None
            if raw is not None and card is None:
                card = CardUnreadable(f"the model card {key} is there but cannot be read (not a card of version "
                                      f"{CARD_VERSION}, or damaged); the workers serving it rewrite it within 30 s")
        except Exception as exc:  # any Redis failure: the caller decides what an unknown card means
            card = CardsUnavailable(f"cannot read the model card {key}: {type(exc).__name__}: {exc}")
        self._remember(key, now + self._ttl_s, card)
        if isinstance(card, CardsUnavailable | CardUnreadable):
            raise card
        return card

    def _remember(self, key: str, until: float, card: ModelCard | None | CardsUnavailable | CardUnreadable) -> None:
        self._cached[key] = (until, card)
        self._cached.move_to_end(key)
        while len(self._cached) > self._max_entries:
            self._cached.popitem(last=False)

    def forget(self) -> None:
        self._cached.clear()
