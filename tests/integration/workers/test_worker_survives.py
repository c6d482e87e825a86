"""One bad record or one outage costs at most that record, never the worker (issue 12).

Each test runs a real worker on the real stack, feeds it what broke workers before, and checks
the four things that matter: the poison is dead-lettered (and its caller, if it had a waiter,
answered with an error), its neighbours are answered, the committed offset moves past it, and
the worker still serves afterwards.
"""

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import msgpack
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from redis.asyncio import Redis

from common.settings import FleetSettings
from gateway.client import FleetClient
from schemas.names import DLQ_TOPIC, requests_topic, result_key
from fleet.ports import free_port
from schemas.wire import DeadLetter, ReplyTo, Request, Result, Status, new_request_id, now_ms
from tests.integration.conftest import MODEL, ROOT, end_offsets, read_from
from tests.integration.workers.health.test_fallback import results_for
from workers.settings import WorkerSettings


def raw_request(**fields: object) -> dict[str, object]:
    now = now_ms()
    return {"v": 1, "id": new_request_id(), "model": MODEL, "inputs": {"text": "poison"}, "deadline_ms": now + 60_000,
            "submitted_ms": now} | fields


def deep(levels: int) -> dict[str, object]:
    root: dict[str, object] = {}
    node = root
    for _ in range(levels):
        child: dict[str, object] = {}
        node["a"] = child
        node = child
    return root


def poisons() -> dict[str, bytes]:
    """What stopped every worker in turn before issue 12, by name."""
    pack = lambda fields: msgpack.packb(fields, use_bin_type=True, datetime=False)  # noqa: E731
    return {
        "timestamp in params": pack(raw_request(params={"at": msgpack.Timestamp(1_700_000_000, 0)})),
        "bin key in params": pack(raw_request(params={b"key": 1})),
        "params 1,000 deep": pack(raw_request(params=deep(1000))),
        "illegal reply topic": pack(raw_request(reply={"topic": "bad topic!"})),
        "reply to __consumer_offsets": pack(raw_request(reply={"topic": "__consumer_offsets"})),
        "reply to the DLQ": pack(raw_request(reply={"topic": DLQ_TOPIC})),
        "v 1.0": pack(raw_request(v=1.0)),
        "v true": pack(raw_request(v=True)),
        "priority as text": pack(raw_request(priority="3")),
        "deadline as text": pack(raw_request(deadline_ms=str(now_ms() + 60_000))),
        "integer beyond int64": pack(raw_request(params={"n": 2**64 - 1})),
        "random bytes near 1 MB": os.urandom(1_000_000),
        # 52 KB whose masked view, each empty list past its depth a 23-character marker, was 1.2 MB:
        # more than the DLQ takes, and the worker stopped on it at every restart.
        "a dead letter's view that amplifies": pack(raw_request(
            deadline_ms="soon", params={"a": [[[[[] for _ in range(256)] for _ in range(200)]]]})),
        "empty": b"",
    }


async def committed(stack: FleetSettings, group: str, topic: str) -> dict[TopicPartition, int]:
    admin = AIOKafkaAdminClient(bootstrap_servers=stack.kafka_bootstrap)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
    return {tp: meta.offset for tp, meta in offsets.items() if tp.topic == topic}


async def test_poison_records_are_dead_lettered_and_their_neighbours_answered(
        serve, worker_settings: WorkerSettings, client: FleetClient, stack: FleetSettings,  # type: ignore[no-untyped-def]
        redis: Redis) -> None:
    topic = requests_topic(MODEL)
    bad = poisons()
    valid = [client.build_request(MODEL, f"neighbour of a poison {i} {time.time()}", timeout=60, reply=ReplyTo())
             for i in range(len(bad))]
    dlq_from = await end_offsets(stack, DLQ_TOPIC)
    producer = AIOKafkaProducer(bootstrap_servers=stack.kafka_bootstrap, acks="all", max_request_size=2_000_000)
    await producer.start()
    try:
        # The operator allows raw bytes in the DLQ here, so the 1 MB poison shows its cut original.
        async with serve(worker_settings.model_copy(update={"max_batch_size": 8, "dlq_keep_original": True})) as worker:
            for request, poison in zip(valid, bad.values(), strict=True):
                await producer.send_and_wait(topic, poison)
                await producer.send_and_wait(topic, request.encode(), key=request.id.encode())
            found = await results_for(redis, valid, timeout_s=60)
            letters = [DeadLetter.decode(value) for value in await read_from(
                stack, dlq_from, until=lambda values: len(values) >= len(bad), timeout_s=30)]
            ends = await end_offsets(stack, topic)
            for _ in range(100):  # the commit follows delivery by a moment
                if all(offset >= ends[tp] for tp, offset in (await committed(stack, worker.group, topic)).items()):
                    break
                await asyncio.sleep(0.1)
            still = await client.infer(MODEL, "still serving after the poison", timeout=30)
    finally:
        await producer.stop()
    assert len(found) == len(valid) and all(r.status is Status.ok for r in found.values())
    mine = [letter for letter in letters if letter.worker == worker.worker_id]
    codes = Counter(letter.code for letter in mine)
    print(f"\ndead letters by code: {dict(codes)}")
    assert len(mine) >= len(bad)
    assert codes["invalid_reply_topic"] == 3 and codes["schema_version"] == 2 and codes["empty"] == 1
    assert codes["not_msgpack"] >= 1 and codes["invalid_fields"] >= 6
    big = next(letter for letter in mine if letter.original_size == 1_000_000)
    assert big.truncated and big.original is not None and len(big.original) < 1_000_000
    assert all(offset >= ends[tp] for tp, offset in (await committed(stack, worker.group, topic)).items())
    assert still.status is Status.ok
    admin = AIOKafkaAdminClient(bootstrap_servers=stack.kafka_bootstrap)
    await admin.start()
    try:
        assert not {"bad topic!", "__consumer_offsets_results"} & set(await admin.list_topics())
    finally:
        await admin.close()
    refused = Result.decode(await redis.get(result_key(msgpack.unpackb(bad["illegal reply topic"])["id"])))
    assert refused.status is Status.error and refused.error is not None
    assert refused.error.code == "invalid_reply_topic"


async def test_a_huge_text_costs_what_the_longest_input_costs(serve, worker_settings: WorkerSettings,  # type: ignore[no-untyped-def]
                                                              client: FleetClient) -> None:
    async with serve(worker_settings):
        started = time.perf_counter()
        result = await client.infer(MODEL, "where is my parcel " * 45_000, timeout=30)  # ~900 KB of text
        elapsed = time.perf_counter() - started
    assert result.status is Status.ok and result.outputs is not None
    assert elapsed < 5, f"a 900 KB text took {elapsed:.1f}s"


async def test_a_stored_ok_result_is_never_replaced_by_a_later_expired_one(
        serve, worker_settings: WorkerSettings, client: FleetClient, redis: Redis,  # type: ignore[no-untyped-def]
        producer: AIOKafkaProducer) -> None:
    async with serve(worker_settings):
        request = client.build_request(MODEL, f"answered once {time.time()}", timeout=60, reply=ReplyTo())
        await client.publish(request)
        [first] = (await results_for(redis, [request], timeout_s=30)).values()
        late = request.model_copy(update={"deadline_ms": now_ms() - 1})  # the same id, redelivered too late
        await producer.send_and_wait(requests_topic(MODEL), late.encode(), key=late.id.encode())
        await asyncio.sleep(1.5)
        stored = Result.decode(await redis.get(result_key(request.id)))
    assert first.status is Status.ok and stored.status is Status.ok and stored.finished_ms == first.finished_ms


@asynccontextmanager
async def own_redis(tmp_path: Path) -> AsyncIterator[tuple[str, subprocess.Popen[bytes]]]:
    """A throwaway redis-server the test may stop, pause and restart without touching the stack's."""
    server = shutil.which("redis-server") or "/usr/bin/redis-server"
    port = free_port()
    argv = [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
            "--dir", str(tmp_path)]
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    holder = [process]
    try:
        for _ in range(50):
            try:
                client = Redis.from_url(url)
                await client.ping()
                await client.aclose()
                break
            except Exception:
                await asyncio.sleep(0.1)
        yield url, process
    finally:
        for proc in holder:
            proc.kill()
            proc.wait()


async def answered_then_more(client: FleetClient, url: str, requests: list[Request],
                             text: str) -> tuple[dict[str, Result], Result]:
    """Results of `requests` in the worker's own Redis, then one more request's, sent after them."""
    own = Redis.from_url(url)
    try:
        found = await results_for(own, requests, timeout_s=60)
        later = client.build_request(MODEL, f"{text} {time.time()}", timeout=60, reply=ReplyTo())
        await client.publish(later)
        after = (await results_for(own, [later], timeout_s=30))[later.id]
    finally:
        await own.aclose()
    return found, after


async def test_a_paused_redis_is_waited_out_and_nothing_is_lost(
        serve, worker_settings: WorkerSettings, client: FleetClient, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    async with own_redis(tmp_path) as (url, server):
        settings = worker_settings.model_copy(update={"redis_url": url, "delivery_max_backoff_s": 0.5})
        requests = [client.build_request(MODEL, f"through a Redis pause {i} {time.time()}", timeout=120,
                                         reply=ReplyTo()) for i in range(40)]
        async with serve(settings):
            server.send_signal(signal.SIGSTOP)
            try:
                for request in requests:
                    await client.publish(request)
                await asyncio.sleep(4)
            finally:
                server.send_signal(signal.SIGCONT)
            found, after = await answered_then_more(client, url, requests, "served after the pause")
    assert len(found) == len(requests), f"{len(requests) - len(found)} lost"
    assert after.status is Status.ok


def test_a_worker_that_cannot_reach_kafka_exits_at_once_with_a_clear_error(tmp_path: Path) -> None:
    env = {**os.environ, "FLEET_KAFKA_BOOTSTRAP": "127.0.0.1:1", "FLEET_STARTUP_TIMEOUT_S": "2"}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "workers.main"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)
    elapsed = time.monotonic() - started
    assert done.returncode == 3
    assert "cannot start" in done.stderr and "did not answer within 2 s" in done.stderr
    assert elapsed < 20
    assert done.stderr.count("Unable connect") <= 2  # the client's retries are summarised, not repeated


async def test_a_redis_without_replicas_delays_no_batch_past_the_replication_wait(
        client: FleetClient, serve, worker_settings: WorkerSettings) -> None:  # type: ignore[no-untyped-def]
    """The stack's Redis has no replica: WAIT 1 answers 0 after its timeout, each batch is still
    delivered (and counted unreplicated), no later than that timeout past its delivery."""
    settings = worker_settings.model_copy(update={"redis_wait_replicas": 1, "redis_wait_timeout_ms": 50})
    async with serve(settings) as worker:
        started = time.monotonic()
        answered = await asyncio.gather(*(client.infer(MODEL, f"unreplicated {i}", timeout=30) for i in range(20)))
        elapsed = time.monotonic() - started
    assert {result.status for result in answered} == {Status.ok}
    assert worker.parts.sink.replication.unreplicated >= 1
    assert elapsed < 10, f"20 answers took {elapsed:.1f} s"
