"""What a multi-node Kafka of the stack looks like from a client: live brokers, partition leaders,
in-sync replicas, read from metadata requests sent with aiokafka's client (to one chosen node
where it matters: each broker has its own copy of the metadata)."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka.client import AIOKafkaClient
from aiokafka.errors import KafkaError
from aiokafka.protocol.metadata import MetadataRequest

from fleet_dev.stack.readiness import Echo, wait_until
from fleet_dev.stack.topology import KafkaNode
from schemas.names import DEFAULT_RESULTS_TOPIC, DLQ_TOPIC, requests_topic

NO_LEADER = -1
_REQUESTS_PREFIX = requests_topic("")


@dataclass(frozen=True)
class PartitionState:
    topic: str
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas)

    @property
    def offline(self) -> bool:
        return self.leader == NO_LEADER


@dataclass(frozen=True)
class ClusterView:
    """Live (unfenced) brokers, the active controller and the partitions asked for."""

    brokers: frozenset[int]
    controller: int
    partitions: tuple[PartitionState, ...]

    def lagging(self) -> list[PartitionState]:
        """Partitions with a replica out of sync or no leader at all."""
        return [state for state in self.partitions if state.under_replicated or state.offline]


def is_fleet_topic(topic: str) -> bool:
    """Request topics of every model, the results topics and the dead letters."""
    return topic.startswith(_REQUESTS_PREFIX) or topic.startswith(DEFAULT_RESULTS_TOPIC) or topic == DLQ_TOPIC


async def _metadata(bootstrap: str, topics: Sequence[str] | None, node_id: int | None, timeout_ms: int) -> Any:
    client = AIOKafkaClient(bootstrap_servers=bootstrap, request_timeout_ms=timeout_ms)
    request = MetadataRequest(list(topics) if topics is not None else None)
    try:
        await client.bootstrap()
        known = [broker.nodeId for broker in client.cluster.brokers()]
        # Any node will do: a node just killed may still be listed, so try the others after it.
        targets = [node_id] if node_id is not None else random.sample(known, len(known))
        failures: list[Exception] = []
        for target in targets:
            try:
                return (await client.send(target, request)).to_object()
            except KafkaError as exc:
                failures.append(exc)
    finally:
        await client.close()
    raise ConnectionError(f"no Kafka node answered a metadata request: {failures!r}")


async def cluster_view(
    bootstrap: str, topics: Sequence[str] | None = None, *, node_id: int | None = None, timeout_ms: int = 5000
) -> ClusterView:
    """One metadata snapshot as node `node_id` (default: any node) sees it; `topics` None means every
    topic, internal ones included. Brokers learn a change a moment after the controller decides it,
    so a check that must hold everywhere asks every node."""
    metadata = await _metadata(bootstrap, topics, node_id, timeout_ms)
    partitions = tuple(
        PartitionState(
            topic["topic"], part["partition"], part["leader"], tuple(part["replicas"]), tuple(part["isr"])
        )
        for topic in metadata["topics"]
        for part in topic["partitions"]
    )
    brokers = frozenset(broker["node_id"] for broker in metadata["brokers"])
    return ClusterView(brokers, metadata["controller_id"], tuple(sorted(partitions, key=_order)))


def _order(state: PartitionState) -> tuple[str, int]:
    return state.topic, state.partition


async def fleet_topics(bootstrap: str, *, timeout_ms: int = 5000) -> list[str]:
    metadata = await _metadata(bootstrap, None, None, timeout_ms)
    return sorted(topic["topic"] for topic in metadata["topics"] if is_fleet_topic(topic["topic"]))


def leaders(partitions: Iterable[PartitionState], topic: str) -> Counter[int]:
    """How many partitions of `topic` each node leads."""
    return Counter(state.leader for state in partitions if state.topic == topic and not state.offline)


def busiest_leader(partitions: Iterable[PartitionState], topic: str) -> int:
    """The node id that leads most partitions of `topic` (the lowest id on a tie)."""
    counts = leaders(partitions, topic)
    if not counts:
        raise LookupError(f"no partition of {topic} has a leader")
    return min(counts, key=lambda node_id: (-counts[node_id], node_id))


async def leader_of_most(bootstrap: str, topic: str) -> int:
    """The node id that leads most partitions of `topic` right now."""
    return busiest_leader((await cluster_view(bootstrap, [topic])).partitions, topic)


async def node_in_cluster(node: KafkaNode, *, timeout_ms: int = 3000) -> None:
    """Raise unless `node` answers on its own port and counts itself a live broker of the cluster."""
    view = await cluster_view(str(node.broker), [], node_id=node.node_id, timeout_ms=timeout_ms)
    if node.node_id not in view.brokers:
        live = sorted(view.brokers)
        raise ConnectionError(f"node {node.node_id} answers but is not a live broker yet (live: {live})")


async def wait_in_sync(nodes: Sequence[KafkaNode], timeout_s: float, *, progress: Echo | None = None) -> None:
    """Wait until, as every node sees it, all nodes are live brokers and no partition of any topic
    lags or lacks a leader."""
    wanted = {node.node_id for node in nodes}

    async def check() -> None:
        for node in nodes:
            view = await cluster_view(str(node.broker), node_id=node.node_id)
            if not wanted <= view.brokers:
                raise ConnectionError(f"node {node.node_id} sees live brokers {sorted(view.brokers)}")
            lagging = view.lagging()
            if lagging:
                shown = ", ".join(f"{s.topic}[{s.partition}] isr {list(s.isr)}/{list(s.replicas)}" for s in lagging[:5])
                raise ConnectionError(f"{len(lagging)} partitions under-replicated or offline: {shown}")

    await wait_until(check, f"kafka nodes {sorted(wanted)} in sync", timeout_s, progress=progress)


async def wait_topic_in_sync(
    nodes: Sequence[KafkaNode], topic: str, partitions: int, timeout_s: float, *, progress: Echo | None = None
) -> None:
    """Wait until every node serves `topic` with `partitions` partitions, each led and fully in sync
    (a topic just created is known to the controller a moment before every broker knows it)."""

    async def check() -> None:
        for node in nodes:
            states = (await cluster_view(str(node.broker), [topic], node_id=node.node_id)).partitions
            ready = [state for state in states if not (state.under_replicated or state.offline)]
            if len(ready) < partitions:
                raise ConnectionError(f"node {node.node_id}: {len(ready)} of {partitions} partitions led and in sync")

    await wait_until(check, f"topic {topic} in sync", timeout_s, progress=progress)
