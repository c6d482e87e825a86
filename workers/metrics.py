"""Prometheus metrics of one worker process, on a registry the worker owns."""

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

PREFIX = "fleet"
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
EFFICIENCY_BUCKETS = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0)
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class WorkerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        labels = ["model", "version", "role", "device"]
        self.results = Counter(
            f"{PREFIX}_worker_results", "Results delivered, by status", labels + ["status"], registry=self.registry
        )
        self.dead_letters = Counter(
            f"{PREFIX}_worker_dead_letters", "Records sent to the DLQ", ["model", "reason"], registry=self.registry
        )
        self.batch_size = Histogram(
            f"{PREFIX}_batch_size", "Records computed per model batch", labels, buckets=BATCH_BUCKETS, registry=self.registry
        )
        self.queue_wait = Histogram(
            f"{PREFIX}_queue_wait_seconds", "Record timestamp to batch start", labels,
            buckets=LATENCY_BUCKETS, registry=self.registry,
        )
        self.inference = Histogram(
            f"{PREFIX}_inference_seconds", "Tokenise and run one batch", labels,
            buckets=LATENCY_BUCKETS, registry=self.registry,
        )
        self.delivery = Histogram(
            f"{PREFIX}_delivery_seconds", "Deliver one batch's results", labels,
            buckets=LATENCY_BUCKETS, registry=self.registry,
        )
        self.padding_efficiency = Histogram(
            f"{PREFIX}_padding_efficiency", "Real tokens / padded tokens per batch", labels,
            buckets=EFFICIENCY_BUCKETS, registry=self.registry,
        )
        self.expired = Counter(
            f"{PREFIX}_expired", "Requests past their deadline, answered without compute", labels,
            registry=self.registry,
        )
        self.backlog = Gauge(
            f"{PREFIX}_backlog_records", "Records waiting on an assigned partition (highwater - position)",
            ["model", "partition"], registry=self.registry,
        )
