"""One scenario from start to verdict, and the fleet every scenario runs against.

A scenario: the steady load runs for a baseline, the fault is injected, the load goes on for an
observation period (and a recovery step where the scenario has one), then stops; the drain waits
until every accepted request is answered (looking up `fleet:result:<id>` for the ones nobody saw
answered) or the drain period ends. Then the dead letters written meanwhile are counted.
"""

from __future__ import annotations

import asyncio
import random
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx
from aiokafka import AIOKafkaProducer
from aiokafka.admin import NewTopic
from aiokafka.errors import TopicAlreadyExistsError

from common.auth_keys import create_key
from common.clients import new_admin, new_producer, redis_client
from common.settings import FleetSettings

from fleet_dev.chaos.ledger import Ledger, merge_answers, rate, throughput_back_after
from fleet_dev.chaos.load import SteadyLoad
from fleet_dev.chaos.malformed import MAX_RECORD_BYTES
from fleet_dev.chaos.observe import (DlqWatch, ResultsReader, first_good_answer, on_topic_uncommitted,
                                     stored_results)
from fleet_dev.chaos.own_stack import ChaosStack
from fleet_dev.chaos.processes import Fleet
from fleet_dev.chaos.report import ScenarioReport, WorkerExit
from fleet_dev.chaos.scenarios import Run, Scenario, Sizes
from gateway.client import FleetClient
from gateway.settings import ClientSettings
from schemas.names import DEFAULT_RESULTS_TOPIC, DLQ_TOPIC, fallback_topic, requests_topic
from schemas.wire import now_ms

Echo = Callable[[str], None]
PARTITIONS = 4
RAMP_S = 1.0  # the first second of a baseline is the load getting going, not the fleet's pace


@dataclass(frozen=True)
class Options:
    model: str
    results_topic: str
    sizes: Sizes
    seed: int
    api_key: str | None = None
    api_key_command: str | None = None


async def run_scenario(run: Run, scenario: Scenario, echo: Echo) -> ScenarioReport:
    report, ledger, sizes = ScenarioReport(scenario.name), Ledger(), run.sizes
    run.load.ledger = ledger
    dlq = DlqWatch(run.stack.client_settings)
    await dlq.start()
    exits_before, restarts_before = len(run.fleet.exits), len(run.fleet.restarts)
    started = time.monotonic()
    stop = asyncio.Event()
    sender = asyncio.create_task(run.load.run(stop))
    echo(f"[{scenario.name}] baseline: {sizes.baseline_s:g} s of steady load at {sizes.rate_per_s:g} requests/s")
    await asyncio.sleep(sizes.baseline_s)
    report.baseline_per_s = rate(ledger.ok_times(), started + RAMP_S, time.monotonic())
    echo(f"[{scenario.name}] fault ({report.baseline_per_s:.1f} answers/s before it)")
    fault_start, fault_end = await scenario.fault(run, report)
    probe = asyncio.create_task(first_good_answer(run.http, run.model, run.headers, fault_end,
                                                  sizes.observe_s + sizes.drain_s))
    echo(f"[{scenario.name}] fault over after {fault_end - fault_start:.1f} s; observing for {sizes.observe_s:g} s")
    await asyncio.sleep(sizes.observe_s)
    if scenario.recover is not None:
        echo(f"[{scenario.name}] recovering")
        await scenario.recover(run, report)
    stop.set()
    await sender
    load_end = time.monotonic()
    echo(f"[{scenario.name}] load stopped; draining (up to {sizes.drain_s:g} s)")
    await drain(run, ledger, load_end + sizes.drain_s)
    report.gateway_recovery_s = await probe
    report.take_ledger(ledger)
    if report.lost and run.fleet.exactly_once:
        unseen = await on_topic_uncommitted(run.stack.client_settings, run.results_topic, ledger.unanswered())
        report.notes.append(f"of the {report.lost} lost, {unseen} are on {run.results_topic} for a "
                            "read_uncommitted reader (their transaction aborted, or is still open)")
    report.throughput_back_s = throughput_back_after(ledger.ok_times(), report.baseline_per_s, fault_end, load_end)
    report.dead_letters = dict(await dlq.count())
    report.worker_exits = [WorkerExit(died.name, died.code, died.at - started, died.planned, died.log_tail)
                           for died in run.fleet.exits[exits_before:]]
    report.worker_restarts = len(run.fleet.restarts) - restarts_before
    report.duration_s = time.monotonic() - started
    echo(f"[{scenario.name}] done: {report.answered:,}/{report.accepted:,} answered, {report.lost} lost, "
         f"{report.duplicated} duplicated, {sum(report.dead_letters.values()):,} dead letters")
    return report


async def drain(run: Run, ledger: Ledger, deadline: float) -> None:
    """Until every accepted request has an answer and no send is in flight, or `deadline`."""
    redis = run.load.client.redis
    while True:
        missing = ledger.unanswered()
        if missing:
            merge_answers(ledger, await stored_results(redis, missing), "redis-stored", time.monotonic())
        if (not ledger.unanswered() and not run.load.in_flight) or time.monotonic() >= deadline:
            return
        await asyncio.sleep(0.5)


async def create_topics(settings: FleetSettings, names: list[str], replication: int) -> None:
    """The fleet's topics, created before any process starts so they have this stack's replication
    (the fleet creates the ones it misses with replication factor 1)."""
    configs = {"min.insync.replicas": str(max(replication - 1, 1))}
    admin = new_admin(settings)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        topics = [NewTopic(name, PARTITIONS, replication, topic_configs=configs) for name in names if name not in existing]
        if topics:
            try:
                await admin.create_topics(topics)
            except TopicAlreadyExistsError:
                pass
    finally:
        await admin.close()


async def api_key(options: Options, env: dict[str, str], settings: FleetSettings) -> str:
    """The key the load presents: given, made by the hook (e.g. `fleet keys create --tenant chaos`)
    against the chaos stack, or else issued here on the chaos stack for tenant `chaos`."""
    if options.api_key:
        return options.api_key
    if not options.api_key_command:
        redis = redis_client(settings)
        try:
            return (await create_key(redis, "chaos", now_ms=now_ms())).key
        finally:
            await redis.aclose()
    made = subprocess.run(options.api_key_command, shell=True, env=env, capture_output=True, text=True, check=True,
                          timeout=60)
    return made.stdout.strip().splitlines()[-1]


@asynccontextmanager
async def fleet_under_test(stack: ChaosStack, options: Options, fleet: Fleet, echo: Echo) -> AsyncIterator[Run]:
    """The stack up with its topics, the fleet's processes ready, the load's clients open."""
    echo(f"[setup] starting the chaos stack under {stack.home} ({stack.settings.kafka_bootstrap}, {stack.redis_url})")
    await asyncio.to_thread(stack.up)
    replication = stack.stack.topology.replication_factor
    topics = [requests_topic(options.model), fallback_topic(options.model), DLQ_TOPIC, DEFAULT_RESULTS_TOPIC,
              options.results_topic]
    await create_topics(stack.client_settings, topics, replication)
    echo(f"[setup] topics {', '.join(topics)}: {PARTITIONS} partitions, replication factor {replication}")
    key = await api_key(options, stack.env(), stack.client_settings)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    echo(f"[setup] starting {len(fleet.workers)} workers and the gateway (logs in {fleet.gateway.log_file.parent})")
    await fleet.start()
    settings = ClientSettings(kafka_bootstrap=stack.bootstrap, redis_url=stack.redis_url, home=stack.home,
                              redis_cluster=stack.redis_cluster)
    async with FleetClient(settings) as client, httpx.AsyncClient(base_url=fleet.gateway_url) as http, \
            _producer(stack.client_settings, compression_type="gzip", max_request_size=MAX_RECORD_BYTES + 1024) as big, \
            _producer(stack.client_settings, enable_idempotence=True) as producer:
        load = SteadyLoad(model=options.model, results_topic=options.results_topic, rate_per_s=options.sizes.rate_per_s,
                          client=client, http=http, producer=producer, headers=headers)
        reader = ResultsReader(stack.client_settings, options.results_topic, lambda: load.ledger)
        await reader.start()
        try:
            yield Run(stack, fleet, load, http, big, options.model, options.results_topic, options.sizes, headers,
                      random.Random(options.seed))
        finally:
            await reader.stop()


@asynccontextmanager
async def _producer(settings: FleetSettings, **options: object) -> AsyncIterator[AIOKafkaProducer]:
    producer = new_producer(settings, linger_ms=5, **({"enable_idempotence": False} | options))
    await producer.start()
    try:
        yield producer
    finally:
        await producer.stop()
