"""The gateway's Prometheus metrics (names checked against compose/prometheus/alerts.yml and the
dashboard by tests/unit/compose), and label children resolved once instead of per request."""

import asyncio
import os
from collections.abc import Callable
from typing import Generic, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

Metric = TypeVar("Metric", Counter, Gauge, Histogram)


class Children(Generic[Metric]):
    """A labelled metric's children by label values (in the order of its label names).

    `labels()` validates the names, builds a key and takes a lock on every call; a request
    that counts three series paid that three times. The children are as many as the metric's
    own series, so this holds nothing the metric does not hold already."""

    def __init__(self, metric: Metric) -> None:
        self._metric = metric
        self._children: dict[tuple[str, ...], Metric] = {}

    def __call__(self, *values: str) -> Metric:
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = self._metric.labels(*values)
        return child


class GatewayMetrics:
    def __init__(self) -> None:
        # Set when `--workers N` runs several processes: their values live in files and any process sums them.
        self.multiprocess = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
        self.registry = CollectorRegistry()
        self.requests = Counter("fleet_gateway_requests", "HTTP requests by route and status code",
                                ["route", "code"], registry=self.registry)
        self.latency = Histogram("fleet_gateway_infer_seconds", "Sync infer, receive to response", ["model"],
                                 buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
                                 registry=self.registry)
        self.rule_answers = Counter("fleet_gateway_rule_answers", "Degraded answers from the rule-based fallback "
                                    "because no worker was alive", ["model"], registry=self.registry)
        self.stage = Histogram("fleet_gateway_stage_seconds", "Sync infer stages seen by the gateway: produce "
                               "(publish until Kafka acks), end_to_end (publish until the reply)", ["model", "stage"],
                               buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
                               registry=self.registry)
        self.unavailable = Counter("fleet_gateway_unavailable", "503 answers because a dependency did not answer",
                                   ["dependency"], registry=self.registry)
        self.internal_errors = Counter("fleet_gateway_internal_errors", "Unexpected exceptions answered with 503 "
                                       "(each logged with its error id)", registry=self.registry)
        self.in_flight = Gauge("fleet_gateway_in_flight", "/v1 requests being answered now", registry=self.registry,
                               multiprocess_mode="livesum")
        self.auth_failures = Counter("fleet_gateway_auth_failures", "Requests refused for their API key: missing, "
                                     "invalid (unknown or revoked), forbidden (wrong kind of key)", ["reason"],
                                     registry=self.registry)
        self.quota_rejections = Counter("fleet_gateway_quota_rejections", "429 answers of a tenant over its quota: "
                                        "rate (requests per second) or waits (in flight)", ["tenant", "kind"],
                                        registry=self.registry)
        self.reader_up = Gauge("fleet_gateway_reply_reader_up", "1 while the reply reader reads from Redis "
                               "(of every gateway process)", registry=self.registry, multiprocess_mode="min")
        # The children the request path touches, resolved once per label set.
        self.requests_of = Children(self.requests)
        self.latency_of = Children(self.latency)
        self.stage_of = Children(self.stage)
        self.unavailable_of = Children(self.unavailable)

    def exposition(self) -> bytes:
        if not self.multiprocess:
            return generate_latest(self.registry)
        summed = CollectorRegistry()
        MultiProcessCollector(summed)
        return generate_latest(summed)

    async def follow_reader(self, down: Callable[[], str | None], every_s: float = 0.5) -> None:
        """Keep this process's reader gauge current, for the processes that sum it from files
        (a function gauge is read only by the process that is scraped)."""
        while True:
            self.reader_up.set(0.0 if down() else 1.0)
            await asyncio.sleep(every_s)
