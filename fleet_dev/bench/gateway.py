"""`scripts/bench gateway`: what one HTTP gateway costs per request when every answer is cached.

One worker serves a bench-only model name on the simulated device (`h200-minilm`) with the exact
cache on; the gateway (`python -m gateway.main --workers N`, authentication on, quotas out of the
way) takes a closed loop of keep-alive HTTP callers (fleet_dev/bench/http_load.py) posting 64 texts
that a warm-up pass put in the cache, so every reply is an exact hit and the gateway's own path
(auth, validation, JSON, the produce, the reply waiter) is what is measured. Each process count
runs twice: with the model routes on the gateway's fast path (its default), and through FastAPI
(FLEET_FAST_ROUTES=false), the same answers by the framework's request path. Beside /v1, the same
texts through the Open Inference Protocol (POST /v2/models/{model}/infer, one BYTES element a
call): its JSON form and Triton's binary tensor extension (fleet_dev/bench/oip_requests.py). Per row: req/s,
latency, and CPU ms per request of the gateway's processes, the worker and the load generator
(/proc counters over the window). The bench itself runs on uvloop, as the gateway does.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import httpx

from common.auth_keys import create_key, revoke_key
from common.clients import redis_client
from common.settings import FleetSettings
from common.topics import ensure_topics
from fleet_dev.bench.fleet_process import WorkerProcess, bench_alias, process_cpu_s
from fleet_dev.bench.http_load import HttpSamples, closed_loop_http
from fleet_dev.bench.oip_requests import ROUTES, route_requests
from fleet_dev.bench.plots import plot_beside
from fleet_dev.bench.stats import percentile
from fleet_dev.bench.workload import support_queries
from fleet.tables import format_table
from fleet.ports import free_port
from gateway.main import run_loop
from models.registry import ModelRegistry
from schemas.names import requests_topic
from schemas.wire import now_ms

MODEL = "minilm-embed"
BENCH_MODEL = "minilm-embed-gwbench"
TENANT = "bench-gateway"
TEXTS = 64
HOST = "127.0.0.1"


@dataclass(frozen=True)
class Row:
    processes: int
    path: str
    route: str
    callers: int
    samples: HttpSamples
    gateway_cpu_s: float
    worker_cpu_s: float
    load_cpu_s: float

    def cells(self) -> list[str]:
        done = max(self.samples.completed, 1)
        failed = sum(count for status, count in self.samples.statuses.items() if status != 200)
        codes = " ".join(f"{status}x{count}" for status, count in sorted(self.samples.statuses.items()) if status != 200)
        return [str(self.processes), self.path, self.route, str(self.callers), f"{self.samples.completed / self.samples.window_s:,.0f}",
                f"{percentile(self.samples.latencies_ms, 50):.1f}", f"{percentile(self.samples.latencies_ms, 99):.1f}",
                f"{self.gateway_cpu_s * 1000 / done:.3f}", f"{self.worker_cpu_s * 1000 / done:.3f}",
                f"{self.load_cpu_s * 1000 / done:.3f}", f"{failed} ({codes})" if failed else "0"]


    def record(self) -> dict[str, object]:
        """The row as the JSON document holds it (and fleet_dev/bench/plots.py draws it)."""
        done = max(self.samples.completed, 1)
        return {"processes": self.processes, "path": self.path, "route": self.route, "callers": self.callers,
                "requests_per_s": self.samples.completed / self.samples.window_s,
                "p50_ms": percentile(self.samples.latencies_ms, 50), "p99_ms": percentile(self.samples.latencies_ms, 99),
                "gateway_cpu_ms": self.gateway_cpu_s * 1000 / done, "worker_cpu_ms": self.worker_cpu_s * 1000 / done,
                "load_cpu_ms": self.load_cpu_s * 1000 / done,
                "non_200": {str(status): count for status, count in self.samples.statuses.items() if status != 200}}


def write_json(path: Path, rows: Sequence[Row], args: argparse.Namespace) -> Path:
    """The run's rows beside its logs' parent (`<home>/bench/gateway.json`); NaN latencies stay NaN."""
    meta = {"started": f"{datetime.now():%Y-%m-%d %H:%M}", "seconds": args.seconds,
            "caption": "scripts/bench gateway: every answer an exact-cache hit, one worker on the sim device"}
    path.write_text(json.dumps({"meta": meta, "gateway_rows": [row.record() for row in rows]}, indent=1))
    return path


HEADERS = ("gateway processes", "model routes", "route", "callers", "req/s", "p50 ms", "p99 ms", "gateway CPU ms/req", "worker CPU ms/req",
           "load CPU ms/req", "non-200")


def family_cpu_s(pid: int) -> float:
    """CPU seconds of a process and its children (the gateway's parent and its forked processes)."""
    pids = [pid]
    try:
        pids += [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        pass
    return sum(process_cpu_s(one) for one in pids)


# How the gateway serves POST /v1/models/{model}/infer: its fast path, or FastAPI (FLEET_FAST_ROUTES=false).
PATHS = {"fast path": "true", "FastAPI": "false"}


class Gateway:
    def __init__(self, processes: int, path: str, port: int, log_file: Path, *, model: str = BENCH_MODEL,
                 env: dict[str, str] | None = None) -> None:
        env = {**os.environ, "FLEET_PORT": str(port), "FLEET_MODELS": f'["{model}"]',
               "FLEET_TENANT_RPS": "1000000", "FLEET_TENANT_BURST": "1000000", "FLEET_TENANT_MAX_WAITS": "100000",
               "FLEET_MAX_IN_FLIGHT": "10000", "FLEET_FAST_ROUTES": PATHS[path], **(env or {})}
        self.log_file = log_file
        self._log = log_file.open("wb")
        self.popen = subprocess.Popen([sys.executable, "-m", "gateway.main", "--workers", str(processes)], env=env,
                                      stdout=self._log, stderr=subprocess.STDOUT)
        self.url = f"http://{HOST}:{port}"

    def wait_ready(self, timeout_s: float = 60) -> None:
        give_up = time.monotonic() + timeout_s
        while time.monotonic() < give_up:
            if self.popen.poll() is not None:
                break
            try:
                if httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise SystemExit(f"the gateway did not get ready (log: {self.log_file})")

    def stop(self) -> None:
        self.popen.terminate()
        try:
            self.popen.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.popen.kill()
        self._log.close()


async def measure(gateway: Gateway, worker: WorkerProcess, port: int, requests: Sequence[bytes], processes: int,
                  path: str, route: str, callers: int, seconds: float) -> Row:
    edges: list[tuple[float, float, float]] = []

    def mark() -> None:
        edges.append((family_cpu_s(gateway.popen.pid), process_cpu_s(worker.pid), process_cpu_s(os.getpid())))

    samples = await closed_loop_http(HOST, port, requests, callers=callers, warmup_s=1.0, duration_s=seconds,
                                     at_window_edges=mark)
    (g0, w0, l0), (g1, w1, l1) = edges
    return Row(processes, path, route, callers, samples, g1 - g0, w1 - w0, l1 - l0)


async def main_async(args: argparse.Namespace) -> int:
    settings = FleetSettings()
    source = ModelRegistry(settings.registry_dir)
    alias_registry = ModelRegistry(settings.home / "bench" / "models")
    bench_alias(source, source.resolve(MODEL, precision="fp32"), alias_registry, BENCH_MODEL)
    await ensure_topics(settings, [requests_topic(BENCH_MODEL)], 4)
    logs = settings.home / "bench" / f"gateway-{datetime.now():%Y%m%d-%H%M%S}"
    logs.mkdir(parents=True, exist_ok=True)
    redis = redis_client(settings)
    issued = await create_key(redis, TENANT, now_ms=now_ms())
    headers = {"Authorization": f"Bearer {issued.key}"}
    texts = support_queries(TEXTS)
    requests = {route: route_requests(route, HOST, BENCH_MODEL, texts, headers) for route in args.routes}
    worker_env = {"FLEET_MODEL": BENCH_MODEL, "FLEET_MODEL_DIR": str(alias_registry.root), "FLEET_BACKEND": "sim",
                  "FLEET_SIM_PRESET": "h200-minilm", "FLEET_EXACT_CACHE": "true", "FLEET_MAX_BATCH_SIZE": "256",
                  "FLEET_WORKER_ID": "bench-gateway-worker", "FLEET_SESSION_TIMEOUT_MS": "6000",
                  "FLEET_RESULT_TTL_S": "120"}  # results of a bench run must not fill the stack's Redis
    rows: list[Row] = []
    try:
        with WorkerProcess(worker_env, logs / "worker.log") as worker:
            await asyncio.to_thread(worker.wait_ready, 90)
            for processes in args.workers:
                for path in args.paths:
                    port = free_port()
                    gateway = Gateway(processes, path, port, logs / f"gateway-{processes}-{PATHS[path]}.log")
                    try:
                        await asyncio.to_thread(gateway.wait_ready)
                        # Fill the cache (and warm the gateway) before anything is measured.
                        await closed_loop_http(HOST, port, requests[args.routes[0]], callers=8, warmup_s=0, duration_s=1.0)
                        for route, callers in measured_runs(args, path):
                            row = await measure(gateway, worker, port, requests[route], processes, path, route,
                                                callers, args.seconds)
                            print(format_table(HEADERS, [row.cells()]), flush=True)
                            rows.append(row)
                    finally:
                        gateway.stop()
    finally:
        await revoke_key(redis, issued.record.key_id, now_ms=now_ms())
        await redis.aclose()
    print(f"\nevery answer an exact-cache hit; worker on the sim device; logs in {logs}\n")
    print(format_table(HEADERS, [row.cells() for row in rows]))
    plot_beside(write_json(settings.home / "bench" / "gateway.json", rows, args))
    return 0 if all(not math.isnan(percentile(row.samples.latencies_ms, 50)) for row in rows) else 1


def measured_runs(args: argparse.Namespace, path: str) -> list[tuple[str, int]]:
    """(route, callers) of one gateway: /v2 is served beside FastAPI whatever FLEET_FAST_ROUTES says,
    so its rows are measured once, with the fast path."""
    routes = [route for route in args.routes if route == "/v1" or path == "fast path"]
    return [(route, callers) for callers in args.callers for route in routes]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench gateway", description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="gateway process counts to run")
    parser.add_argument("--callers", type=int, nargs="+", default=[64, 128, 256], help="closed-loop callers")
    parser.add_argument("--paths", nargs="+", choices=sorted(PATHS), default=list(PATHS),
                        help="how the model routes are served: the gateway's fast path, FastAPI, or both")
    parser.add_argument("--routes", nargs="+", choices=ROUTES, default=list(ROUTES),
                        help="/v1, and the Open Inference Protocol's infer in JSON and in binary")
    parser.add_argument("--seconds", type=float, default=8.0, help="measured window of each row")
    return run_loop(main_async(parser.parse_args(argv)))


if __name__ == "__main__":
    raise SystemExit(main())
