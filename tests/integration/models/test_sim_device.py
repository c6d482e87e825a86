"""A worker process on the simulated device (FLEET_BACKEND=sim) serves through the real Kafka and Redis."""

from __future__ import annotations

import secrets
from pathlib import Path

import numpy as np
import pytest

from common.settings import FleetSettings
from fleet_dev.bench.fleet_process import bench_alias
from gateway.client import FleetClient
from models.registry import ModelRegistry
from schemas.wire import CacheTier, Status
from tests.integration.conftest import Process
from tests.built_models import built_registry, resolve_or_skip


async def test_a_sim_worker_answers_with_the_versions_shape_and_says_so(stack: FleetSettings, client: FleetClient,
                                                                        tmp_path: Path) -> None:
    source = built_registry()
    manifest = resolve_or_skip(source, "fp32")
    name = f"simtest-{secrets.token_hex(4)}"
    alias = bench_alias(source, manifest, ModelRegistry(tmp_path / "models"), name)
    env = {"FLEET_MODEL": name, "FLEET_MODEL_DIR": str(tmp_path / "models"), "FLEET_BACKEND": "sim",
           "FLEET_SIM_PRESET": "h200-minilm", "FLEET_EXACT_CACHE": "false", "FLEET_SESSION_TIMEOUT_MS": "6000"}
    worker = Process(["-m", "workers.main"], env, "ready:", tmp_path / "worker.log")
    try:
        first = await client.infer(name, "How do I reset my password?", timeout=30)
        again = await client.infer(name, "How do I reset my password?", timeout=30)
    finally:
        assert worker.stop() == 0
    assert first.status is Status.ok and first.outputs is not None
    assert (first.version, first.device, first.cache) == (alias.id, "sim", CacheTier.miss)
    row = np.asarray(first.outputs["embedding"], dtype=np.float32)
    assert row.shape == (manifest.embedding_dim,)
    assert float(np.linalg.norm(row)) == pytest.approx(1.0, abs=1e-5)
    assert again.outputs is not None and again.outputs["embedding"] == first.outputs["embedding"]
    assert first.timings["inference_ms"] >= 2.0  # the preset's 2 ms per batch, stamped like a real model's time
