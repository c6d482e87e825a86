"""The worker's probe verdicts (workers/health/probes.py) and the HTTP server that answers them
(workers/health/endpoints.py), on a real socket. The integration test runs them in a real worker."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any, cast

import httpx
from prometheus_client import CollectorRegistry, Counter
from redis.asyncio import Redis

from workers.health.endpoints import MAX_CONNECTIONS, HealthServer
from workers.health.probes import ProcessProbes, WorkerProbes
from workers.health.supervisor import Supervisor
from workers.settings import WorkerSettings
from workers.worker import Worker


async def test_a_process_is_live_while_starting_but_ready_only_once_its_run_loop_serves() -> None:
    probes = ProcessProbes("w1")
    assert probes.live().ok and probes.live().detail["phase"] == "starting"
    assert not probes.ready().ok and probes.ready().detail["reason"].startswith("starting")
    release = asyncio.Event()

    async def run() -> int:
        await release.wait()
        return 7

    running = asyncio.create_task(probes.watch(run()))
    await asyncio.sleep(0)
    assert probes.ready().ok and probes.live().detail["phase"] == "serving"
    probes.stopping()
    assert not probes.ready().ok and probes.ready().detail["reason"] == "stopping"
    release.set()
    assert await running == 7
    assert probes.live().ok, "a run loop that ends after a stop was asked for is a clean shutdown"


async def test_a_run_loop_that_dies_fails_liveness_with_its_error() -> None:
    probes = ProcessProbes("w1")

    async def run() -> int:
        raise RuntimeError("stage crashed")

    try:
        await probes.watch(run())
    except RuntimeError:
        pass
    live = probes.live()
    assert not live.ok and "stage crashed" in live.detail["reason"]
    assert not probes.ready().ok


def stand_in_worker(supervisor: Supervisor | None, unavailable: str | None = None) -> Worker:
    """The public attributes WorkerProbes reads; the verdict logic is what is under test."""
    return cast(Worker, SimpleNamespace(worker_id="w1", group="m", unavailable=unavailable, supervisor=supervisor,
                                        assignment=lambda: frozenset({("fleet.requests.m", 0)})))


async def ready_of(probes: WorkerProbes) -> tuple[bool, dict[str, Any]]:
    async def run() -> int:
        await asyncio.sleep(3600)
        return 0

    running = asyncio.create_task(probes.watch(run()))
    await asyncio.sleep(0)
    verdict = probes.ready()
    running.cancel()
    await asyncio.gather(running, return_exceptions=True)
    return verdict.ok, verdict.detail


async def test_worker_readiness_follows_its_health_drain_switch_and_device() -> None:
    redis = Redis.from_url("redis://127.0.0.1:1/0")  # never used: no heartbeat runs here
    supervisor = Supervisor(WorkerSettings(model="m"), redis, "w1", "cpu", lambda: "v1",
                            probe=lambda: None, backlog=lambda: 0)
    ok, detail = await ready_of(WorkerProbes(stand_in_worker(supervisor)))
    assert ok and detail["state"] == "healthy" and detail["partitions"] == 1

    supervisor.health.record_error(RuntimeError("CUDA error: launch failure"))
    ok, detail = await ready_of(WorkerProbes(stand_in_worker(supervisor)))
    assert ok and detail["state"] == "degraded", "a degraded worker still serves"

    supervisor.drained = True
    ok, detail = await ready_of(WorkerProbes(stand_in_worker(supervisor)))
    assert not ok and detail["reason"] == "drained"

    supervisor.drained = False
    supervisor.health.mark_failed("probe timed out")
    ok, detail = await ready_of(WorkerProbes(stand_in_worker(supervisor)))
    assert not ok and detail["reason"] == "health failed: probe timed out"

    ok, detail = await ready_of(WorkerProbes(stand_in_worker(None, unavailable="no CUDA provider")))
    assert not ok and detail["reason"] == "device unavailable: no CUDA provider"
    await redis.aclose()


async def raw_request(port: int, data: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    answer = await reader.read()
    writer.close()
    await writer.wait_closed()
    return answer


async def test_the_server_answers_probes_metrics_and_refuses_the_rest() -> None:
    registry = CollectorRegistry()
    Counter("fleet_probe_test_total", "a counter to find", registry=registry).inc()
    probes = ProcessProbes("w1")
    async with HealthServer(probes, registry, host="127.0.0.1", port=0) as server, \
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as http:
        assert (await http.get("/livez")).status_code == 200
        assert (await http.get("/healthz")).json()["live"] is True
        not_ready = await http.get("/readyz?verbose")
        assert not_ready.status_code == 503 and not_ready.json()["reason"].startswith("starting")
        metrics = await http.get("/metrics")
        assert metrics.status_code == 200 and "fleet_probe_test_total 1.0" in metrics.text
        assert (await http.get("/nope")).status_code == 404
        assert (await http.post("/readyz")).status_code == 405
        head = await http.head("/livez")
        assert head.status_code == 200 and head.content == b""
        assert await raw_request(server.port, b"garbage\r\n\r\n") == b"", "a malformed request is dropped"
        answer = await raw_request(server.port, b"GET /livez HTTP/1.0\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 200 OK") and json.loads(answer.split(b"\r\n\r\n")[1])["live"]


async def test_a_flood_of_idle_connections_is_capped_and_probes_answer_once_it_ends() -> None:
    probes = ProcessProbes("w1")
    async with HealthServer(probes, CollectorRegistry(), host="127.0.0.1", port=0) as server:
        idle = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(MAX_CONNECTIONS)]
        await asyncio.sleep(0.1)  # all of them accepted, each waiting for a request line
        # Over the cap a connection is answered before it is read, and closed: a client that reads
        # first sees why; one that wrote first may see a reset instead. Neither waits.
        busy = await asyncio.wait_for(raw_request(server.port, b""), 2)
        assert busy.startswith(b"HTTP/1.1 503") and json.loads(busy.split(b"\r\n\r\n")[1]) == {
            "error": "too many connections"}
        assert server.refused == 1
        for _, writer in idle:
            writer.close()
            await writer.wait_closed()
        await asyncio.sleep(0.2)  # the server sees each close and frees its slot
        answer = await raw_request(server.port, b"GET /livez HTTP/1.0\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 200 OK")
