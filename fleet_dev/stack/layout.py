"""Where the local stack keeps everything under <home>/stack/, and the settings it runs with.

    kafka-libs/   the Kafka jars (shared by every node)
    topology.json how the stack was started (fleet_dev/stack/topology.py)
    conf/         server.properties + log4j.properties (a cluster: conf/kafka-<id>/ per node)
    data/         kafka/ and redis/ (a cluster: kafka-<id>/ and redis-<port>/ per node)
    logs/         kafka.out, kafka/server.log, redis.log (a cluster: one of each per node)
    run/          pid files

The single-node stack keeps the names it always had, so a stack started before clusters
existed is still found, stopped and shown.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import Field

from common.settings import FleetSettings
from fleet_dev.stack import (
    kafka_server as stack_kafka,
    redis_server as stack_redis,
    secure as stack_secure,
    topology as stack_topology,
)
from fleet_dev.stack.proc import Endpoint, Managed, StackError
from fleet_dev.stack.topology import KafkaNode, Topology


class StackSettings(FleetSettings):
    kafka_controller_port: int = Field(
        default=9093, gt=0, lt=65536, description="KRaft controller listener port (loopback)"
    )
    partitions: int = Field(default=4, ge=1, description="num.partitions: partitions of auto-created topics")
    kafka_heap_min: str = Field(default="256m", description="JVM -Xms of the broker")
    kafka_heap_max: str = Field(default="768m", description="JVM -Xmx of the broker")
    kafka_node_heap_max: str = Field(
        default="512m", description="JVM -Xmx of each node when the stack runs several Kafka nodes"
    )
    redis_maxmemory: str = Field(default="256mb", description="Redis maxmemory (of each node in a cluster)")
    redis_maxmemory_policy: str = Field(default="volatile-lru", description="Redis eviction policy: volatile-lru "
                                        "evicts only keys with a TTL (results, cache entries, replies), never the "
                                        "version pointers, audit log or cache generation")
    redis_cluster_node_timeout_ms: int = Field(
        default=3000, ge=500, description="cluster-node-timeout: how long a Redis master may be silent before "
        "its replica takes over"
    )
    stack_start_timeout_s: float = Field(
        default=90.0, gt=0, description="How long `up` waits for both servers to answer"
    )
    stack_stop_timeout_s: float = Field(default=30.0, gt=0, description="SIGTERM grace period before SIGKILL")


@dataclass(frozen=True)
class KafkaLayout:
    """One Kafka node's process, configuration, data and logs."""

    node: KafkaNode
    proc: Managed
    conf_dir: Path
    data_dir: Path
    log_dir: Path

    @property
    def server_properties(self) -> Path:
        return self.conf_dir / "server.properties"

    @property
    def log4j(self) -> Path:
        return self.conf_dir / "log4j.properties"


@dataclass(frozen=True)
class RedisLayout:
    """One Redis node's process and data."""

    at: Endpoint
    proc: Managed
    data_dir: Path


@dataclass(frozen=True)
class Stack:
    settings: StackSettings
    root: Path
    topology: Topology

    @classmethod
    def planned(cls, settings: StackSettings, *, brokers: int = 1, redis_cluster: bool = False,
                secure: bool = False) -> Stack:
        """The stack `up` starts for these flags, ports from the settings."""
        topology = stack_topology.plan(
            stack_kafka.parse_bootstrap(settings.kafka_bootstrap),
            settings.kafka_controller_port,
            stack_redis.parse_redis_url(settings.redis_url),
            brokers=brokers,
            redis_cluster=redis_cluster,
            secure=secure,
        )
        return cls(settings, settings.home.resolve() / "stack", topology)

    @classmethod
    def recorded(cls, settings: StackSettings) -> Stack:
        """The stack as `up` recorded it; without a record, the single-node stack of the settings."""
        root = settings.home.resolve() / "stack"
        topology = stack_topology.load(root / "topology.json")
        return cls(settings, root, topology) if topology is not None else cls.planned(settings)

    @property
    def topology_file(self) -> Path:
        return self.root / "topology.json"

    @property
    def libs(self) -> Path:
        return self.root / "kafka-libs"

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def conf(self) -> Path:
        return self.root / "conf"

    @property
    def kafka_nodes(self) -> list[KafkaLayout]:
        return [self.kafka_node(node.node_id) for node in self.topology.kafka]

    @property
    def redis_nodes(self) -> list[RedisLayout]:
        return [self.redis_node(at.port) for at in self.topology.redis]

    def kafka_node(self, node_id: int) -> KafkaLayout:
        node = self.topology.kafka_node(node_id)
        tag = f"kafka-{node_id}" if self.topology.kafka_cluster else "kafka"
        conf_dir = self.conf / tag if self.topology.kafka_cluster else self.conf
        markers = (stack_kafka.KAFKA_MAIN, str(conf_dir / "server.properties"))
        proc = Managed(tag, self.root / "run" / f"{tag}.pid", self.logs / f"{tag}.out", markers)
        return KafkaLayout(node, proc, conf_dir, self.data / tag, self.logs / tag)

    def redis_node(self, port: int) -> RedisLayout:
        at = self.topology.redis_node(port)
        cluster = self.topology.redis_cluster
        tag = f"redis-{port}" if cluster else "redis"
        markers = stack_redis.process_markers(at, cluster)
        return RedisLayout(at, Managed(tag, self.root / "run" / f"{tag}.pid", self.logs / f"{tag}.log", markers),
                           self.data / tag)

    @property
    def credentials_file(self) -> Path:
        return stack_secure.credentials_file(self.root)

    def credentials(self) -> stack_secure.Credentials:
        """The secure stack's credentials (made and written to secure.env on first use)."""
        return stack_secure.ensure_credentials(self.root, self.settings)

    def client_settings(self) -> FleetSettings:
        """Settings that reach this stack: the secure stack's credentials added when it has them."""
        if not self.topology.secure:
            return self.settings
        found = stack_secure.load_credentials(self.credentials_file)
        if found is None:
            raise StackError(f"the stack runs secured but {self.credentials_file} is gone; "
                             "`scripts/stack down` and `up --secure` again")
        return found.client_settings(self.settings)

    def processes(self) -> list[Managed]:
        return [node.proc for node in self.kafka_nodes] + [node.proc for node in self.redis_nodes]
