"""Observing a batch's values in one go leaves a histogram exactly as observing them one by one,
and a worker's per-batch metrics look their children up once per label set."""

import pytest
from prometheus_client import CollectorRegistry, Histogram

from workers.observability.metrics import LATENCY_BUCKETS, WorkerMetrics, observe_all


def _samples(histogram: Histogram) -> dict[tuple[str, str], float]:
    return {(sample.name, sample.labels.get("le", "")): sample.value
            for family in histogram.collect() for sample in family.samples if not sample.name.endswith("_created")}


@pytest.mark.parametrize("values_ms", [
    [0.2, 1.0, 2.5, 2.5000001, 7.0, 400.0, 400.5, 12_000.0],  # on, just past and beyond the bounds
    [3.0] * 100,
    [],
])
def test_bulk_observations_match_one_by_one(values_ms: list[float]) -> None:
    one_by_one = Histogram("one", "one", buckets=LATENCY_BUCKETS, registry=CollectorRegistry())
    bulk = Histogram("one", "one", buckets=LATENCY_BUCKETS, registry=CollectorRegistry())
    for value in values_ms:
        one_by_one.observe(value / 1000)
    observe_all(bulk, values_ms, scale=1e-3)
    expected, got = _samples(one_by_one), _samples(bulk)
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, rel=1e-12, abs=1e-12), key


def test_children_are_resolved_once_per_label_set() -> None:
    metrics = WorkerMetrics()
    labels = {"model": "m", "version": "m-1", "role": "primary", "device": "cpu"}
    first = metrics._series_of(labels)
    assert metrics._series_of(dict(labels)) is first
    assert metrics._series_of({**labels, "version": "m-2"}) is not first
    first.end_to_end.observe(0.01)
    assert metrics.registry.get_sample_value("fleet_request_latency_seconds_count", labels) == 1
