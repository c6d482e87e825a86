"""`scripts/demo`: the fleet end to end on the local stack.

Starts a gateway and two workers as real processes, sends requests three ways (HTTP sync
infer, the Python client, a pipeline through a results topic) and prints what happened.
"""

import argparse
import asyncio
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from gateway.client import FleetClient
from gateway.settings import ClientSettings
from schemas.names import DEFAULT_RESULTS_TOPIC
from schemas.wire import Result, Status

MODEL = "minilm-embed"
SUBJECTS = ["my parcel", "order 4411", "my refund", "the invoice", "my password", "the subscription", "my card",
            "delivery to Berlin", "the warranty", "my account"]
ASKS = ["where is {}?", "how do I cancel {}", "{} has not arrived", "can you help with {}", "I was charged twice for {}",
        "update {} please", "why is {} late", "what is the status of {}"]


def queries(count: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    return [rng.choice(ASKS).format(rng.choice(SUBJECTS)) for _ in range(count)]


@dataclass
class PathReport:
    name: str
    latencies_ms: list[float] = field(default_factory=list)
    results: list[Result] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    wall_s: float = 0.0

    def row(self) -> list[str]:
        ok = sum(r.status is Status.ok for r in self.results)
        total = len(self.results) + len(self.errors)
        lat = sorted(self.latencies_ms)
        pct = (lambda q: f"{lat[min(int(q * len(lat)), len(lat) - 1)]:.0f}") if lat else (lambda q: "-")
        return [self.name, str(total), str(ok), str(total - ok), f"{total / self.wall_s:.0f}" if self.wall_s else "-",
                pct(0.5), pct(0.99)]


class Fleet:
    """The gateway and workers as subprocesses, logs under <home>/demo/."""

    def __init__(self, log_dir: Path, port: int) -> None:
        self.log_dir = log_dir
        self.port = port
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def spawn(self, name: str, module: str, env: dict[str, str]) -> None:
        log = (self.log_dir / f"{name}.log").open("wb")
        self.procs[name] = subprocess.Popen([sys.executable, "-m", module], env={**os.environ, **env},
                                            stdout=log, stderr=subprocess.STDOUT)

    def wait_ready(self, name: str, marker: str, timeout_s: float = 90) -> None:
        log = self.log_dir / f"{name}.log"
        give_up = time.monotonic() + timeout_s
        while time.monotonic() < give_up:
            if marker in log.read_text(errors="replace"):
                return
            time.sleep(0.2)
        raise SystemExit(f"{name} did not start; see {log}")

    def stop(self) -> dict[str, str]:
        """SIGTERM everything; a clean exit is 0, or -SIGTERM re-raised by uvicorn after its graceful shutdown."""
        for proc in self.procs.values():
            proc.send_signal(signal.SIGTERM)
        codes = {name: proc.wait(timeout=30) for name, proc in self.procs.items()}
        return {name: "clean" if code in (0, -signal.SIGTERM) else f"exit {code}" for name, code in codes.items()}


async def via_http(url: str, texts: list[str], concurrency: int) -> PathReport:
    report = PathReport("HTTP sync infer")
    gate = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=httpx.Limits(max_connections=concurrency)) as http:
        async def one(text: str) -> None:
            async with gate:
                started = time.perf_counter()
                response = await http.post(f"/v1/models/{MODEL}/infer", json={"text": text, "timeout_ms": 30000})
                report.latencies_ms.append((time.perf_counter() - started) * 1000)
                if response.status_code == 200:
                    report.results.append(Result.model_validate(response.json()))
                else:
                    report.errors.append(f"{response.status_code} {response.text[:100]}")
        began = time.perf_counter()
        await asyncio.gather(*(one(t) for t in texts))
        report.wall_s = time.perf_counter() - began
    return report


async def via_client(client: FleetClient, texts: list[str], concurrency: int) -> PathReport:
    report = PathReport("Python client infer")
    gate = asyncio.Semaphore(concurrency)

    async def one(text: str) -> None:
        async with gate:
            started = time.perf_counter()
            try:
                report.results.append(await client.infer(MODEL, text, timeout=30))
            except Exception as exc:
                report.errors.append(repr(exc))
            report.latencies_ms.append((time.perf_counter() - started) * 1000)

    began = time.perf_counter()
    await asyncio.gather(*(one(t) for t in texts))
    report.wall_s = time.perf_counter() - began
    return report


async def via_topic(client: FleetClient, texts: list[str]) -> PathReport:
    report = PathReport("pipeline via results topic")
    began = time.perf_counter()
    outcome = await client.run_pipeline(MODEL, texts, results_topic=DEFAULT_RESULTS_TOPIC, timeout=120)
    report.wall_s = time.perf_counter() - began
    report.results = list(outcome.results.values())
    report.errors = [f"missing {i}" for i in outcome.missing]
    report.latencies_ms = [r.timings.get("since_submit_ms", 0.0) for r in report.results]
    return report


def print_table(headers: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    print(line)
    print("-" * len(line))
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))


async def run(args: argparse.Namespace) -> int:
    settings = ClientSettings()
    log_dir = settings.home / "demo"
    log_dir.mkdir(parents=True, exist_ok=True)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    fleet = Fleet(log_dir, port)
    print(f"starting gateway on :{port} and 2 workers (logs in {log_dir}/)")
    fleet.spawn("gateway", "gateway.main", {"FLEET_PORT": str(port)})
    for n in (1, 2):
        fleet.spawn(f"worker-{n}", "workers.main", {"FLEET_WORKER_ID": f"demo-worker-{n}", "FLEET_MODEL": MODEL})
    try:
        for n in (1, 2):
            fleet.wait_ready(f"worker-{n}", "ready:")
        url = f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient() as http:
            for _ in range(300):
                try:
                    if (await http.get(f"{url}/readyz")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.2)
        texts = queries(args.requests)
        third = len(texts) // 3
        print(f"sending {len(texts)} requests: {third} over HTTP, {third} with the Python client, the rest as a pipeline")
        reports = [await via_http(url, texts[:third], args.concurrency)]
        async with FleetClient(settings) as client:
            reports.append(await via_client(client, texts[third:2 * third], args.concurrency))
            reports.append(await via_topic(client, texts[2 * third:]))
    finally:
        exit_codes = fleet.stop()
    print()
    print_table(["path", "requests", "ok", "errors", "req/s", "p50 ms", "p99 ms"], [r.row() for r in reports])
    every = [r for report in reports for r in report.results]
    sizes = Counter(r.batch_size for r in every)
    print(f"\nbatch sizes seen (batch size: results computed in such batches): "
          f"{', '.join(f'{s}: {n}' for s, n in sorted(sizes.items()))}")
    print(f"served by: {dict(Counter(r.worker for r in every))}; model version: {sorted({r.version or '?' for r in every})}")
    print(f"shutdown after SIGTERM: {exit_codes}")
    errors = [e for report in reports for e in report.errors] + [r.id for r in every if r.status is not Status.ok]
    print("\nwhere to look next: gateway docs at /docs (start it with `fleet-gateway`), logs in "
          f"{log_dir}/, the wire format in schemas/README.md, `scripts/test` for the suite")
    if errors:
        print(f"\n{len(errors)} errors, first: {errors[:3]}")
        return 1
    return 0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=32)
    raise SystemExit(asyncio.run(run(parser.parse_args(argv))))


if __name__ == "__main__":
    main()
