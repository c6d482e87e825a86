"""The fleet, unchanged, on a Redis Cluster of its own: `python -m fleet_dev.stack up --redis-cluster`
(three masters with one replica each, one Kafka node) on a temporary FLEET_HOME and free ports,
with FLEET_REDIS_CLUSTER=true for the workers (in-process `workers.worker.Worker`) and the client.

- End to end: sync replies through the waiter's reply stream, results readable by id, version
  pointers with their audit stream, heartbeats, and an exact-cache hit a second worker serves from
  Redis; the keys of one batch lie on every master, so each multi-key path crossed slots.
- Failover: under a steady load through `gateway.client.FleetClient` with two workers, the master
  holding the client's reply stream is SIGKILLed. Its replica takes over, the workers and the client
  carry on without a restart, no accepted request is left without a result (duplicates are allowed
  and counted), and the killed node comes back as a replica by itself.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from common.clients import redis_client
from common.heartbeats import list_workers
from common.redis_cluster import AnyRedis, is_cluster
from common.settings import FleetSettings
from common.topics import ensure_topics
from fleet_dev.chaos.ledger import Ledger
from fleet_dev.chaos.observe import ResultsReader, stored_results
from fleet_dev.stack import nodes, redis_cluster
from fleet_dev.stack.layout import Stack
from fleet_dev.stack.proc import pid_alive
from gateway.client import FleetClient, InferenceTimeout
from gateway.settings import ClientSettings
from models.backends.base import Backend
from models.loading import ModelLoader
from schemas.names import requests_topic, result_key
from schemas.wire import CacheTier, Status
from tests.built_models import built_registry
from tests.integration.conftest import MODEL, serving
from tests.integration.fleet_dev.stack.stack_cli import StackCli, share_jars
from versions.pointers import VersionPointers
from workers.cache.exact import clear_model_cache
from workers.settings import WorkerSettings

pytestmark = pytest.mark.timeout(300)

PARTITIONS = 4
RESULTS_TOPIC = "fleet.results.redis-cluster"
LOAD_RATE_PER_S = 16.0


@pytest.fixture(scope="module")
def cli(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackCli]:
    home = tmp_path_factory.mktemp("redis-cluster-home")
    share_jars(home)
    # Ports away from test_stack_cluster.py's; cluster bus ports (Redis port + 10000) below the ephemeral range.
    cli = StackCli(home, brokers=1, first_shift=1000, redis_base=20379)
    started = time.monotonic()
    try:
        up = cli("up", "--redis-cluster")
        cli.timings["up --redis-cluster"] = time.monotonic() - started
        assert "export FLEET_REDIS_CLUSTER=true" in up.stdout
        yield cli
    finally:
        pids = [proc.pid() for proc in Stack.recorded(cli.settings()).processes()]
        cli("down", "--wipe", check=False)
        print("\n" + "\n".join(f"{step:50} {seconds:6.1f} s" for step, seconds in cli.timings.items()))
        assert not any(pid_alive(pid) for pid in pids if pid is not None)


@pytest.fixture(scope="module")
def stack(cli: StackCli) -> Stack:
    return Stack.recorded(cli.settings())


@pytest.fixture(scope="module")
def connection(cli: StackCli, stack: Stack) -> dict[str, Any]:
    """The FLEET_* settings every process of this test connects with (as `up` printed them)."""
    return {"kafka_bootstrap": stack.topology.bootstrap, "redis_url": cli.env["FLEET_REDIS_URL"],
            "redis_cluster": True, "home": Path(cli.env["FLEET_HOME"]), "model_dir": built_registry().root}


# A batch's results on a replica before its offsets are committed: a master's SIGKILL loses none.
REPLICATED = {"redis_wait_replicas": 1, "redis_wait_timeout_ms": 500}


def worker_settings(connection: dict[str, Any], worker_id: str, **overrides: Any) -> WorkerSettings:
    options = {"max_batch_size": 32, "max_queue_delay_ms": 10, "session_timeout_ms": 6000, "partitions": PARTITIONS,
               "exact_cache": False}  # caches off unless a test turns them on: the load is computed
    return WorkerSettings(**connection, model=MODEL, worker_id=worker_id, **(options | overrides))


@pytest.fixture(scope="module")
async def topics(connection: dict[str, Any]) -> None:
    await ensure_topics(FleetSettings(**connection), [requests_topic(MODEL), RESULTS_TOPIC], PARTITIONS)


@pytest.fixture(scope="module")
def backend(connection: dict[str, Any]) -> Backend:
    return ModelLoader(worker_settings(connection, "loader").runtime()).load()


@pytest.fixture(scope="module")
async def redis(connection: dict[str, Any]) -> AsyncIterator[AnyRedis]:
    client = redis_client(FleetSettings(**connection))
    assert is_cluster(client)
    yield client
    await client.aclose()


def client_settings(connection: dict[str, Any]) -> ClientSettings:
    return ClientSettings(**connection, default_timeout_s=30, partitions=PARTITIONS)


async def until(condition: Callable[[], bool | Awaitable[bool]], what: str, timeout_s: float = 60) -> float:
    """Poll `condition` until it holds; returns the seconds it took."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        held = condition()
        if held if isinstance(held, bool) else await held:
            return time.monotonic() - started
        await asyncio.sleep(0.05)
    raise AssertionError(f"not within {timeout_s:.0f} s: {what}")


async def test_the_fleet_serves_end_to_end_through_the_cluster(connection: dict[str, Any], stack: Stack,
                                                               topics: None, backend: Backend,
                                                               redis: AnyRedis) -> None:
    texts = [f"redis cluster end to end {uuid.uuid4().hex} {i}" for i in range(24)]
    first_settings = worker_settings(connection, "rc-first", exact_cache=True)
    async with FleetClient(client_settings(connection)) as client:
        async with serving(first_settings, backend):
            computed = await asyncio.gather(*(client.infer(MODEL, text, timeout=60) for text in texts))
            await until(lambda: _workers_seen(client, ["rc-first"]), "rc-first's heartbeat")
        stored = [await client.result(result.id) for result in computed]
        async with serving(first_settings.model_copy(update={"worker_id": "rc-second"}), backend) as second:
            from_redis = await asyncio.gather(*(client.infer(MODEL, text, timeout=60) for text in texts))
        stream = client.waiter.stream
    assert all(r.status is Status.ok and r.cache is CacheTier.miss for r in computed)
    assert [s.id if s else None for s in stored] == [r.id for r in computed]
    assert all(s is not None and s.outputs == r.outputs for s, r in zip(stored, computed, strict=True))
    # One batch's result keys and the reply stream lie on every master: delivery crossed slots.
    masters = {await nodes.redis_master_of_key(stack, key) for key in [stream, *(result_key(r.id) for r in computed)]}
    assert len(masters) == 3
    # The second worker's in-process tier is empty: every answer is a Redis hit (MGET split by slot).
    assert all(r.cache is CacheTier.exact and r.worker == "rc-second" for r in from_redis)
    assert [r.outputs for r in from_redis] == [r.outputs for r in computed]
    assert second.computed == 0
    assert second.metrics.cache.hits.labels(model=MODEL, tier="redis")._value.get() == len(texts)
    assert await clear_model_cache(redis, MODEL, None) == len(texts)  # SCAN walked every master


async def _workers_seen(client: FleetClient, expected: list[str]) -> bool:
    """The heartbeats `fleet workers` lists: hash, index and models set lie in different slots."""
    return [info.worker for info in await list_workers(client.redis, MODEL)] == expected


async def test_version_pointers_and_their_audit_on_the_cluster(redis: AnyRedis) -> None:
    pointers = VersionPointers(redis, f"rc-pointers-{uuid.uuid4().hex[:6]}")
    await pointers.set_stable("v1", "test", "first")
    await pointers.set_candidate("v2", "test", "shadow it")
    await pointers.promote("test", "looks good")
    # Concurrent writers: WATCH/MULTI on the hash retries, so none is lost and each has its audit entry.
    await asyncio.gather(*(pointers.set_stable(f"v{i}", f"writer-{i}", "race") for i in range(3, 8)))
    history = await pointers.history(limit=50)
    assert [entry.action for entry in history[:3]] == ["set-stable", "set-candidate", "promote"]
    assert sorted(entry.actor for entry in history[3:]) == [f"writer-{i}" for i in range(3, 8)]
    # On a cluster the audit entry is written apart, right after its EXEC: two racing writers may log in
    # the other order (versions/pointers.py), so the final stable is the last write, logged among them.
    final = (await pointers.get()).stable
    assert final in {f"v{i}" for i in range(3, 8)} and final in {entry.after["stable"] for entry in history[3:]}


class Load:
    """Open-loop steady load through one FleetClient: in turn a sync `infer` (its reply comes on the
    waiter's stream) and a `submit` whose result goes to a results topic and to its key."""

    def __init__(self, client: FleetClient, rate_per_s: float) -> None:
        self.client, self.rate_per_s = client, rate_per_s
        self.ledger = Ledger()
        self.in_flight: set[asyncio.Task[None]] = set()
        self._run = uuid.uuid4().hex[:6]

    async def run(self, stop: asyncio.Event) -> None:
        due = time.monotonic()
        for number in itertools.count():
            if stop.is_set():
                return
            task = asyncio.create_task(self._send(number))
            self.in_flight.add(task)
            task.add_done_callback(self.in_flight.discard)
            due += 1 / self.rate_per_s
            try:
                await asyncio.wait_for(stop.wait(), timeout=max(due - time.monotonic(), 0))
            except TimeoutError:
                pass

    async def _send(self, number: int) -> None:
        self.ledger.attempt()
        text = f"redis cluster load {self._run} {number}: where is my parcel?"
        try:
            if number % 2:
                request_id = await self.client.submit(MODEL, text, timeout=120, results_topic=RESULTS_TOPIC)
                self.ledger.accept(request_id, "submit")
                return
            result = await self.client.infer(MODEL, text, timeout=60)
        except InferenceTimeout as exc:
            self.ledger.accept(exc.request_id, "infer")  # published: the fleet owes it a result
            return
        except Exception as exc:  # refused before publishing (e.g. the reply reader is down): not owed
            self.ledger.refuse("infer" if number % 2 == 0 else "submit", type(exc).__name__)
            return
        self.ledger.accept(result.id, "infer")
        self.ledger.answer(result.id, result.status.value, "redis-reply", time.monotonic())


def answered_since(ledger: Ledger, since: float) -> int:
    return sum(answer.at_s >= since for answer in ledger.answers.values())


def back_after(ledger: Ledger, killed_at: float) -> float:
    """Seconds from the kill until answers flowed again: the end of the longest pause in answers
    that began after the kill (0 when there was none)."""
    times = [killed_at] + [t for t in ledger.ok_times() if t >= killed_at]
    gaps = [(later - earlier, later) for earlier, later in itertools.pairwise(times)]
    return max(gaps, default=(0.0, killed_at))[1] - killed_at


async def test_a_killed_master_fails_over_under_load(connection: dict[str, Any], stack: Stack, topics: None,
                                                     backend: Backend, redis: AnyRedis) -> None:
    settings = FleetSettings(**connection)
    stop = asyncio.Event()
    async with FleetClient(client_settings(connection)) as client, \
            serving(worker_settings(connection, "rc-1", **REPLICATED), backend) as one, \
            serving(worker_settings(connection, "rc-2", **REPLICATED), backend) as two:
        load = Load(client, LOAD_RATE_PER_S)
        reader = ResultsReader(settings, RESULTS_TOPIC, lambda: load.ledger)
        await reader.start()
        sender = asyncio.create_task(load.run(stop))
        try:
            await until(lambda: len(load.ledger.answers) >= 20, "answers before the kill")
            # Every batch so far reached a replica before its commit (WAIT answered 1 on each master).
            assert [one.parts.sink.replication.unreplicated, two.parts.sink.replication.unreplicated] == [0, 0]
            figures, at_failover = await _kill_and_rejoin(stack, client, load, lambda: (one.computed, two.computed))
            await until(lambda: answered_since(load.ledger, time.monotonic() - 1) > 0, "answers after the rejoin")
        finally:
            stop.set()
            await sender
        await until(lambda: not load.in_flight, "the last sends to finish", timeout_s=90)
        await until(lambda: _settled(load.ledger, redis), "every accepted request answered", timeout_s=90)
        await reader.stop()
    ledger = load.ledger
    print(f"\nRedis master SIGKILL under {LOAD_RATE_PER_S:g} req/s, two workers, one client:\n"
          f"  accepted {len(ledger.accepted)}  lost {ledger.lost}  duplicates {ledger.duplicated}  "
          f"refused {sum(ledger.refused.values())} {dict(ledger.refused)}\n"
          f"  replica promoted after {figures['failover_s']:.1f} s; results flowed again after "
          f"{figures['back_s']:.1f} s; killed node back as a replica after {figures['rejoin_s']:.1f} s")
    assert ledger.lost == 0 and len(ledger.accepted) >= 100
    assert set(ledger.statuses()) == {"ok"}
    # The same two workers (never restarted) both computed more after the failover.
    assert one.computed > at_failover[0] and two.computed > at_failover[1]


async def _settled(ledger: Ledger, redis: AnyRedis) -> bool:
    """Every accepted id answered, looking up in Redis (`fleet:result:<id>`) the ones nobody saw answered."""
    missing = ledger.unanswered()
    for request_id, status in await stored_results(redis, missing):
        ledger.answer(request_id, status, "redis-lookup", time.monotonic())
    return not ledger.unanswered()


async def _kill_and_rejoin(stack: Stack, client: FleetClient, load: Load,
                           computed: Callable[[], tuple[int, int]]) -> tuple[dict[str, float], tuple[int, int]]:
    await until(lambda: len(load.ledger.answers) >= 30, "a steady flow of answers before the kill")
    victim = await nodes.redis_master_of_key(stack, client.waiter.stream)
    killed = nodes.kill_redis_node(stack, victim.port)
    killed_at = time.monotonic()
    assert not pid_alive(killed)
    await nodes.wait_redis_failover(stack, victim.port, timeout_s=60)
    failover_s = time.monotonic() - killed_at
    at_failover = computed()
    promoted = await nodes.redis_master_of_key(stack, client.waiter.stream)
    assert promoted != victim
    await until(lambda: answered_since(load.ledger, killed_at + failover_s) >= 20, "answers after the failover")
    back_s = back_after(load.ledger, killed_at)
    started = time.monotonic()
    await nodes.restart_redis_node(stack, victim.port, timeout_s=90)  # no manual step: it rejoins by itself
    rejoin_s = time.monotonic() - started
    replication = await redis_cluster.replication_info(victim)
    assert replication["role"] == "slave" and replication["master_port"] == str(promoted.port)
    assert not await redis_cluster.cluster_problems(stack.topology.redis)
    return {"failover_s": failover_s, "back_s": back_s, "rejoin_s": rejoin_s}, at_failover
