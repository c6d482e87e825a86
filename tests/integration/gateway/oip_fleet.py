"""A live fleet for the Open Inference Protocol's tests: an embedding worker (minilm-embed), a
classifier worker (faq-intent) and a gateway serving REST and gRPC, all real processes on the
stack's Kafka and Redis, so the clients under test (tritonclient, KServe's) block without
stalling anything they wait for."""

import json
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from common.settings import FleetSettings
from tests.integration.conftest import Process
from tests.integration.gateway.gateway_harness import free_port, issue_key

EMBED = "minilm-embed"
CLASSIFY = "faq-intent"
TENANT = "oip-tests"
TIGHT_TENANT = "oip-tight"  # a burst of 2 requests, refilled once in ~15 minutes: a 3-row call is over quota
TIGHT_QUOTA = '{"oip-tight": {"rps": 0.001, "burst": 2}}'


@dataclass(frozen=True)
class OipFleet:
    http_url: str
    http_address: str  # host:port, as tritonclient.http takes it
    grpc_address: str
    key: str
    tight_key: str
    processes: tuple[Process, ...]

    def all_running(self) -> bool:
        return all(process.popen.poll() is None for process in self.processes)

    def headers(self) -> dict[str, str]:
        """A new dict per call: tritonclient.http writes its own headers into the dict it is given."""
        return {"Authorization": f"Bearer {self.key}"}

    def grpc_headers(self, key: str | None = None) -> dict[str, str]:
        return {"authorization": f"Bearer {key or self.key}"}


DEFAULT_WORKERS = {EMBED: {}, CLASSIFY: {}}


@asynccontextmanager
async def live_fleet(stack: FleetSettings, logs: Path, workers: dict[str, dict[str, str]] | None = None
                     ) -> AsyncIterator[OipFleet]:
    """A worker per model of `workers` (model -> extra env, e.g. FLEET_MODEL_DIR) and a gateway serving them."""
    workers = DEFAULT_WORKERS if workers is None else workers
    key = await issue_key(stack.redis_url, TENANT)
    tight_key = await issue_key(stack.redis_url, TIGHT_TENANT)
    port, grpc_port = free_port(), free_port()
    started: list[Process] = []
    try:
        for model, env in workers.items():
            name = f"oip-{model}"
            started.append(Process(["-m", "workers.main"], {
                "FLEET_MODEL": model, "FLEET_WORKER_ID": name, "FLEET_SESSION_TIMEOUT_MS": "6000",
                "FLEET_MAX_QUEUE_DELAY_MS": "10", **env}, "ready:", logs / f"{name}.log"))
        started.append(Process(["-m", "gateway.main"], {
            "FLEET_PORT": str(port), "FLEET_GRPC_PORT": str(grpc_port), "FLEET_MODELS": json.dumps(list(workers)),
            "FLEET_TENANT_QUOTAS": TIGHT_QUOTA}, "GRPCInferenceService) listening", logs / "gateway.log"))
        yield OipFleet(f"http://127.0.0.1:{port}", f"127.0.0.1:{port}", f"127.0.0.1:{grpc_port}", key, tight_key,
                       tuple(started))
    finally:
        for process in reversed(started):
            process.stop(signal.SIGTERM)
