"""Raw in-process model throughput: the ceiling the fleet's throughput is measured against.

The backend is loaded the way a worker loads it (`models.loading.ModelLoader` with the
same settings), in the bench process, while no worker runs, and fed the workload in chunks
of max_batch. Nothing else (Kafka, Redis, msgpack, the event loop) is on the path.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any

from fleet.bench.stats import median
from models.backends.base import Backend
from models.backends.onnx import OnnxEmbeddingBackend
from models.backends.options import RuntimeOptions
from models.loading import ModelLoader
from models.registry import ModelManifest, ModelRegistry
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
            repeats: int) -> RawThroughput:
    """Sentences per second over whole passes through `texts` in chunks of batch_size, after
    one untimed pass (ONNX Runtime plans each new shape on first sight)."""
    batches = chunks(texts, batch_size)
    for batch in batches:
        infer(batch)
    rates = []
    cpu_started = time.process_time()
    for _ in range(repeats):
        started = time.perf_counter()
        for batch in batches:
            infer(batch)
        rates.append(len(texts) / (time.perf_counter() - started))
    cpu_ms = (time.process_time() - cpu_started) * 1000 / (len(texts) * repeats)
    return RawThroughput(median(rates), tuple(rates), cpu_ms, batch_size, len(texts))


def worker_backend(env: dict[str, str]) -> Backend:
    """The backend a worker started with these FLEET_* variables would load."""
    settings: dict[str, Any] = {name.removeprefix("FLEET_").lower(): value for name, value in env.items()
                                if name.startswith("FLEET_")}
    return ModelLoader(WorkerSettings(**settings).runtime()).load()


def raw_throughput(env: dict[str, str], texts: Sequence[str], batch_size: int, repeats: int) -> RawThroughput:
    backend = worker_backend(env)
    try:
        return measure(backend.infer, texts, batch_size, repeats)
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
