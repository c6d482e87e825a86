"""Crashing and restoring one node of the stack, for the chaos tests.

Every helper finds its node in the topology `up` recorded (build the stack with
`Stack.recorded(StackSettings(...))`): Kafka nodes by node id, Redis nodes by port.

    node_id = await kafka_leader_of_most(stack, "fleet.requests.minilm-embed")
    kill_kafka_node(stack, node_id)                   # SIGKILL, as a crash
    ...                                               # the load carries on
    await restart_kafka_node(stack, node_id)          # same data dir and ports; back in every ISR

    master = await redis_master_of_key(stack, "fleet:result:{abc}")
    kill_redis_node(stack, master.port)
    await wait_redis_failover(stack, master.port)    # its replica took the slots over
    await restart_redis_node(stack, master.port)      # back, as a replica
"""

from __future__ import annotations

import asyncio

from fleet_dev.stack import kafka_cluster, redis_cluster
from fleet_dev.stack.launch import start_kafka_node, start_redis_node
from fleet_dev.stack.layout import Stack
from fleet_dev.stack.proc import Endpoint, StackError
from fleet_dev.stack.readiness import Echo, wait_until

DEFAULT_REJOIN_TIMEOUT_S = 90.0


def _quiet(line: str) -> None:
    """The helpers run inside tests: their progress lines go nowhere unless a caller passes an echo."""


def kafka_node_pid(stack: Stack, node_id: int) -> int | None:
    """The pid of Kafka node `node_id`, or None when it does not run."""
    return stack.kafka_node(node_id).proc.pid()


def redis_node_pid(stack: Stack, port: int) -> int | None:
    """The pid of the Redis node on `port`, or None when it does not run."""
    return stack.redis_node(port).proc.pid()


def kill_kafka_node(stack: Stack, node_id: int) -> int:
    """SIGKILL Kafka node `node_id` and wait until it is gone; returns its pid."""
    pid = stack.kafka_node(node_id).proc.kill()
    if pid is None:
        raise StackError(f"kafka node {node_id} does not run")
    return pid


def kill_redis_node(stack: Stack, port: int) -> int:
    """SIGKILL the Redis node on `port` and wait until it is gone; returns its pid."""
    pid = stack.redis_node(port).proc.kill()
    if pid is None:
        raise StackError(f"the redis node on port {port} does not run")
    return pid


async def restart_kafka_node(
    stack: Stack, node_id: int, timeout_s: float = DEFAULT_REJOIN_TIMEOUT_S, *, echo: Echo = _quiet
) -> None:
    """Start Kafka node `node_id` again (same data dir and ports) and wait until it has rejoined:
    it answers as a live broker and no partition of any topic is under-replicated."""
    await asyncio.to_thread(start_kafka_node, stack, stack.kafka_node(node_id), echo)
    await kafka_cluster.wait_in_sync(stack.topology.kafka, timeout_s, progress=echo)


async def restart_redis_node(
    stack: Stack, port: int, timeout_s: float = DEFAULT_REJOIN_TIMEOUT_S, *, echo: Echo = _quiet
) -> None:
    """Start the Redis node on `port` again (same data dir, same nodes.conf) and wait until it is back
    (a former master as a replica of the node that took its slots over) and the cluster is whole."""
    await asyncio.to_thread(start_redis_node, stack, stack.redis_node(port), echo)
    if stack.topology.redis_cluster:
        await redis_cluster.wait_cluster_whole(stack.topology.redis, timeout_s, progress=echo)


async def wait_redis_failover(
    stack: Stack, dead_port: int, timeout_s: float = DEFAULT_REJOIN_TIMEOUT_S, *, echo: Echo = _quiet
) -> None:
    """After the master on `dead_port` died: wait until the live nodes say cluster_state:ok and no
    slot is served by the dead node any more (its replica was promoted)."""
    live = [node for node in stack.topology.redis if node.port != dead_port]

    async def promoted() -> None:
        view = await redis_cluster.nodes_seen_by(live[0])
        still = [seen for seen in view if seen.at.port == dead_port and seen.is_master and seen.slots]
        if still:
            raise ConnectionError(f"{still[0].at} still holds slots {still[0].slot_ranges()}")

    await wait_until(promoted, f"a replica taking over from {dead_port}", timeout_s, progress=echo)
    await redis_cluster.wait_cluster_ok(live, timeout_s, progress=echo)


async def kafka_leader_of_most(stack: Stack, topic: str) -> int:
    """The node id leading most partitions of `topic`."""
    return await kafka_cluster.leader_of_most(stack.topology.bootstrap, topic)


async def redis_master_of_slot(stack: Stack, slot: int) -> Endpoint:
    """The Redis master serving hash slot `slot`."""
    return await redis_cluster.master_of_slot(stack.topology.redis, slot)


async def redis_master_of_key(stack: Stack, key: str | bytes) -> Endpoint:
    """The Redis master serving `key`'s hash slot."""
    return await redis_cluster.master_of_key(stack.topology.redis, key)
