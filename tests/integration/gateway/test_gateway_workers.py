"""`fleet-gateway --workers 2` as a real process tree: both children answer on the one port,
each reply reaches the process whose caller waits for it, /metrics sums both children, and one
SIGTERM to the parent ends them all."""

import asyncio
import os
import signal
from pathlib import Path

import httpx
from redis.asyncio import Redis

from common.settings import FleetSettings
from tests.integration.conftest import Process
from fleet.ports import free_port
from tests.integration.gateway.gateway_harness import METRICS_TENANT, bearer, cli_key, echo_worker

MODEL = "gw-workers"
REQUESTS = 60


def children_of(pid: int) -> set[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as listing:
        return {int(child) for child in listing.read().split()}


async def test_two_processes_share_the_port_and_answer_their_own_callers(redis: Redis, stack: FleetSettings,
                                                                          tmp_path: Path) -> None:
    key, metrics_key = cli_key("gw-workers"), cli_key(METRICS_TENANT)
    port = free_port()
    process = Process(["-m", "gateway.main", "--workers", "2"], {"FLEET_PORT": str(port), "FLEET_MODELS": f'["{MODEL}"]'},
                      "gateway listening", tmp_path / "gateway.log")
    try:
        children = children_of(process.popen.pid)
        assert len(children) == 2
        async with echo_worker(stack, MODEL, redis), \
                httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
            answers = await asyncio.gather(*(
                http.post(f"/v1/models/{MODEL}/infer", json={"text": f"question {i}"}, headers=bearer(key))
                for i in range(REQUESTS)))
            metrics = (await http.get("/metrics", headers=bearer(metrics_key))).text
        assert [answer.status_code for answer in answers] == [200] * REQUESTS
        assert sorted(answer.json()["outputs"]["echo"] for answer in answers) == sorted(
            f"question {i}" for i in range(REQUESTS))
        served = [line for line in metrics.splitlines()
                  if line.startswith("fleet_gateway_requests_total") and 'code="200"' in line and "infer" in line]
        assert served and sum(float(line.rsplit(" ", 1)[1]) for line in served) == REQUESTS, served
        log = process.log_path.read_text()
        assert log.count("gateway listening") == 2
    finally:
        code = process.stop(signal.SIGTERM)
    assert code == 0
    assert not any(os.path.exists(f"/proc/{child}") and _not_zombie(child) for child in children)


def _not_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False
