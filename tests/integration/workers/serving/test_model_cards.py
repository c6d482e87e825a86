"""A serving worker writes its model card to the real Redis, and common/model_cards.py reads it."""

from __future__ import annotations

from redis.asyncio import Redis

from common.model_cards import ModelCards
from models.backends.base import Backend
from schemas.names import card_key
from tests.integration.conftest import MODEL
from workers.settings import WorkerSettings


async def test_a_started_worker_publishes_the_card_of_the_version_it_serves(
        serve, worker_settings: WorkerSettings, backend: Backend, redis: Redis) -> None:  # type: ignore[no-untyped-def]
    version = backend.manifest.id
    await redis.delete(card_key(MODEL), card_key(MODEL, version))
    cards = ModelCards(redis, ttl_s=60)
    assert await cards.get(MODEL) is None
    async with serve():
        cards.forget()
        stable = await cards.get(MODEL)
        pinned = await cards.get(MODEL, version)
        ttl_ms = await redis.pttl(card_key(MODEL))
    assert stable is not None and stable == pinned
    assert (stable.name, stable.version, stable.task, stable.max_length) == (MODEL, version, "embedding",
                                                                              backend.manifest.max_length)
    assert [(t.name, t.datatype) for t in stable.outputs] == [("embedding", "FP32")]
    assert stable.outputs[0].shape == (-1, 384) and stable.written_ms > 0
    assert 0 < ttl_ms <= 180_000, "cards expire unless a serving worker refreshes them"
    assert await cards.get(MODEL, "minilm-embed-19990101-001") is None
