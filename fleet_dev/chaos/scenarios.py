"""The faults, one per scenario. Each injects its fault while the steady load runs and returns when
the fault is over, with the moments it began and ended (time.monotonic()): the gateway's recovery
and the throughput's are measured from the end.

    worker-kill    SIGKILL a worker; the watch starts it again, as an orchestrator would
    kafka-restart  stop the Kafka node(s) (SIGTERM), start again, wait until Kafka answers
    redis-restart  stop Redis (SIGTERM), start again, wait until it answers
    redis-pause    SIGSTOP Redis for a while (45 s; --quick 10 s), then SIGCONT
    flood          malformed records interleaved with valid requests on the request topic
    lanes-kill     a bulk backlog and an interactive one on their lanes, then SIGKILL a worker while
                   its bulk partitions are paused for the interactive lane: nothing is lost
    batch          a batch job on the bulk lane while a worker is SIGKILLed, Kafka restarts and the
                   other worker is SIGSTOPped past its session and woken: the job's output has every
                   line once; with Kafka transactions (--exactly-once bulk, the default), so has a
                   read_committed reader of its results topic (a read_uncommitted reader's count is
                   printed beside)
    http           malformed HTTP requests to the gateway
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import httpx
from aiokafka import AIOKafkaProducer

from fleet_dev.chaos import http_malformed, malformed
from fleet_dev.chaos.http_malformed import HttpCase
from fleet_dev.chaos.ledger import Ledger
from fleet_dev.chaos.load import PIPELINE_DEADLINE_MS, SteadyLoad, pipeline_request
from fleet_dev.chaos.own_stack import ChaosStack
from fleet_dev.chaos.processes import Fleet
from fleet_dev.chaos.report import ScenarioReport
from gateway import BatchJobs, BatchSettings, JobState
from schemas.names import requests_topic
from schemas.wire import now_ms

VALID_EVERY = 20  # the flood puts one valid request after every 19 malformed ones (10,000 -> 500)
PRODUCE_CHUNK = 500
HTTP_CONCURRENCY = 16


@dataclass(frozen=True)
class Sizes:
    """How hard each scenario pushes; `quick()` fits every scenario in CI's 3 minutes."""

    rate_per_s: float = 16.0
    baseline_s: float = 6.0
    observe_s: float = 15.0
    drain_s: float = 60.0
    pause_s: float = 45.0
    flood: int = 10_000
    huge: int = 10
    http: int = 2_000

    @classmethod
    def quick(cls) -> Sizes:
        return cls(rate_per_s=12.0, baseline_s=3.0, observe_s=8.0, drain_s=30.0, pause_s=10.0, flood=2_000, huge=4,
                   http=500)


@dataclass
class Run:
    """Everything a scenario may touch."""

    stack: ChaosStack
    fleet: Fleet
    load: SteadyLoad
    http: httpx.AsyncClient
    producer: AIOKafkaProducer  # gzip, takes 5 MB records
    model: str
    results_topic: str
    sizes: Sizes
    headers: dict[str, str]
    rng: random.Random


Window = tuple[float, float]
Fault = Callable[[Run, ScenarioReport], Awaitable[Window]]


async def worker_kill(run: Run, report: ScenarioReport) -> Window:
    at = time.monotonic()
    name = run.fleet.kill_worker(0)
    report.notes.append(f"SIGKILLed {name}; started again at once")
    return at, at


async def lanes_kill(run: Run, report: ScenarioReport) -> Window:
    """Both lanes get a backlog (pipeline requests, owed on the results topic); once the interactive
    one is being served, and so the bulk lane paused (docs/concepts/lanes.md), a worker is killed.
    Its partitions, paused or not, go to the others at their committed offsets."""
    interactive, bulk = run.stack.settings.lane_plan.topics(run.model)[:2]
    ledger, count = run.load.ledger, run.sizes.flood // 4
    for topic, path in ((bulk, "lanes-bulk"), (interactive, "lanes-interactive")):
        requests = [pipeline_request(run.model, f"{path} {i}: {run.load.text()}", run.results_topic)
                    for i in range(count)]
        for start in range(0, count, PRODUCE_CHUNK):
            await _produce(run.producer, topic, [(r.encode(), r.id, path) for r in requests[start:start + PRODUCE_CHUNK]],
                           ledger)
    await asyncio.sleep(1.0)  # the workers see the interactive backlog and pause bulk
    at = time.monotonic()
    name = run.fleet.kill_worker(0)
    report.notes.append(f"{count:,} bulk and {count:,} interactive requests produced; SIGKILLed {name} while it "
                        "served the interactive lane with bulk paused; started again at once")
    return at, at


BATCH_TENANT = "chaos"
STOPPED_S = 9.0  # past the workers' 6 s session timeout: the stopped worker's partitions move, then it wakes


def _batch_jobs(run: Run) -> BatchJobs:
    return BatchJobs(run.load.client, BatchSettings(**run.stack.client_settings.model_dump()))


async def batch_job(run: Run, report: ScenarioReport) -> Window:
    """A job is sent, the faults run while it drains, then the job is waited for and its output
    checked; the window returned ends when the faults did."""
    count = run.sizes.flood
    lines = [json.dumps({"custom_id": f"c-{i}", "inputs": {"text": f"{run.load.text()} (batch line {i})"}}).encode()
             for i in range(count)]
    jobs = _batch_jobs(run)
    job = (await jobs.create(BATCH_TENANT, run.model, name="chaos.jsonl")).id
    await jobs.submit(job, BATCH_TENANT, iter(lines))
    began = time.monotonic()
    killed = run.fleet.kill_worker(0)
    await asyncio.sleep(1.0)
    await _restart(run.stack.stop_kafka, run.stack.start_kafka, "Kafka", report)
    stopped = run.fleet.workers[1]
    assert stopped.popen is not None
    os.kill(stopped.popen.pid, signal.SIGSTOP)
    try:
        await asyncio.sleep(STOPPED_S)
    finally:
        os.kill(stopped.popen.pid, signal.SIGCONT)
    faults_over = time.monotonic()
    report.notes.append(f"batch job {job} of {count:,} lines sent; SIGKILLed {killed}, restarted Kafka, "
                        f"SIGSTOPped {stopped.name} for {STOPPED_S:g} s, then SIGCONT")
    await _check_job(jobs, job, count, run.sizes.drain_s * 3, report, run.fleet.exactly_once)
    return began, faults_over


async def _check_job(jobs: BatchJobs, job: str, count: int, wait_s: float, report: ScenarioReport,
                     exactly_once: str) -> None:
    give_up, state = time.monotonic() + wait_s, "status unread"
    while time.monotonic() < give_up:
        try:
            status = await jobs.status(job, BATCH_TENANT)
        except Exception as exc:  # Kafka or Redis still coming back: ask again
            state = f"status unread: {type(exc).__name__}"
        else:
            state = status.state.value
            if status.state is JobState.completed:
                break
        await asyncio.sleep(1.0)
    custom_ids = [row.custom_id async for row in jobs.output(job, BATCH_TENANT)]
    errors = [row async for row in jobs.errors(job, BATCH_TENANT)]
    committed, committed_lines = await _results_topic_count(jobs, job, committed_only=True)
    plain, plain_lines = await _results_topic_count(jobs, job, committed_only=False)
    once = len(custom_ids) == len(set(custom_ids)) == count and not errors
    report.checks["batch job: every line in its output exactly once"] = once
    if exactly_once:
        report.checks["batch job: a read_committed reader of its results topic counts 0 duplicates, 0 lost"] = (
            committed == committed_lines == count)
    report.notes.append(f"batch job {state}: {len(set(custom_ids)):,}/{count:,} lines in the output, "
                        f"{len(custom_ids) - len(set(custom_ids))} twice, {len(errors)} errors")
    report.notes.append(f"its results topic (bulk lane, FLEET_EXACTLY_ONCE={exactly_once or 'none'}): a read_committed "
                        f"reader saw {committed:,} records for {committed_lines:,} lines: {committed - committed_lines:,} "
                        f"duplicates, {count - committed_lines:,} lost; a read_uncommitted reader saw {plain:,} records "
                        f"for {plain_lines:,} lines, {plain - plain_lines:,} of aborted transactions (without "
                        "transactions, a plain reader counted 296-446 duplicates in this scenario: docs/how-to/batch-jobs.md)")


async def _results_topic_count(jobs: BatchJobs, job: str, *, committed_only: bool) -> tuple[int, int]:
    """Records on the job's results topic as one reader sees them, and the lines they answer."""
    records, lines = 0, set()
    async for batch, _ in jobs.results.read(job, {}, committed_only=committed_only):
        records += len(batch)
        lines.update(line for line, _ in batch)
    return records, len(lines)


async def kafka_restart(run: Run, report: ScenarioReport) -> Window:
    return await _restart(run.stack.stop_kafka, run.stack.start_kafka, "Kafka", report)


async def redis_restart(run: Run, report: ScenarioReport) -> Window:
    return await _restart(run.stack.stop_redis, run.stack.start_redis, "Redis", report)


async def _restart(stop: Callable[[], None], start: Callable[[], Awaitable[None]], what: str,
                   report: ScenarioReport) -> Window:
    """Stop (SIGTERM), start again, and end the fault when the server answers."""
    began = time.monotonic()
    await asyncio.to_thread(stop)
    stopped = time.monotonic()
    await start()
    back = time.monotonic()
    report.notes.append(f"{what} stopped in {stopped - began:.1f} s, answered again {back - stopped:.1f} s after "
                        f"the start ({back - began:.1f} s away)")
    return began, back


async def redis_pause(run: Run, report: ScenarioReport) -> Window:
    began = time.monotonic()
    run.stack.pause_redis()
    try:
        await asyncio.sleep(run.sizes.pause_s)
    finally:
        run.stack.resume_paused()
    report.notes.append(f"Redis SIGSTOPped for {run.sizes.pause_s:g} s")
    return began, time.monotonic()


async def flood(run: Run, report: ScenarioReport) -> Window:
    """Malformed records and valid ones produced as fast as Kafka takes them; the valid ones and the
    odd-but-legal malformed ones are owed a result like any other accepted request."""
    began = time.monotonic()
    ledger, topic = run.load.ledger, requests_topic(run.model)
    expected_dead = 0
    kinds: Counter[str] = Counter()
    batch: list[tuple[bytes, str | None, str]] = []  # value, id owed a result, ledger path
    for record in _flood_records(run):
        if record.kind != "valid":
            kinds[record.kind.split(":")[0]] += 1
            expected_dead += record.dead_lettered
        batch.append((record.value, record.request_id, f"flood-{record.kind.split(':')[0]}"))
        if len(batch) >= PRODUCE_CHUNK:
            await _produce(run.producer, topic, batch, ledger)
            batch = []
    await _produce(run.producer, topic, batch, ledger)
    report.dead_letters_expected, report.malformed_sent = expected_dead, dict(kinds)
    report.notes.append(f"flood of {sum(kinds.values()):,} malformed records produced in {time.monotonic() - began:.1f} s")
    return began, time.monotonic()


def _flood_records(run: Run) -> list[malformed.Malformed]:
    sizes, rng = run.sizes, run.rng

    def base() -> malformed.Fields:
        now = now_ms()
        return malformed.valid_fields(rng, run.model, run.results_topic, now + PIPELINE_DEADLINE_MS, now)

    records: list[malformed.Malformed] = []
    for i, bad in enumerate(malformed.flood(rng, sizes.flood, base, huge=sizes.huge)):
        records.append(bad)
        if i % (VALID_EVERY - 1) == VALID_EVERY - 2:
            valid = base()
            records.append(malformed.Malformed("valid", malformed.pack(valid), malformed.Expect.answered, valid["id"]))
    return records


async def _produce(producer: AIOKafkaProducer, topic: str, batch: list[tuple[bytes, str | None, str]],
                   ledger: Ledger) -> None:
    """Send a chunk, then count each owed id as accepted once Kafka acknowledged it."""
    futures = [await producer.send(topic, value, key=(request_id or "").encode() or None)
               for value, request_id, _ in batch]
    acks = await asyncio.gather(*futures, return_exceptions=True)
    for (_, request_id, path), ack in zip(batch, acks, strict=True):
        if request_id is None:
            continue
        ledger.attempt()
        if isinstance(ack, BaseException):
            ledger.refuse(path, type(ack).__name__)
        else:
            ledger.accept(request_id, path)


async def http_flood(run: Run, report: ScenarioReport) -> Window:
    began = time.monotonic()
    gate = asyncio.Semaphore(HTTP_CONCURRENCY)
    cases = list(http_malformed.http_cases(run.rng, run.sizes.http, run.model))
    kinds: Counter[str] = Counter(case.kind.split(":")[0] for case in cases)

    async def one(case: HttpCase) -> None:
        async with gate:
            await _send_case(run, case, report)

    await asyncio.gather(*(one(case) for case in cases))
    report.malformed_sent = dict(kinds)
    report.notes.append(f"{len(cases):,} malformed HTTP requests answered in {time.monotonic() - began:.1f} s")
    return began, time.monotonic()


async def _send_case(run: Run, case: HttpCase, report: ScenarioReport) -> None:
    headers = {**run.headers, **case.headers, **({"content-type": case.content_type} if case.content_type else {})}
    content: bytes | AsyncIterator[bytes] = _chunks(case.body) if case.chunked else case.body
    try:
        response = await run.http.request(case.method, case.path, content=content, headers=headers, timeout=30)
    except httpx.HTTPError as exc:
        _bump(report.http_unexpected, f"{case.kind} -> {type(exc).__name__}")
        return
    code = response.status_code
    if code >= 500:
        report.http_5xx += 1
        report.http_5xx_input += 1
    if (200 <= code < 300) != case.expect_ok or code >= 500:
        _bump(report.http_unexpected, f"{case.kind} -> {code}")
    if 200 <= code < 300:
        request_id = _id_of(response)
        if request_id is not None:
            run.load.ledger.attempt()
            run.load.ledger.accept(request_id, "http-odd-but-legal")


def _bump(counts: dict[str, int], key: str) -> None:
    counts[key] = counts.get(key, 0) + 1


async def _chunks(body: bytes, size: int = 8192) -> AsyncIterator[bytes]:
    for start in range(0, len(body), size):
        yield body[start:start + size]


def _id_of(response: httpx.Response) -> str | None:
    try:
        document = response.json()
    except ValueError:
        return None
    return document.get("id") if isinstance(document, dict) else None


@dataclass(frozen=True)
class Scenario:
    name: str
    fault: Fault
    # Runs after the observation, the load still on (e.g. bring a killed Kafka node back).
    recover: Callable[[Run, ScenarioReport], Awaitable[None]] | None = None


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("worker-kill", worker_kill), Scenario("kafka-restart", kafka_restart),
    Scenario("redis-restart", redis_restart), Scenario("redis-pause", redis_pause), Scenario("flood", flood),
    Scenario("http", http_flood), Scenario("lanes-kill", lanes_kill), Scenario("batch", batch_job),
)
