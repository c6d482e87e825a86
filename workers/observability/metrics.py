"""Prometheus metrics of one worker process, on a registry the worker owns.

Every name starts with `fleet_`; model, version, role and device label everything a model
computes. compose/prometheus/alerts.yml and the Grafana dashboard read these names, and a
test checks that every name they use is defined here (or in gateway/app.py).
"""

from collections import Counter as Tally
from collections.abc import Iterator, Mapping, Set
from typing import TYPE_CHECKING

from aiokafka import TopicPartition
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from schemas.wire import now_ms
from workers.cache.metrics import CacheMetrics

if TYPE_CHECKING:
    from models.backends.base import Backend
    from workers.compute.compute import Computed

PREFIX = "fleet"
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
EFFICIENCY_BUCKETS = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0)
# 0.4 and 0.8 sit on the P99 alert lines (0.8 x and 1 x a 500 ms threshold): histogram_quantile
# interpolates inside a bucket, so without a bound there a spread of fast requests reads as a breach.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.4, 0.5, 0.8, 1.0, 2.5, 5.0, 10.0)
TOKEN_BUCKETS = (4, 8, 16, 32, 64, 128, 256, 512)
MODEL_LABELS = ["model", "version", "role", "device"]


class WorkerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        labels = MODEL_LABELS
        reg = self.registry
        self.results = Counter(f"{PREFIX}_worker_results", "Results delivered, by status and cache tier",
                               labels + ["status", "cache"], registry=reg)
        self.dead_letters = Counter(f"{PREFIX}_worker_dead_letters", "Records sent to the DLQ", ["model", "reason"],
                                    registry=reg)
        self.batch_size = Histogram(f"{PREFIX}_batch_size", "Records computed per model batch", labels,
                                    buckets=BATCH_BUCKETS, registry=reg)
        self.queue_wait = Histogram(f"{PREFIX}_queue_wait_seconds", "Record timestamp to batch start", labels,
                                    buckets=LATENCY_BUCKETS, registry=reg)
        self.stage = Histogram(f"{PREFIX}_stage_seconds", "Time per request in each worker stage: topic (record "
                               "timestamp to fetch), batch_wait (fetch to batch start), tokenize, inference, delivery",
                               labels + ["stage"], buckets=LATENCY_BUCKETS, registry=reg)
        self.inference = Histogram(f"{PREFIX}_inference_seconds", "Run one batch through the model", labels,
                                   buckets=LATENCY_BUCKETS, registry=reg)
        self.delivery = Histogram(f"{PREFIX}_delivery_seconds", "Deliver one batch's results", labels,
                                  buckets=LATENCY_BUCKETS, registry=reg)
        self.end_to_end = Histogram(f"{PREFIX}_request_latency_seconds", "Submit to delivered, per request",
                                    labels, buckets=LATENCY_BUCKETS, registry=reg)
        self.input_tokens = Histogram(f"{PREFIX}_input_tokens", "Tokens per input after truncation", labels,
                                      buckets=TOKEN_BUCKETS, registry=reg)
        self.padding_efficiency = Histogram(f"{PREFIX}_padding_efficiency", "Real tokens / padded tokens per batch",
                                            labels, buckets=EFFICIENCY_BUCKETS, registry=reg)
        self.expired = Counter(f"{PREFIX}_expired", "Requests past their deadline, answered without compute", labels,
                               registry=reg)
        self.backlog = Gauge(f"{PREFIX}_backlog_records", "Records waiting on an assigned partition "
                             "(highwater - position)", ["model", "role", "partition"], registry=reg)
        self.healthy = Gauge(f"{PREFIX}_worker_healthy", "1 while this worker serves its model, 0 when it stops",
                             ["model", "role", "device", "worker"], registry=reg)
        self.model_load = Gauge(f"{PREFIX}_model_load_seconds", "Time to verify, load and warm up a model version",
                                ["model", "version", "device"], registry=reg)
        self.oom_splits = Counter(f"{PREFIX}_oom_splits", "Batch halvings after device out-of-memory", labels,
                                  registry=reg)
        self.effective_max_batch = Gauge(f"{PREFIX}_effective_max_batch_size", "Max batch size after OOM back-off",
                                         labels, registry=reg)
        self.forwarded = Counter(f"{PREFIX}_forwarded_to_fallback", "Requests handed to the CPU fallback topic "
                                 "because this worker's device failed", labels, registry=reg)
        self.health_state = Gauge(f"{PREFIX}_worker_health_state", "1 for the worker's current health state "
                                  "(healthy | degraded | failed), 0 for the others",
                                  ["model", "role", "device", "worker", "state"], registry=reg)
        self.failovers = Counter(f"{PREFIX}_failovers", "Times this worker handed its partitions over (device "
                                 "failed or drained)", labels, registry=reg)
        self.waiting = Gauge(f"{PREFIX}_worker_waiting", "1 while delivery waits for a dependency (redis, kafka) "
                             "to answer again; the worker's partitions are paused meanwhile", ["dependency"],
                             registry=reg)
        self.cache = CacheMetrics(reg)
        reg.register(GpuCollector())


    def observe_load(self, model: str, backend: "Backend", seconds: float) -> None:
        self.model_load.labels(model=model, version=backend.manifest.id,
                               device=backend.device).set(seconds)

    def observe_backlog(self, model: str, role: str, owned: Mapping[TopicPartition, int],
                        reported_before: Set[TopicPartition]) -> None:
        for tp, waiting in owned.items():
            self.backlog.labels(model=model, role=role, partition=str(tp.partition)).set(waiting)
        # A partition that moved to another worker is theirs to report; a stale value here would double count.
        for tp in reported_before - owned.keys():
            self.backlog.remove(model, role, str(tp.partition))

    def observe_batch(self, labels: dict[str, str], batch: "Computed") -> None:
        """Everything one delivered micro-batch says about latency, sizes and outcomes."""
        if batch.computed:
            self.batch_size.labels(**labels).observe(batch.computed)
            self.inference.labels(**labels).observe(batch.inference_ms / 1000)
            for queue_ms in batch.stage_ms["queue"]:
                self.queue_wait.labels(**labels).observe(queue_ms / 1000)
            for stage in ("topic", "batch_wait"):
                for ms in batch.stage_ms[stage]:
                    self.stage.labels(**labels, stage=stage).observe(ms / 1000)
            self.stage.labels(**labels, stage="inference").observe(batch.inference_ms / 1000)
        for tokens in batch.input_tokens:
            self.input_tokens.labels(**labels).observe(tokens)
        if batch.padding_efficiency is not None:
            self.padding_efficiency.labels(**labels).observe(batch.padding_efficiency)
        if batch.expired:
            self.expired.labels(**labels).inc(batch.expired)
        delivered_ms = now_ms()
        end_to_end = self.end_to_end.labels(**labels)
        counts = Tally((outcome.result.status.value, outcome.result.cache.value) for outcome in batch.outcomes)
        for (status, cache), count in counts.items():
            self.results.labels(**labels, status=status, cache=cache).inc(count)
        for outcome in batch.outcomes:
            if outcome.request is not None:
                end_to_end.observe(max(delivered_ms - outcome.request.submitted_ms, 0) / 1000)
        for letter in batch.dead_letters:
            self.dead_letters.labels(model=labels["model"], reason=letter.code).inc()


class GpuCollector(Collector):
    """GPU utilisation, memory and temperature through NVML, read at scrape time.

    Exports nothing where NVML (nvidia-ml-py) or a GPU is absent, so CPU workers stay quiet.
    """

    NAMES = ("utilization_ratio", "memory_used_ratio", "temperature_celsius")

    def describe(self) -> Iterator[GaugeMetricFamily]:
        for name in self.NAMES:
            yield GaugeMetricFamily(f"{PREFIX}_gpu_{name}", f"GPU {name.replace('_', ' ')} (NVML)", labels=["gpu"])

    def collect(self) -> Iterator[GaugeMetricFamily]:
        readings = _nvml_readings()
        families = {name: GaugeMetricFamily(f"{PREFIX}_gpu_{name}", f"GPU {name.replace('_', ' ')} (NVML)",
                                            labels=["gpu"]) for name in self.NAMES}
        for gpu, values in readings.items():
            for name, value in values.items():
                families[name].add_metric([gpu], value)
        yield from families.values()


def _nvml_readings() -> dict[str, dict[str, float]]:
    try:
        import pynvml  # type: ignore[import-not-found]
    except ImportError:
        return {}
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver, no GPU: nothing to report
        return {}
    readings: dict[str, dict[str, float]] = {}
    try:
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            readings[str(index)] = {
                "utilization_ratio": pynvml.nvmlDeviceGetUtilizationRates(handle).gpu / 100,
                "memory_used_ratio": memory.used / memory.total,
                "temperature_celsius": float(pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)),
            }
    finally:
        pynvml.nvmlShutdown()
    return readings
