"""Prometheus metrics of one worker process, on a registry the worker owns.

Every name starts with `fleet_`; model, version, role and device label everything a model
computes. compose/prometheus/alerts.yml and the Grafana dashboard read these names, and a
test checks that every name they use is defined here (or in gateway/app.py).
"""

from collections import Counter as Tally
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
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
MAX_LABEL_SETS = 64  # cached children of (model, version, role, device): a worker serves a few versions


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
                             "(highwater - position), per priority lane (schemas/lanes.py)",
                             ["model", "role", "lane", "partition"], registry=reg)
        self.lane_batches = Counter(f"{PREFIX}_lane_batches", "Batches collected per priority lane; turn=share: "
                                    "a lower lane's guaranteed turn while a higher lane had records waiting",
                                    ["model", "role", "lane", "turn"], registry=reg)
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
        self.model_info = Gauge(f"{PREFIX}_model_info", "1 for every model version this worker serves, labelled "
                                "by its task (models/tasks) and precision: join on (model, version) to break any "
                                "series down by task", ["model", "version", "task", "precision"], registry=reg)
        self.failovers = Counter(f"{PREFIX}_failovers", "Times this worker handed its partitions over (device "
                                 "failed or drained)", labels, registry=reg)
        self.waiting = Gauge(f"{PREFIX}_worker_waiting", "1 while delivery waits for a dependency (redis, kafka) "
                             "to answer again; the worker's partitions are paused meanwhile", ["dependency"],
                             registry=reg)
        self.transactions = Counter(f"{PREFIX}_worker_transactions", "Delivery transactions of exactly-once lanes "
                                    "by outcome: committed, skipped (answered before), fenced (another worker "
                                    "serves the partition now) or gap (a batch read before a rebalance; read again)", ["model", "outcome"], registry=reg)
        self.cache = CacheMetrics(reg)
        reg.register(GpuCollector())
        self._series: dict[tuple[str, ...], _ModelSeries] = {}


    def observe_load(self, model: str, backend: "Backend", seconds: float) -> None:
        self.model_load.labels(model=model, version=backend.manifest.id,
                               device=backend.device).set(seconds)
        self.observe_model(model, backend)

    def observe_model(self, model: str, backend: "Backend") -> None:
        manifest = backend.manifest
        self.model_info.labels(model=model, version=manifest.id, task=manifest.task,
                               precision=manifest.precision).set(1)

    def observe_backlog(self, model: str, role: str, owned: Mapping[TopicPartition, int],
                        reported_before: Mapping[TopicPartition, str], lane_of: Callable[[str], str]) -> dict[TopicPartition, str]:
        """Set each owned partition's backlog; returns the lane of each reported partition (pass it
        back next time)."""
        reported = {tp: lane_of(tp.topic) for tp in owned}
        for tp, waiting in owned.items():
            self.backlog.labels(model=model, role=role, lane=reported[tp], partition=str(tp.partition)).set(waiting)
        # A partition that moved to another worker is theirs to report; a stale value here would double count.
        for tp, lane in reported_before.items():
            if tp not in owned:
                self.backlog.remove(model, role, lane, str(tp.partition))
        return reported

    def observe_batch(self, labels: dict[str, str], batch: "Computed") -> None:
        """Everything one delivered micro-batch says about latency, sizes and outcomes."""
        series = self._series_of(labels)
        if batch.computed:
            series.batch_size.observe(batch.computed)
            series.inference.observe(batch.inference_ms / 1000)
            observe_all(series.queue_wait, batch.stage_ms["queue"], scale=1e-3)
            observe_all(series.topic, batch.stage_ms["topic"], scale=1e-3)
            observe_all(series.batch_wait, batch.stage_ms["batch_wait"], scale=1e-3)
            series.inference_stage.observe(batch.inference_ms / 1000)
        observe_all(series.input_tokens, batch.input_tokens)
        if batch.padding_efficiency is not None:
            series.padding_efficiency.observe(batch.padding_efficiency)
        if batch.expired:
            series.expired.inc(batch.expired)
        delivered_ms = now_ms()
        # By member, not `.value`: an enum's value is a descriptor lookup, two a result.
        counts = Tally((outcome.result.status, outcome.result.cache) for outcome in batch.outcomes)
        for (status, cache), count in counts.items():
            series.result(status.value, cache.value).inc(count)
        observe_all(series.end_to_end, [max(delivered_ms - outcome.request.submitted_ms, 0)
                                        for outcome in batch.outcomes if outcome.request is not None], scale=1e-3)
        for letter in batch.dead_letters:
            self.dead_letters.labels(model=labels["model"], reason=letter.code).inc()

    def _series_of(self, labels: dict[str, str]) -> "_ModelSeries":
        """The children of one label set, looked up once: `labels()` costs more than an observation."""
        key = tuple(labels[name] for name in MODEL_LABELS)
        series = self._series.get(key)
        if series is None:
            if len(self._series) >= MAX_LABEL_SETS:
                self._series.clear()  # versions come and go; the children stay in their families regardless
            series = self._series[key] = _ModelSeries(self, labels)
        return series


def observe_all(histogram: Histogram, values: Sequence[float], *, scale: float = 1.0) -> None:
    """`histogram.observe(v * scale)` for every value, as one increment per bucket the values fall
    in: a batch's per-request latencies cost one observation each otherwise, more than the rest of
    a cache hit. Reaches into the child's buckets (prometheus_client keeps them as `_buckets`, with
    `_upper_bounds` and `_sum`); a child without them is observed value by value."""
    if not len(values):
        return
    bounds, buckets, total = (getattr(histogram, name, None) for name in ("_upper_bounds", "_buckets", "_sum"))
    if bounds is None or buckets is None or total is None:
        for value in values:
            histogram.observe(value * scale)
        return
    scaled = np.asarray(values, dtype=np.float64) * scale
    # observe() counts a value in the first bucket whose upper bound is >= it (the last bound is +Inf).
    counts = np.bincount(np.searchsorted(np.asarray(bounds), scaled, side="left"), minlength=len(bounds))
    for bucket, count in zip(buckets, counts.tolist(), strict=False):
        if count:
            bucket.inc(count)
    total.inc(float(scaled.sum()))


class _ModelSeries:
    """The per-batch metrics' children of one (model, version, role, device)."""

    def __init__(self, metrics: WorkerMetrics, labels: dict[str, str]) -> None:
        self._metrics, self._labels = metrics, labels
        self.batch_size = metrics.batch_size.labels(**labels)
        self.inference = metrics.inference.labels(**labels)
        self.queue_wait = metrics.queue_wait.labels(**labels)
        self.topic = metrics.stage.labels(**labels, stage="topic")
        self.batch_wait = metrics.stage.labels(**labels, stage="batch_wait")
        self.inference_stage = metrics.stage.labels(**labels, stage="inference")
        self.input_tokens = metrics.input_tokens.labels(**labels)
        self.padding_efficiency = metrics.padding_efficiency.labels(**labels)
        self.expired = metrics.expired.labels(**labels)
        self.end_to_end = metrics.end_to_end.labels(**labels)
        self._results: dict[tuple[str, str], Counter] = {}

    def result(self, status: str, cache: str) -> Counter:
        child = self._results.get((status, cache))
        if child is None:
            child = self._results[(status, cache)] = self._metrics.results.labels(**self._labels, status=status,
                                                                                   cache=cache)
        return child


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
