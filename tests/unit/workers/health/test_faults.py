"""Fault injection: off unless asked for, refused in production, and each fault does what it says."""

from collections.abc import Sequence
from datetime import UTC, datetime

import numpy as np
import numpy.typing as npt
import pytest
from pydantic import ValidationError

from models.backends.base import Backend, Encoded
from models.backends.errors import DeviceError, DeviceOutOfMemory
from workers.health.faults import FaultInjector, FaultyBackend
from models.registry import AccuracyCheck, ModelManifest, ModelSource, OutputSpec, TensorSpec
from workers.settings import WorkerSettings

DIM = 4


def manifest() -> ModelManifest:
    check = AccuracyCheck.evaluate(name="fake", metric="mean_cosine", value=1.0, threshold=0.98, comparison=">=",
                                   figures={})
    return ModelManifest(
        id="fake-embed-20240101-001", name="fake-embed", created=datetime(2024, 1, 1, tzinfo=UTC), precision="fp32",
        parent=None, source=ModelSource(package="fake", package_version="0", base_model="fake/base"),
        files={"model.onnx": "0" * 64, "tokenizer.json": "0" * 64}, onnx_file="model.onnx",
        tokenizer_file="tokenizer.json", max_length=16,
        inputs=(TensorSpec(name="input_ids", dtype="int64", shape=("batch", "sequence")),),
        outputs=(OutputSpec(name="embedding", dtype="float32", shape=("batch", DIM), normalized=True),),
        check=check)


class CountingBackend:
    """A tiny deterministic backend (pure logic test): row i of a batch is [len(text_i)] * DIM."""

    def __init__(self) -> None:
        self.manifest = manifest()
        self.device = "cuda"
        self.runs = 0
        self.embedding_dim = DIM

    def encode(self, texts: Sequence[str]) -> Encoded:
        rows = [[len(text)] for text in texts]
        return Encoded.group(rows, 0, lambda batch: {"input_ids": np.asarray(batch, dtype=np.int64)})

    def run(self, encoded: Encoded) -> npt.NDArray[np.float32]:
        self.runs += 1
        out = np.empty((encoded.count, DIM), dtype=np.float32)
        for chunk in encoded.chunks:
            out[chunk.rows] = chunk.feeds["input_ids"].astype(np.float32)
        return out

    def infer(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return self.run(self.encode(texts))


def texts(n: int) -> list[str]:
    return [f"text {i}" for i in range(n)]


def settings(**faults: object) -> WorkerSettings:
    return WorkerSettings.model_validate({"fault_injection": True, "allow_fault_injection": True, **faults})


def test_fault_settings_do_nothing_without_the_master_switch() -> None:
    injector = FaultInjector.from_settings(WorkerSettings(fault_error_rate=1.0, fault_oom_above_batch=1,
                                                          fault_fail_after_records=0, fault_probe_fails=True,
                                                          allow_fault_injection=True))
    assert not injector.enabled
    inner = CountingBackend()
    assert injector.wrap(inner) is inner, "no wrapper, no overhead when off"
    probe_ran: list[bool] = []
    injector.wrap_probe(lambda: probe_ran.append(True))()
    assert probe_ran == [True]
    injector.before_batch(10_000)
    with pytest.raises(RuntimeError, match="fault injection is off"):
        injector.set_failing(True)


@pytest.mark.parametrize("faults", [{"fault_injection": True}, {"fault_error_rate": 0.1},
                                    {"fault_oom_above_batch": 8}, {"fault_fail_after_records": 100},
                                    {"fault_probe_fails": True}])
def test_production_refuses_any_fault_setting_even_when_allowed(faults: dict[str, object]) -> None:
    with pytest.raises(ValidationError, match="refused in production"):
        WorkerSettings.model_validate({"environment": "production", "allow_fault_injection": True, **faults})
    copied = WorkerSettings(environment="production").model_copy(update={"allow_fault_injection": True, **faults})
    with pytest.raises(ValueError, match="refused in production"):
        FaultInjector.from_settings(copied)


@pytest.mark.parametrize("environment", ["development", "staging", "prod-eu", "Production-2", "drill"])
@pytest.mark.parametrize("faults", [{"fault_injection": True}, {"fault_error_rate": 0.1},
                                    {"fault_fail_after_records": 0}, {"fault_probe_fails": True}])
def test_any_fault_setting_needs_the_explicit_allowance(environment: str, faults: dict[str, object]) -> None:
    with pytest.raises(ValidationError, match="FLEET_ALLOW_FAULT_INJECTION=1"):
        WorkerSettings.model_validate({"environment": environment, **faults})
    copied = WorkerSettings(environment=environment).model_copy(update=faults)  # skips the validators
    with pytest.raises(ValueError, match="FLEET_ALLOW_FAULT_INJECTION=1"):
        FaultInjector.from_settings(copied)


def test_the_allowance_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEET_FAULT_ERROR_RATE", "0.5")
    monkeypatch.setenv("FLEET_FAULT_INJECTION", "1")
    with pytest.raises(ValidationError, match="fault_error_rate=0.5"):
        WorkerSettings()
    monkeypatch.setenv("FLEET_ALLOW_FAULT_INJECTION", "1")
    assert FaultInjector.from_settings(WorkerSettings()).enabled


def test_production_without_faults_gets_the_no_op_injector() -> None:
    assert not FaultInjector.from_settings(WorkerSettings(environment="production")).enabled


def test_batches_larger_than_the_limit_run_out_of_memory() -> None:
    backend = FaultInjector.from_settings(settings(fault_oom_above_batch=8)).wrap(CountingBackend())
    assert isinstance(backend, FaultyBackend) and isinstance(backend, Backend)
    assert backend.infer(texts(8)).shape == (8, DIM)
    with pytest.raises(DeviceOutOfMemory, match="injected fault"):
        backend.infer(texts(9))
    assert backend.infer(texts(4)).shape == (4, DIM), "a split batch fits"


def test_device_dies_after_n_computed_records() -> None:
    injector = FaultInjector.from_settings(settings(fault_fail_after_records=20))
    inner = CountingBackend()
    backend = injector.wrap(inner)
    for _ in range(3):
        backend.infer(texts(8))  # 8, 16, 24: the third batch starts below 20
    assert injector.computed_records == 24 and injector.failing
    for size in (1, 8, 32):
        with pytest.raises(DeviceError, match="failed after 24 records"):
            backend.infer(texts(size))
    assert inner.runs == 3, "a dead device runs nothing"


def test_zero_records_means_dead_from_the_start() -> None:
    backend = FaultInjector.from_settings(settings(fault_fail_after_records=0)).wrap(CountingBackend())
    with pytest.raises(DeviceError):
        backend.infer(texts(1))


def test_error_rate_matches_for_a_seed_and_repeats_exactly() -> None:
    def outcomes(seed: int) -> list[bool]:
        backend = FaultInjector.from_settings(settings(fault_error_rate=0.2), seed=seed).wrap(CountingBackend())
        failed = []
        for _ in range(2000):
            try:
                backend.infer(texts(2))
                failed.append(False)
            except DeviceError as exc:
                assert not isinstance(exc, DeviceOutOfMemory)
                failed.append(True)
        return failed

    first = outcomes(7)
    assert 0.17 < sum(first) / len(first) < 0.23
    assert outcomes(7) == first, "the same seed fails the same batches"
    assert outcomes(8) != first


def test_set_failing_kills_and_repairs_the_device_at_runtime() -> None:
    injector = FaultInjector.from_settings(settings(fault_fail_after_records=10))
    backend = injector.wrap(CountingBackend())
    probe = injector.wrap_probe(lambda: None)
    backend.infer(texts(2))
    injector.set_failing(True)
    with pytest.raises(DeviceError):
        backend.infer(texts(2))
    with pytest.raises(DeviceError):
        probe()
    injector.set_failing(False)
    for _ in range(5):
        backend.infer(texts(8))  # 42 records: past fail_after_records, yet the repaired device stays up
    probe()
    assert not injector.failing


def test_probe_fails_when_asked() -> None:
    injector = FaultInjector.from_settings(settings(fault_probe_fails=True))
    ran: list[bool] = []
    with pytest.raises(DeviceError, match="health probe"):
        injector.wrap_probe(lambda: ran.append(True))()
    assert ran == []
    assert injector.wrap(CountingBackend()).infer(texts(3)).shape == (3, DIM), "batches still run"


def test_wrapper_keeps_the_backend_surface() -> None:
    inner = CountingBackend()
    backend = FaultyBackend(inner, FaultInjector(seed=1))
    assert (backend.manifest, backend.device, backend.embedding_dim) == (inner.manifest, "cuda", DIM)
    np.testing.assert_array_equal(backend.infer(["ab", "abcd"])[:, 0], [2.0, 4.0])
    assert backend.encode(["x"]).count == 1


def test_error_rate_outside_zero_one_is_refused() -> None:
    with pytest.raises(ValueError):
        FaultInjector(error_rate=1.5)
