"""The simulated device: the version's real tokenizer, a device that only takes time, outputs of the right shape."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from pydantic import ValidationError

from models.backends import sim
from models.backends.sim import PRESETS, DeviceTimeline, SimBackend, SimDevice, sim_device
from models.build.faq import FAQ_MODEL_NAME
from models.loading import ModelLoader
from models.registry import ModelNotFound, ModelRegistry
from tests.built_models import MODEL_NAME, built_registry, resolve_or_skip
from workers.settings import WorkerSettings

TEXTS = ["How do I reset my password?", "Where is my parcel?", "cancel my subscription please"]


@pytest.fixture(scope="module")
def registry() -> ModelRegistry:
    return built_registry()


def sim_settings(registry: ModelRegistry, **extra: object) -> WorkerSettings:
    return WorkerSettings(model_dir=registry.root, backend="sim", **extra)  # type: ignore[arg-type]


def test_the_a10_preset_reproduces_the_seeds_table_within_one_percent() -> None:
    device = PRESETS["a10-bert-base"]
    for rows, seed_qps in ((1, 45), (32, 580), (64, 720)):
        assert device.ceiling_rows_per_s(rows) == pytest.approx(seed_qps, rel=0.01)


def test_explicit_times_replace_the_presets() -> None:
    assert sim_device("h200-minilm") == SimDevice(2.0, 0.05, 0.0)
    assert sim_device("h200-minilm", b_ms=0.1) == SimDevice(2.0, 0.1, 0.0)
    assert sim_device(None, 1.0, 0.0, 0.01).batch_ms(rows=4, padded_tokens=100) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="unknown simulated device preset 'tpu'"):
        sim_device("tpu")


@pytest.mark.models
def test_rows_are_unit_norm_of_the_manifest_width_and_the_same_for_the_same_text(registry: ModelRegistry) -> None:
    manifest = resolve_or_skip(registry, "fp32")
    backend = ModelLoader(sim_settings(registry, sim_preset="h200-minilm").runtime()).load()
    assert isinstance(backend, SimBackend) and backend.device == "sim"
    rows = backend.infer(TEXTS)
    assert rows.shape == (len(TEXTS), manifest.embedding_dim) and rows.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(rows, axis=1), 1.0, atol=1e-5)
    again = backend.infer(list(reversed(TEXTS)) + ["something else entirely"])
    np.testing.assert_array_equal(again[:3], rows[::-1])
    assert abs(float(again[3] @ rows[0])) < 0.5  # another text, another direction


@pytest.mark.models
def test_a_classifier_gets_one_probability_row_per_text(registry: ModelRegistry) -> None:
    try:
        manifest = registry.resolve(FAQ_MODEL_NAME, precision="fp32")
    except ModelNotFound:
        pytest.skip("faq-intent is not built; run scripts/build-models")
    backend = ModelLoader(sim_settings(registry, model=FAQ_MODEL_NAME, sim_a_ms=0).runtime()).load()
    rows = backend.infer(TEXTS)
    assert rows.shape == (len(TEXTS), len(manifest.labels))
    np.testing.assert_allclose(rows.sum(axis=1), 1.0, atol=1e-5)
    assert (rows > 0).all()


class FakeClock:
    """`time` as models/backends/sim.py uses it: perf_counter() reads the clock, sleep() moves it
    (and records how long each sleep was: the device's time is a sleep, never the CPU's)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []
        self._lock = threading.Lock()

    def perf_counter(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.slept.append(seconds)
            self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(sim, "time", fake)
    return fake


@pytest.mark.models
def test_a_batch_takes_a_plus_b_times_rows_asleep(registry: ModelRegistry, clock: FakeClock) -> None:
    resolve_or_skip(registry, "fp32")
    backend = ModelLoader(sim_settings(registry, sim_a_ms=20, sim_b_ms=2).runtime()).load()
    encoded = backend.encode(TEXTS * 10)  # 30 rows: 20 + 60 = 80 ms
    started = clock.now
    backend.run(encoded)
    assert clock.now - started == pytest.approx(0.080)
    assert sum(clock.slept) == pytest.approx(0.080)  # all of it in time.sleep: no CPU held


def test_the_device_runs_batches_back_to_back_from_when_they_are_handed_over() -> None:
    timeline = DeviceTimeline()
    assert timeline.queue(0.005, now=100.0) == pytest.approx(100.005)
    # Handed over while the first runs: starts when the first ends, whenever its thread wakes.
    assert timeline.queue(0.005, now=100.001) == pytest.approx(100.010)
    assert timeline.queue(0.002, now=100.020) == pytest.approx(100.022)  # idle device: starts at once


@pytest.mark.models
def test_two_threads_share_one_device_one_batch_at_a_time(registry: ModelRegistry, clock: FakeClock) -> None:
    resolve_or_skip(registry, "fp32")
    backend = ModelLoader(sim_settings(registry, sim_a_ms=40).runtime()).load()
    encoded = backend.encode(TEXTS)
    started = clock.now
    threads = [threading.Thread(target=backend.run, args=(encoded,)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # However the threads interleave, the second batch starts when the first is done: 40 + 40 ms.
    assert clock.now - started >= 0.080 - 1e-9


def test_the_simulated_device_is_refused_in_production() -> None:
    for environment in ("production", "Prod", " PRODUCTION "):
        with pytest.raises(ValidationError, match="backend=sim is a simulated device.*refused in production"):
            WorkerSettings(backend="sim", sim_preset="h200-minilm", environment=environment)
    assert WorkerSettings(backend="sim", sim_preset="h200-minilm", environment="staging").backend == "sim"


def test_the_loader_needs_a_device_for_the_sim_backend(registry: ModelRegistry) -> None:
    with pytest.raises(ValueError, match="the simulated device needs a preset"):
        sim_settings(registry).runtime()
    spec = WorkerSettings(model_dir=registry.root, model=MODEL_NAME).runtime()
    with pytest.raises(ValueError, match="backend 'sim' needs a simulated device"):
        ModelLoader(type(spec)(spec.registry_dir, spec.model, backend="sim"))
