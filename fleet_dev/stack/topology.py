"""How the local stack was started: one Kafka node or a KRaft quorum, one Redis or a Redis Cluster.

`up` plans the nodes from the settings and its flags and records them in
<home>/stack/topology.json; `status`, `down` and the node helpers (fleet_dev/stack/nodes.py) read that
file, so they know every node without flags. No file means the single-node stack of the settings.

Ports: Kafka node i (1-based) listens on broker port P + 2(i-1) and controller port C + 2(i-1),
where P is the first port of FLEET_KAFKA_BOOTSTRAP and C is FLEET_KAFKA_CONTROLLER_PORT (defaults:
brokers 9092, 9094, 9096; controllers 9093, 9095, 9097). Redis Cluster node j (0-based) listens on
R + j, R being the port of FLEET_REDIS_URL (default 6379..6384), and on R + j + 10000 for its
cluster bus.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from fleet_dev.stack.proc import Endpoint, StackError

LOOPBACK = "127.0.0.1"
REDIS_BUS_OFFSET = 10000  # Redis Cluster's default: the bus listens on the client port + 10000
REDIS_CLUSTER_MASTERS = 3
REDIS_CLUSTER_REPLICAS_PER_MASTER = 1
MAX_BROKERS = 9


@dataclass(frozen=True)
class KafkaNode:
    """One Kafka process: broker and KRaft controller in one JVM."""

    node_id: int
    broker: Endpoint
    controller: Endpoint

    @property
    def voter(self) -> str:
        """This node's entry in `controller.quorum.voters`."""
        return f"{self.node_id}@{self.controller}"


@dataclass(frozen=True)
class Topology:
    """Every node the stack runs; `redis_cluster` says whether the Redis nodes form one cluster,
    `secure` whether Kafka and Redis want credentials (fleet_dev/stack/secure.py)."""

    kafka: tuple[KafkaNode, ...]
    redis: tuple[Endpoint, ...]
    redis_cluster: bool
    secure: bool = False

    @property
    def kafka_cluster(self) -> bool:
        return len(self.kafka) > 1

    @property
    def bootstrap(self) -> str:
        """FLEET_KAFKA_BOOTSTRAP naming every broker."""
        return ",".join(str(node.broker) for node in self.kafka)

    @property
    def redis_url(self) -> str:
        """FLEET_REDIS_URL: the first Redis node (a cluster client discovers the others from it)."""
        return f"redis://{self.redis[0]}/0"

    @property
    def replication_factor(self) -> int:
        """Replication of new topics: 3 where there are 3 brokers or more."""
        return min(len(self.kafka), 3)

    @property
    def min_insync_replicas(self) -> int:
        """acks=all survives one broker down once there are 3 replicas."""
        return max(self.replication_factor - 1, 1)

    def kafka_node(self, node_id: int) -> KafkaNode:
        for node in self.kafka:
            if node.node_id == node_id:
                return node
        raise StackError(f"the stack has no Kafka node {node_id} (nodes: {[n.node_id for n in self.kafka]})")

    def redis_node(self, port: int) -> Endpoint:
        for node in self.redis:
            if node.port == port:
                return node
        raise StackError(f"the stack has no Redis node on port {port} (ports: {[n.port for n in self.redis]})")

    def ports(self) -> list[int]:
        """Every TCP port the stack listens on, cluster buses included."""
        kafka = [port for node in self.kafka for port in (node.broker.port, node.controller.port)]
        buses = [node.port + REDIS_BUS_OFFSET for node in self.redis] if self.redis_cluster else []
        return [*kafka, *(node.port for node in self.redis), *buses]

    def env_lines(self) -> list[str]:
        """What a shell exports so the fleet's processes find this stack."""
        lines = [f"export FLEET_KAFKA_BOOTSTRAP={self.bootstrap}", f"export FLEET_REDIS_URL={self.redis_url}"]
        return [*lines, f"export FLEET_REDIS_CLUSTER={'true' if self.redis_cluster else 'false'}"]

    def describe(self) -> str:
        kafka = f"{len(self.kafka)} Kafka node{'s' if self.kafka_cluster else ''}"
        redis = f"a Redis Cluster of {len(self.redis)} nodes" if self.redis_cluster else "one Redis"
        return f"{kafka} and {redis}" + (", secured (SASL/SCRAM, Redis ACL)" if self.secure else "")


def plan(
    kafka_at: Endpoint, controller_port: int, redis_at: Endpoint, *, brokers: int = 1, redis_cluster: bool = False,
    secure: bool = False,
) -> Topology:
    """The nodes for `brokers` Kafka nodes and one Redis or a Redis Cluster, from the base ports."""
    if not 1 <= brokers <= MAX_BROKERS:
        raise StackError(f"--brokers {brokers}: the local stack runs 1 to {MAX_BROKERS} Kafka nodes")
    if secure and (brokers > 1 or redis_cluster):
        # The secure stack exists to prove the fleet's clients authenticate; one node of each
        # does that, and credentials for a quorum and a Redis Cluster's bus are not built.
        raise StackError("--secure runs one Kafka node and one Redis; drop --brokers / --redis-cluster")
    kafka = tuple(
        KafkaNode(i + 1, Endpoint(LOOPBACK, kafka_at.port + 2 * i), Endpoint(LOOPBACK, controller_port + 2 * i))
        for i in range(brokers)
    )
    redis_count = REDIS_CLUSTER_MASTERS * (1 + REDIS_CLUSTER_REPLICAS_PER_MASTER) if redis_cluster else 1
    redis = tuple(Endpoint(redis_at.host, redis_at.port + j) for j in range(redis_count))
    topology = Topology(kafka, redis, redis_cluster, secure)
    ports = topology.ports()
    clashes = sorted({port for port in ports if ports.count(port) > 1})
    if clashes:
        raise StackError(f"the planned stack would use ports {clashes} twice; choose other base ports")
    if max(ports) >= 65536:
        raise StackError(f"the planned stack needs ports up to {max(ports)}; choose lower base ports")
    return topology


def save(path: Path, topology: Topology) -> None:
    """Record the topology (atomically: a reader never sees half a file)."""
    document = {
        "kafka": [
            {"node_id": n.node_id, "broker_port": n.broker.port, "controller_port": n.controller.port}
            for n in topology.kafka
        ],
        "redis_ports": [node.port for node in topology.redis],
        "redis_cluster": topology.redis_cluster,
        "secure": topology.secure,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(document, indent=2) + "\n")
    partial.replace(path)


def load(path: Path) -> Topology | None:
    """The recorded topology, or None when the stack has not recorded one."""
    try:
        document = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise StackError(f"cannot read the stack's topology file {path}: {exc}; delete it if no stack runs") from exc
    try:
        kafka = tuple(
            KafkaNode(int(n["node_id"]), _loopback(n["broker_port"]), _loopback(n["controller_port"]))
            for n in document["kafka"]
        )
        redis = tuple(_loopback(port) for port in document["redis_ports"])
        return Topology(kafka, redis, bool(document["redis_cluster"]), bool(document.get("secure", False)))
    except (KeyError, TypeError, ValueError) as exc:
        raise StackError(f"the topology file {path} is malformed ({exc!r}); delete it if no stack runs") from exc


def _loopback(port: object) -> Endpoint:
    return Endpoint(LOOPBACK, int(str(port)))
