import asyncio

from prometheus_client import generate_latest

from gateway.client import FleetClient
from tests.integration.conftest import MODEL
from models.backends.base import Backend


async def test_a_serving_worker_exports_batch_queue_and_inference_histograms(client: FleetClient, serve,  # type: ignore[no-untyped-def]
                                                                             backend: Backend) -> None:
    async with serve() as worker:
        await asyncio.gather(*(client.infer(MODEL, f"metrics question {i}", timeout=30) for i in range(50)))
        await asyncio.sleep(0.1)  # counters move just after the replies are delivered
        registry = worker.metrics.registry
        labels = {"model": MODEL, "version": backend.manifest.id, "role": "primary", "device": "cpu"}
        for family in ("fleet_batch_size", "fleet_queue_wait_seconds", "fleet_inference_seconds",
                       "fleet_request_latency_seconds", "fleet_input_tokens", "fleet_padding_efficiency"):
            count = registry.get_sample_value(f"{family}_count", labels)
            assert count is not None and count > 0, family
        assert (registry.get_sample_value("fleet_batch_size_sum", labels) or 0) >= 50
        ok = registry.get_sample_value("fleet_worker_results_total", {**labels, "status": "ok", "cache": "miss"})
        assert ok is not None and ok >= 50
        for stage in ("topic", "batch_wait", "inference", "delivery"):
            assert (registry.get_sample_value("fleet_stage_seconds_count", {**labels, "stage": stage}) or 0) > 0
        healthy = {"model": MODEL, "role": "primary", "device": "cpu", "worker": worker.worker_id}
        assert registry.get_sample_value("fleet_worker_healthy", healthy) == 1
        assert registry.get_sample_value("fleet_worker_health_state", {**healthy, "state": "healthy"}) == 1
        assert registry.get_sample_value("fleet_worker_health_state", {**healthy, "state": "failed"}) == 0
        text = generate_latest(registry).decode()
    assert f'fleet_inference_seconds_bucket{{device="cpu",le="+Inf",model="{MODEL}"' in text
    assert registry.get_sample_value("fleet_worker_healthy", healthy) == 0  # a stopped worker says so
