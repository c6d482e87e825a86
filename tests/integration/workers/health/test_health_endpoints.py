"""A real worker process answers the probes compose/k8s/ points at it: /livez, /healthz, /readyz, /metrics
on FLEET_METRICS_PORT, following its group membership, its drain switch and its device."""

import asyncio
import signal
import time
from pathlib import Path
from typing import Any

import httpx
from redis.asyncio import Redis

from common.heartbeats import drain, undrain
from tests.integration.conftest import MODEL, NO_GPU_WORKER, Process, start_worker
from fleet.ports import free_port


async def answer_when(url: str, expected: int, timeout_s: float = 30) -> dict[str, Any]:
    """The JSON body of the first answer of `url` with status `expected`; fails with the last one seen."""
    last: object = None
    give_up = time.monotonic() + timeout_s
    async with httpx.AsyncClient(timeout=2) as http:
        while time.monotonic() < give_up:
            try:
                response = await http.get(url)
                if response.status_code == expected:
                    body: dict[str, Any] = response.json()
                    return body
                last = (response.status_code, response.text)
            except httpx.TransportError as exc:
                last = exc
            await asyncio.sleep(0.1)
    raise AssertionError(f"{url} never answered {expected}; last: {last}")


async def test_probes_follow_readiness_through_a_drain_and_a_clean_stop(
        processes: list[Process], tmp_path: Path, redis: Redis) -> None:
    port = free_port()
    worker_id = "k8s-probed"
    worker = start_worker(processes, tmp_path, worker_id, FLEET_METRICS_PORT=str(port),
                          FLEET_HEARTBEAT_INTERVAL_S="0.2")
    base = f"http://127.0.0.1:{port}"
    try:
        ready = await answer_when(f"{base}/readyz", 200)
        assert ready["state"] == "healthy" and ready["worker"] == worker_id and ready["group"] == MODEL
        assert (await answer_when(f"{base}/livez", 200))["phase"] == "serving"
        await answer_when(f"{base}/healthz", 200)
        assert "fleet_worker_healthy" in httpx.get(f"{base}/metrics").text

        await drain(redis, worker_id)
        drained = await answer_when(f"{base}/readyz", 503)
        assert drained["reason"] == "drained" and drained["drained"] is True
        assert (await answer_when(f"{base}/livez", 200))["live"], "a drained worker is alive: no restart"

        await undrain(redis, worker_id)
        assert (await answer_when(f"{base}/readyz", 200))["ready"]
    finally:
        await undrain(redis, worker_id)
    assert worker.stop(signal.SIGTERM) == 0, worker.log_path.read_text()[-2000:]
    assert "worker stopped after" in worker.log_path.read_text()


async def test_a_worker_without_its_device_is_alive_but_never_ready(
        processes: list[Process], tmp_path: Path) -> None:
    port = free_port()
    worker = Process(["-m", "workers.main"], {"FLEET_MODEL": MODEL, "FLEET_WORKER_ID": "k8s-no-gpu",
                                              "FLEET_METRICS_PORT": str(port), **NO_GPU_WORKER},
                     "failed at start", tmp_path / "no-gpu.log")
    processes.append(worker)
    base = f"http://127.0.0.1:{port}"
    not_ready = await answer_when(f"{base}/readyz", 503)
    assert not_ready["reason"].startswith("device unavailable: device 'cuda'"), not_ready
    assert (await answer_when(f"{base}/livez", 200))["live"], "restarting would not bring the device back"


async def test_a_shadow_worker_is_ready_while_it_compares_and_stops_cleanly(
        processes: list[Process], tmp_path: Path) -> None:
    port = free_port()
    shadow = start_worker(processes, tmp_path, "k8s-shadow", FLEET_ROLE="shadow", FLEET_METRICS_PORT=str(port))
    base = f"http://127.0.0.1:{port}"
    assert (await answer_when(f"{base}/readyz", 200))["worker"] == "k8s-shadow"
    assert (await answer_when(f"{base}/livez", 200))["phase"] == "serving"
    assert "fleet_shadow" in httpx.get(f"{base}/metrics").text
    assert shadow.stop(signal.SIGTERM) == 0, shadow.log_path.read_text()[-2000:]
