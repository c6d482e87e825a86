"""The multi-node stack proved by failures: a 3-node Kafka and a Redis Cluster of its own (temp
FLEET_HOME, free ports away from the shared stack), brought up and down with the real CLI.

Kafka: a topic with replication factor 3 loses the node that leads most of its partitions to a
SIGKILL; an acks=all produce still succeeds, the partition gets a new leader, and the restarted
node rejoins every ISR. Redis: a master is SIGKILLed; its replica takes the slots over, writes
through RedisCluster succeed, and the restarted node comes back as a replica.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from fleet_dev.stack import kafka_cluster, nodes, redis_cluster
from fleet_dev.stack.layout import Stack
from fleet_dev.stack.proc import Endpoint, pid_alive
from tests.integration.fleet_dev.stack.stack_cli import StackCli, share_jars

PARTITIONS = 6

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def cli(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackCli]:
    home = tmp_path_factory.mktemp("cluster-home")
    share_jars(home)
    cli = StackCli(home, brokers=3)
    started = time.monotonic()
    try:
        up = cli("up", "--brokers", "3", "--redis-cluster")
        cli.timings["up --brokers 3 --redis-cluster"] = time.monotonic() - started
        assert "export FLEET_REDIS_CLUSTER=true" in up.stdout
        assert f"export FLEET_KAFKA_BOOTSTRAP={cli.env['FLEET_KAFKA_BOOTSTRAP']}," in up.stdout
        yield cli
    finally:
        stack = Stack.recorded(cli.settings())
        pids = [proc.pid() for proc in stack.processes()]
        started = time.monotonic()
        cli("down", "--wipe", check=False)
        cli.timings["down --wipe"] = time.monotonic() - started
        print("\n".join(f"{step:45} {seconds:6.1f} s" for step, seconds in cli.timings.items()))
        assert not any(pid_alive(pid) for pid in pids if pid is not None)


@pytest.fixture(scope="module")
def stack(cli: StackCli) -> Stack:
    return Stack.recorded(cli.settings())


async def test_status_shows_every_node(cli: StackCli, stack: Stack) -> None:
    assert stack.topology.kafka_cluster and stack.topology.redis_cluster
    shown = cli("status").stdout
    for name in [f"kafka-{node.node_id}" for node in stack.topology.kafka]:
        assert name in shown
    assert shown.count("master, slots") == 3 and shown.count("replica of") == 3
    assert "live brokers [1, 2, 3]" in shown and "redis cluster: ok" in shown


async def test_kafka_survives_the_leader_node(cli: StackCli, stack: Stack) -> None:
    topic = f"fleet.requests.stackchaos-{uuid.uuid4().hex[:8]}"
    bootstrap = stack.topology.bootstrap
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=3)])
    finally:
        await admin.close()
    await kafka_cluster.wait_topic_in_sync(stack.topology.kafka, topic, PARTITIONS, 60)
    victim = await nodes.kafka_leader_of_most(stack, topic)
    led = [s.partition for s in (await kafka_cluster.cluster_view(bootstrap, [topic])).partitions if s.leader == victim]
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", request_timeout_ms=60000)
    await producer.start()
    try:
        await producer.send_and_wait(topic, b"before", partition=led[0])
        killed = nodes.kill_kafka_node(stack, victim)
        started = time.monotonic()
        await producer.send_and_wait(topic, b"after", partition=led[0])
        cli.timings[f"kafka: acks=all produce after SIGKILL of node {victim}"] = time.monotonic() - started
    finally:
        await producer.stop()
    assert not pid_alive(killed) and nodes.kafka_node_pid(stack, victim) is None
    moved = {s.partition: s for s in (await kafka_cluster.cluster_view(bootstrap, [topic])).partitions}
    assert moved[led[0]].leader not in (victim, kafka_cluster.NO_LEADER)
    assert victim not in moved[led[0]].isr and len(moved[led[0]].isr) == 2
    assert await _read_partition(bootstrap, TopicPartition(topic, led[0]), 2) == [b"before", b"after"]

    started = time.monotonic()
    await nodes.restart_kafka_node(stack, victim, timeout_s=120)
    cli.timings[f"kafka: node {victim} restarted and back in every ISR"] = time.monotonic() - started
    view = await kafka_cluster.cluster_view(bootstrap, [topic])
    assert view.brokers == {1, 2, 3} and not view.lagging()
    assert all(victim in state.isr for state in view.partitions)
    assert "under-replicated: none" in cli("status").stdout


async def _read_partition(bootstrap: str, partition: TopicPartition, count: int) -> list[bytes]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    await consumer.start()
    values: list[bytes] = []
    try:
        consumer.assign([partition])
        await consumer.seek_to_beginning(partition)
        deadline = time.monotonic() + 30
        while len(values) < count and time.monotonic() < deadline:
            batches = await consumer.getmany(partition, timeout_ms=1000)
            values += [record.value for record in batches.get(partition, []) if record.value is not None]
    finally:
        await consumer.stop()
    return values


async def test_redis_replica_takes_over_a_killed_master(cli: StackCli, stack: Stack) -> None:
    first = stack.topology.redis[0]
    client = RedisCluster(host=first.host, port=first.port)
    await client.initialize()
    try:
        tag = "{stackchaos-" + uuid.uuid4().hex[:8] + "}"
        master = await nodes.redis_master_of_key(stack, tag)
        await _write_acknowledged_by_a_replica(master, f"{tag}:before", b"v0")
        nodes.kill_redis_node(stack, master.port)
        started = time.monotonic()
        await nodes.wait_redis_failover(stack, master.port, timeout_s=60)
        cli.timings[f"redis: replica promoted after SIGKILL of {master.port}"] = time.monotonic() - started
        promoted = await nodes.redis_master_of_key(stack, tag)
        assert promoted != master
        assert await client.get(f"{tag}:before") == b"v0"
        for i in range(20):
            assert await client.set(f"{tag}:after:{i}", str(i))
        assert [await client.get(f"{tag}:after:{i}") for i in range(20)] == [str(i).encode() for i in range(20)]
    finally:
        await client.aclose()

    started = time.monotonic()
    await nodes.restart_redis_node(stack, master.port, timeout_s=60)
    cli.timings[f"redis: {master.port} restarted and back as a replica"] = time.monotonic() - started
    replication = await redis_cluster.replication_info(master)
    assert replication["role"] == "slave" and replication["master_port"] == str(promoted.port)
    assert replication["master_link_status"] == "up"
    assert not await redis_cluster.cluster_problems(stack.topology.redis)


async def _write_acknowledged_by_a_replica(master: Endpoint, key: str, value: bytes) -> None:
    """SET on the master, then WAIT on the same connection until its replica has it (so a failover keeps it)."""
    direct = Redis(host=master.host, port=master.port)
    try:
        pipe = direct.pipeline(transaction=False)
        pipe.set(key, value)
        pipe.execute_command("WAIT", 1, 5000)
        assert await pipe.execute() == [True, 1]
    finally:
        await direct.aclose()
