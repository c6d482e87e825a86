"""Raw in-process model throughput: the ceiling the fleet's throughput is measured against.

The backend is loaded the way a worker loads it (`models.loading.ModelLoader` with the
same settings), in the bench process, while no worker runs, and fed the workload in chunks
of max_batch, as many at once as the worker hands its model. Nothing else (Kafka, Redis,
msgpack, the event loop) is on the path.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields
from typing import Any

from fleet_dev.bench.stats import median
from models.backends.base import Backend
from models.backends.onnx import OnnxEmbeddingBackend
from models.backends.options import RuntimeOptions
from models.loading import ModelLoader
from models.registry import ModelManifest, ModelRegistry
from workers.compute.parallelism import batches_in_flight
from workers.settings import WorkerSettings

LENGTH_BUCKET_KEYWORD = "length_bucket_size"


@dataclass(frozen=True)
class RawThroughput:
    sentences_per_s: float  # median of the repeats
    repeats_per_s: tuple[float, ...]
    cpu_ms_per_sentence: float  # process CPU (all threads, ONNX Runtime's included) over the timed repeats
    batch_size: int
    sentences: int


@dataclass(frozen=True)
class LengthAwareComparison:
    batch_size: int
    bucketed_per_s: float  # length_bucket_size=16
    unsorted_per_s: float  # length_bucket_size=0

    @property
    def speedup(self) -> float:
        return self.bucketed_per_s / self.unsorted_per_s if self.unsorted_per_s else float("nan")


def chunks(texts: Sequence[str], size: int) -> list[Sequence[str]]:
    if size < 1:
        raise ValueError(f"chunk size must be >= 1, got {size}")
    return [texts[start:start + size] for start in range(0, len(texts), size)]


def measure(infer: Callable[[Sequence[str]], object], texts: Sequence[str], batch_size: int,
            repeats: int, batches_at_once: int = 1) -> RawThroughput:
    """Sentences per second over whole passes through `texts` in chunks of batch_size, after
    one untimed pass (ONNX Runtime plans each new shape on first sight); `batches_at_once` chunks
    run side by side, each in its own thread, as a worker's compute stage runs them."""
    batches = chunks(texts, batch_size)
    with ThreadPoolExecutor(batches_at_once, thread_name_prefix="raw") as threads:
        def one_pass() -> None:
            for _ in threads.map(infer, batches):
                pass

        one_pass()
        rates = []
        cpu_started = time.process_time()
        for _ in range(repeats):
            started = time.perf_counter()
            one_pass()
            rates.append(len(texts) / (time.perf_counter() - started))
    cpu_ms = (time.process_time() - cpu_started) * 1000 / (len(texts) * repeats)
    return RawThroughput(median(rates), tuple(rates), cpu_ms, batch_size, len(texts))


def worker_settings(env: dict[str, str]) -> WorkerSettings:
    """The settings a worker started with these FLEET_* variables would have."""
    settings: dict[str, Any] = {name.removeprefix("FLEET_").lower(): value for name, value in env.items()
                                if name.startswith("FLEET_")}
    return WorkerSettings(**settings)


def worker_backend(env: dict[str, str]) -> Backend:
    """The backend a worker started with these FLEET_* variables would load."""
    return ModelLoader(worker_settings(env).runtime()).load()


def raw_throughput(env: dict[str, str], texts: Sequence[str], batch_size: int, repeats: int) -> RawThroughput:
    """The model as that worker would run it: its threads per batch, as many batches at once."""
    settings = worker_settings(env)
    backend = ModelLoader(settings.runtime()).load()
    try:
        at_once = batches_in_flight(backend.device, settings.model_batches_in_flight)
        return measure(backend.infer, texts, batch_size, repeats, at_once)
    finally:
        del backend
        gc.collect()  # release the session and its thread pool before a worker starts


def length_aware_available() -> bool:
    return LENGTH_BUCKET_KEYWORD in {option.name for option in fields(RuntimeOptions)}


def compare_length_aware(registry: ModelRegistry, manifest: ModelManifest, texts: Sequence[str], *,
                         batch_size: int, intra_op_threads: int, repeats: int) -> LengthAwareComparison:
    """Raw throughput at `batch_size` with length-aware sub-batches (16 rows) and without."""
    rates: dict[int, float] = {}
    for bucket in (16, 0):
        options = RuntimeOptions(intra_op_threads=intra_op_threads, length_bucket_size=bucket)
        backend = OnnxEmbeddingBackend.load(registry, manifest, options)
        rates[bucket] = measure(backend.infer, texts, batch_size, repeats).sentences_per_s
        del backend
        gc.collect()
    return LengthAwareComparison(batch_size, bucketed_per_s=rates[16], unsorted_per_s=rates[0])
