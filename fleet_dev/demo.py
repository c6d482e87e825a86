"""`scripts/demo`: the fleet end to end on the local stack.

Starts a gateway and two workers as real processes, sends requests three ways (HTTP sync
infer, the Python client, a pipeline through a results topic) and prints what happened; then asks
a worker of faq-intent-multilingual a few questions in Chinese, the article's language. The
HTTP requests carry an API key of tenant `demo`, made as `fleet keys create` makes them and
revoked when the demo ends; only its key id is printed.

Every run sends the same seeded mix of support queries, each tagged with an id of this run.
The exact cache keys on the input text, so no answer comes from a cache an earlier run filled:
a second run computes what the first computed and prints the same picture. Within a run the
queries repeat, as support traffic does, and the exact cache answers those repeats; the table
counts computed answers and cache hits apart, and the batch sizes are those of the computed
ones (a cache hit is in no batch). Semantic hits appear only where FLEET_SEMANTIC_CACHE is on,
and are labelled as such.
"""

from __future__ import annotations

import asyncio
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from common.auth_keys import create_key, revoke_key
from common.clients import redis_client
from fleet_dev.arguments import script_parser
from fleet_dev.bench.stats import percentile
from fleet.exits import Exit
from fleet.tables import format_table
from gateway.client import FleetClient
from gateway.settings import ClientSettings
from schemas.names import DEFAULT_RESULTS_TOPIC
from schemas.wire import CacheTier, Result, Status, now_ms

MODEL = "minilm-embed"
CHINESE_MODEL = "faq-intent-multilingual"  # e5-embed and a head over 20 customer-service intents
CHINESE_QUESTIONS = ("我的快递到哪了？", "忘记密码了怎么办", "不想要两步验证了", "刚下的单不要了")
DEMO_TENANT = "demo"
SUBJECTS = ["my parcel", "order 4411", "my refund", "the invoice", "my password", "the subscription", "my card",
            "delivery to Berlin", "the warranty", "my account"]
ASKS = ["where is {}?", "how do I cancel {}", "{} has not arrived", "can you help with {}", "I was charged twice for {}",
        "update {} please", "why is {} late", "what is the status of {}"]
TABLE_HEADERS = ("path", "requests", "ok", "errors", "computed", "cache hits", "req/s", "p50 ms", "p99 ms")


def queries(count: int, run_id: str, seed: int = 7) -> list[str]:
    """`count` support queries, the same mix every run, each ending in this run's id."""
    rng = random.Random(seed)
    return [f"{rng.choice(ASKS).format(rng.choice(SUBJECTS))} (demo run {run_id})" for _ in range(count)]


@dataclass
class PathReport:
    name: str
    latencies_ms: list[float] = field(default_factory=list)
    results: list[Result] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    wall_s: float = 0.0

    def cells(self) -> tuple[str, ...]:
        ok = sum(r.status is Status.ok for r in self.results)
        total = len(self.results) + len(self.errors)
        hits = sum(r.cache is not CacheTier.miss for r in self.results)

        def ms(q: float) -> str:
            return f"{percentile(self.latencies_ms, q):.0f}" if self.latencies_ms else "-"

        return (self.name, str(total), str(ok), str(total - ok), str(len(self.results) - hits), str(hits),
                f"{total / self.wall_s:.0f}" if self.wall_s else "-", ms(50), ms(99))


class Fleet:
    """The gateway and workers as subprocesses, logs under <home>/demo/."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def spawn(self, name: str, module: str, env: dict[str, str]) -> None:
        with (self.log_dir / f"{name}.log").open("wb") as log:
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


async def concurrently(report: PathReport, texts: list[str], concurrency: int,
                       infer: Callable[[str], Awaitable[Result]]) -> PathReport:
    """`infer` every text, at most `concurrency` at once, timing each and the whole."""
    gate = asyncio.Semaphore(concurrency)

    async def one(text: str) -> None:
        async with gate:
            started = time.perf_counter()
            try:
                report.results.append(await infer(text))
            except Exception as exc:  # a failed request is a row in the report, not the end of the demo
                report.errors.append(repr(exc))
            report.latencies_ms.append((time.perf_counter() - started) * 1000)

    began = time.perf_counter()
    await asyncio.gather(*(one(text) for text in texts))
    report.wall_s = time.perf_counter() - began
    return report


async def via_http(url: str, key: str, texts: list[str], concurrency: int) -> PathReport:
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=httpx.Limits(max_connections=concurrency),
                                 headers={"Authorization": f"Bearer {key}"}) as http:
        async def infer(text: str) -> Result:
            response = await http.post(f"/v1/models/{MODEL}/infer", json={"text": text, "timeout_ms": 30000})
            if response.status_code != 200:
                raise RuntimeError(f"{response.status_code} {response.text[:100]}")
            return Result.model_validate(response.json())

        return await concurrently(PathReport("HTTP sync infer"), texts, concurrency, infer)


async def via_client(client: FleetClient, texts: list[str], concurrency: int) -> PathReport:
    return await concurrently(PathReport("Python client infer"), texts, concurrency,
                              lambda text: client.infer(MODEL, text, timeout=30))


async def via_topic(client: FleetClient, texts: list[str]) -> PathReport:
    """All texts published at once; a result's latency is from then to when its worker finished it
    (a cache hit carries no per-stage timings, so the result's own finish time is what they share)."""
    report = PathReport("pipeline via results topic")
    began, began_ms = time.perf_counter(), now_ms()
    outcome = await client.run_pipeline(MODEL, texts, results_topic=DEFAULT_RESULTS_TOPIC, timeout=120)
    report.wall_s = time.perf_counter() - began
    report.results = list(outcome.results.values())
    report.errors = [f"missing {i}" for i in outcome.missing]
    report.latencies_ms = [float(max(r.finished_ms - began_ms, 0)) for r in report.results]
    return report


def how_answered(results: list[Result]) -> list[str]:
    """What computed the answers: the batch sizes of the computed ones, then the cache hits by tier."""
    computed = [r for r in results if r.cache is CacheTier.miss]
    tiers = Counter(r.cache for r in results if r.cache is not CacheTier.miss)
    sizes = Counter(r.batch_size for r in computed)
    return [f"computed by the model: {len(computed)}, in batches of (size: results) "
            + (", ".join(f"{size}: {n}" for size, n in sorted(sizes.items())) or "-"),
            f"answered from the exact cache: {tiers[CacheTier.exact]} (repeats of a query this run computed "
            "before; in no batch)",
            f"answered from the semantic cache: {tiers[CacheTier.semantic]}"
            + ("" if tiers[CacheTier.semantic] else " (off unless FLEET_SEMANTIC_CACHE is set)")]


async def wait_for_gateway(url: str) -> None:
    async with httpx.AsyncClient() as http:
        for _ in range(300):
            try:
                if (await http.get(f"{url}/readyz")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.2)


async def send_all(settings: ClientSettings, url: str, texts: list[str], concurrency: int) -> list[PathReport]:
    third = len(texts) // 3
    print(f"sending {len(texts)} requests: {third} over HTTP, {third} with the Python client, the rest as a pipeline")
    redis = redis_client(settings)
    try:
        issued = await create_key(redis, DEMO_TENANT, now_ms=now_ms())
        print(f"HTTP requests use API key {issued.record.key_id} of tenant {DEMO_TENANT} (`fleet keys create`); "
              "revoked at the end")
        try:
            reports = [await via_http(url, issued.key, texts[:third], concurrency)]
        finally:
            await revoke_key(redis, issued.record.key_id, now_ms=now_ms())
    finally:
        await redis.aclose()
    async with FleetClient(settings) as client:
        reports.append(await via_client(client, texts[third:2 * third], concurrency))
        reports.append(await via_topic(client, texts[2 * third:]))
    return reports


async def ask_in_chinese(settings: ClientSettings) -> list[tuple[str, str]]:
    """A few customer-service questions in Chinese, and the intent the multilingual classifier gives each."""
    async with FleetClient(settings) as client:
        results = [await client.infer(CHINESE_MODEL, question, timeout=30) for question in CHINESE_QUESTIONS]
    return [(question, str(result.outputs["label"]) if result.outputs else result.status.value)
            for question, result in zip(CHINESE_QUESTIONS, results, strict=True)]


async def run(requests: int, concurrency: int) -> int:
    settings = ClientSettings()
    log_dir = settings.home / "demo"
    log_dir.mkdir(parents=True, exist_ok=True)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    fleet = Fleet(log_dir)
    print(f"starting gateway on :{port}, 2 workers of {MODEL} and 1 of {CHINESE_MODEL} (logs in {log_dir}/)")
    fleet.spawn("gateway", "gateway.main", {"FLEET_PORT": str(port)})
    for n in (1, 2):
        fleet.spawn(f"worker-{n}", "workers.main", {"FLEET_WORKER_ID": f"demo-worker-{n}", "FLEET_MODEL": MODEL})
    fleet.spawn("worker-zh", "workers.main", {"FLEET_WORKER_ID": "demo-worker-zh", "FLEET_MODEL": CHINESE_MODEL})
    try:
        for name in ("worker-1", "worker-2", "worker-zh"):
            fleet.wait_ready(name, "ready:")
        url = f"http://127.0.0.1:{port}"
        await wait_for_gateway(url)
        reports = await send_all(settings, url, queries(requests, secrets.token_hex(3)), concurrency)
        chinese = await ask_in_chinese(settings)
    finally:
        exit_codes = fleet.stop()
    every = [r for report in reports for r in report.results]
    print("\n" + format_table(TABLE_HEADERS, [report.cells() for report in reports]))
    print("\n" + "\n".join(how_answered(every)))
    print(f"served by: {dict(Counter(r.worker for r in every))}; model version: {sorted({r.version or '?' for r in every})}")
    print(f"\nthe article's language, through {CHINESE_MODEL}:\n" + format_table(("question", "intent"), chinese))
    print(f"shutdown after SIGTERM: {exit_codes}")
    errors = [e for report in reports for e in report.errors] + [r.id for r in every if r.status is not Status.ok]
    print("\nwhere to look next: gateway docs at /docs (start it with `fleet-gateway`), logs in "
          f"{log_dir}/, the wire format in schemas/README.md, `scripts/test` for the suite")
    if errors:
        print(f"\n{len(errors)} errors, first: {errors[:3]}")
        return Exit.FAILED
    return Exit.OK


def main(argv: list[str] | None = None) -> int:
    parser = script_parser("demo", __doc__)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args(argv)
    return asyncio.run(run(args.requests, args.concurrency))


if __name__ == "__main__":
    raise SystemExit(main())
