"""`scripts/stack status` of a stack with several Kafka nodes or a Redis Cluster: each node (pid,
answers or not), the partition leaders and under-replicated partitions of the fleet's topics, each
Redis node's role and slots, and whether the Redis Cluster is whole."""

from __future__ import annotations

import asyncio

import redis.exceptions
from aiokafka.errors import KafkaError

from fleet_dev.stack import kafka_cluster, redis_cluster
from fleet_dev.stack.kafka_cluster import ClusterView, PartitionState
from fleet_dev.stack.layout import KafkaLayout, RedisLayout, Stack
from fleet_dev.stack.readiness import Echo, answers, wait_for_redis
from fleet_dev.stack.redis_cluster import ClusterNode

_ANSWER_TIMEOUT_S = 3.0


async def cluster_status(stack: Stack, echo: Echo) -> bool:
    """Print the state of every node; True when all run, answer, and nothing is under-replicated."""
    echo(f"stack: {stack.topology.describe()} (recorded in {stack.topology_file})")
    kafka_ok = await _kafka_status(stack, echo)
    redis_ok = await _redis_status(stack, echo)
    echo(f"logs: {stack.logs}   data: {stack.data}")
    return kafka_ok and redis_ok


async def _kafka_status(stack: Stack, echo: Echo) -> bool:
    layouts = stack.kafka_nodes
    answered = await asyncio.gather(*(_kafka_node_answers(layout) for layout in layouts))
    healthy = True
    for layout, answer in zip(layouts, answered, strict=True):
        pid = layout.proc.pid()
        where = f"{layout.node.broker} (controller {layout.node.controller.port})"
        echo(f"{layout.proc.name:12} {where:34} {_running(pid):22} {'answers' if answer else 'does not answer'}")
        healthy = healthy and pid is not None and answer
    if not any(answered):
        return False
    bootstrap = stack.topology.bootstrap
    try:
        topics = await kafka_cluster.fleet_topics(bootstrap)
        view = await kafka_cluster.cluster_view(bootstrap, topics)
    except (KafkaError, OSError, asyncio.TimeoutError) as exc:
        echo(f"kafka: cannot read the partitions ({exc!r})")
        return False
    echo(f"kafka: controller node {view.controller}, live brokers {sorted(view.brokers)}")
    if not topics:
        echo("  no fleet topics yet (fleet.requests.*, fleet.results*, fleet.dlq)")
    for topic in topics:
        echo(_topic_line(view, topic))
    return healthy and not view.lagging()


async def _kafka_node_answers(layout: KafkaLayout) -> bool:
    try:
        await asyncio.wait_for(kafka_cluster.node_in_cluster(layout.node), _ANSWER_TIMEOUT_S)
    except (KafkaError, OSError, ConnectionError, asyncio.TimeoutError):
        return False
    return True


def _topic_line(view: ClusterView, topic: str) -> str:
    states = [state for state in view.partitions if state.topic == topic]
    leaders = kafka_cluster.leaders(states, topic)
    led = ", ".join(f"node {node}: {count}" for node, count in sorted(leaders.items())) or "none"
    lagging = [state for state in states if state.under_replicated or state.offline]
    problems = "; ".join(_lag_text(state) for state in lagging) or "none"
    return f"  {topic}: {len(states)} partitions, leaders {led}; under-replicated: {problems}"


def _lag_text(state: PartitionState) -> str:
    leader = "no leader" if state.offline else f"leader {state.leader}"
    return f"[{state.partition}] {leader}, isr {list(state.isr)} of {list(state.replicas)}"


async def _redis_status(stack: Stack, echo: Echo) -> bool:
    layouts = stack.redis_nodes
    answered = await asyncio.gather(
        *(answers(wait_for_redis(stack.settings.model_copy(update={"redis_url": f"redis://{layout.at}/0"}),
                                 _ANSWER_TIMEOUT_S)) for layout in layouts)
    )
    view = await _cluster_view(layouts, answered) if stack.topology.redis_cluster else {}
    by_id = {node.node_id: node for node in view.values()}
    healthy = True
    for layout, answer in zip(layouts, answered, strict=True):
        pid = layout.proc.pid()
        role = _role_text(view.get(layout.at.port), by_id) if view else ""
        echo(f"{layout.proc.name:12} {str(layout.at):34} {_running(pid):22} "
             f"{'answers' if answer else 'does not answer':16} {role}".rstrip())
        healthy = healthy and pid is not None and answer
    if not stack.topology.redis_cluster:
        return healthy
    problems = await redis_cluster.cluster_problems([layout.at for layout in layouts])
    echo(f"redis cluster: {'ok' if not problems else 'NOT ok: ' + '; '.join(problems[:6])}")
    return healthy and not problems


async def _cluster_view(layouts: list[RedisLayout], answered: list[bool]) -> dict[int, ClusterNode]:
    """CLUSTER NODES as the first answering node sees it, by port."""
    for layout, answer in zip(layouts, answered, strict=True):
        if answer:
            try:
                return {node.at.port: node for node in await redis_cluster.nodes_seen_by(layout.at)}
            except (OSError, redis.exceptions.RedisError):
                continue
    return {}


def _role_text(node: ClusterNode | None, by_id: dict[str, ClusterNode]) -> str:
    if node is None:
        return "not in the cluster"
    state = " (failing)" if node.failing else ""
    if node.is_master:
        return f"master, slots {node.slot_ranges()}{state}"
    master = by_id.get(node.master_id or "")
    return f"replica of {master.at if master is not None else node.master_id}{state}"


def _running(pid: int | None) -> str:
    return f"running (pid {pid})" if pid is not None else "not running"
