"""A shadow of a tensor model on the real Kafka and Redis: the candidate is compared with stable by
tensor closeness, recorded with the task as the comparison's kind and the largest difference as
its score, and counted in the stats the rollout gates read."""

from __future__ import annotations

import asyncio
import secrets
from datetime import date
from pathlib import Path

import numpy as np
import pytest
from aiokafka import AIOKafkaProducer
from redis.asyncio import Redis

from common.settings import FleetSettings
from common.topics import ensure_topics
from fleet.commands.shadow import recent_comparisons
from models.loading import ModelLoader, RuntimeSpec
from models.registry import ModelRegistry
from schemas.names import comparisons_topic, requests_topic, shadow_stats_key, versions_key
from schemas.shadow import ComparisonKind
from schemas.tensors import inputs_map
from schemas.wire import Request, new_request_id, now_ms
from tests.task_models import WEIGHTS, register_onnx, tensor_graph
from workers.shadow.settings import ShadowSettings
from workers.shadow.worker import ShadowWorker

SHIFT = 0.25  # the candidate's weights: stable's plus this in one column


async def test_a_tensor_candidate_is_compared_by_closeness(stack: FleetSettings, redis: Redis,
                                                            producer: AIOKafkaProducer, tmp_path: Path) -> None:
    model = f"shadow-tensor-{secrets.token_hex(4)}"
    registry = ModelRegistry(tmp_path / "models")
    stable = register_onnx(registry, model, tensor_graph(), day=date(2026, 1, 2))
    shifted = WEIGHTS.copy()
    shifted[:, 1] += SHIFT
    candidate = register_onnx(registry, model, tensor_graph(shifted), day=date(2026, 1, 3))
    await ensure_topics(stack, [requests_topic(model), comparisons_topic(model)], 2)
    await redis.hset(versions_key(model), mapping={"stable": stable.id, "candidate": candidate.id})
    rng = np.random.default_rng(3)
    # Rows of zeros agree (x @ W is 0 either way); the rest differ by SHIFT x the row's sum, times scale.
    xs = [np.zeros((1, 4), np.float32) if i % 2 else rng.uniform(1, 2, (1, 4)).astype(np.float32) for i in range(10)]
    requests = [Request(id=new_request_id(), model=model, inputs=inputs_map({"x": x, "scale": np.ones((1, 1), np.float32)}),
                        deadline_ms=now_ms() + 60_000, submitted_ms=now_ms()) for x in xs]
    for request in requests:
        await producer.send_and_wait(requests_topic(model), request.encode(), key=request.id.encode())
    loader = ModelLoader(RuntimeSpec(registry_dir=registry.root, model=model))
    settings = ShadowSettings(model=model, model_dir=registry.root, shadow_start="earliest", shadow_grace_ms=100,
                              max_batch_size=16, session_timeout_ms=6000)
    try:
        async with ShadowWorker(settings, backends=loader.load_version) as worker:
            assert await asyncio.wait_for(worker.run(burst=True), 90) == len(requests)
        found = await recent_comparisons(stack, model, 100)
        stats = {k.decode(): float(v) for k, v in (await redis.hgetall(shadow_stats_key(model, candidate.id))).items()}
    finally:
        await redis.delete(versions_key(model), shadow_stats_key(model, candidate.id))
    by_id = {c.id: c for c in found}
    assert len(by_id) == len(requests)
    for request, x in zip(requests, xs, strict=True):
        comparison = by_id[request.id]
        assert comparison.kind is ComparisonKind.tensor and comparison.cosine is None
        assert comparison.score == pytest.approx(SHIFT * float(x.sum()), rel=1e-4, abs=1e-6)
        assert comparison.agreed is (not x.any())
    assert (stats["compared"], stats["agreed"]) == (len(requests), len(requests) // 2)
