"""Pure logic of the multi-node stack: planned ports, the recorded topology, rendered cluster
configuration, and reading what Kafka metadata and Redis CLUSTER NODES say."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet_dev.stack import kafka_server as stack_kafka, redis_server as stack_redis, topology as stack_topology
from fleet_dev.stack.kafka_cluster import ClusterView, PartitionState, busiest_leader, is_fleet_topic, leaders
from fleet_dev.stack.kafka_server import Replication
from fleet_dev.stack.layout import Stack, StackSettings
from fleet_dev.stack.proc import Endpoint, StackError
from fleet_dev.stack.redis_cluster import parse_cluster_nodes, parse_info
from fleet_dev.stack.topology import KafkaNode


def _props(text: str) -> dict[str, str]:
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    return dict(line.split("=", 1) for line in lines)


def _at(port: int) -> Endpoint:
    return Endpoint("127.0.0.1", port)


def _cluster(tmp_path: Path, **overrides: object) -> Stack:
    settings = StackSettings(home=tmp_path, kafka_bootstrap="127.0.0.1:19092", kafka_controller_port=19093,
                             redis_url="redis://127.0.0.1:16379/0", **overrides)
    return Stack.planned(settings, brokers=3, redis_cluster=True)


def test_default_cluster_ports() -> None:
    topology = stack_topology.plan(_at(9092), 9093, _at(6379), brokers=3, redis_cluster=True)
    assert [(n.node_id, n.broker.port, n.controller.port) for n in topology.kafka] == [
        (1, 9092, 9093), (2, 9094, 9095), (3, 9096, 9097)
    ]
    assert [node.port for node in topology.redis] == [6379, 6380, 6381, 6382, 6383, 6384]
    assert topology.bootstrap == "127.0.0.1:9092,127.0.0.1:9094,127.0.0.1:9096"
    assert topology.redis_url == "redis://127.0.0.1:6379/0"
    assert (topology.replication_factor, topology.min_insync_replicas) == (3, 2)
    assert 16379 in topology.ports() and 16384 in topology.ports()  # the cluster buses
    assert topology.env_lines() == [
        "export FLEET_KAFKA_BOOTSTRAP=127.0.0.1:9092,127.0.0.1:9094,127.0.0.1:9096",
        "export FLEET_REDIS_URL=redis://127.0.0.1:6379/0",
        "export FLEET_REDIS_CLUSTER=true",
    ]


def test_single_node_plan_is_the_stack_of_today() -> None:
    topology = stack_topology.plan(_at(9092), 9093, _at(6379))
    assert topology.kafka == (KafkaNode(1, _at(9092), _at(9093)),)
    assert topology.redis == (_at(6379),) and not topology.redis_cluster and not topology.kafka_cluster
    assert (topology.replication_factor, topology.min_insync_replicas) == (1, 1)
    assert topology.ports() == [9092, 9093, 6379]


@pytest.mark.parametrize(
    ("kafka", "controller", "redis", "brokers"),
    [
        (9092, 9094, 6379, 3),  # controller 9094 is broker 2's port
        (9092, 9093, 9096, 3),  # redis on broker 3's port
        (9092, 9093, 6379, 0),
        (9092, 9093, 6379, 10),
        (65532, 65533, 6379, 3),  # broker 3 would need port 65536
    ],
)
def test_plan_refuses_clashes_and_impossible_sizes(kafka: int, controller: int, redis: int, brokers: int) -> None:
    with pytest.raises(StackError):
        stack_topology.plan(_at(kafka), controller, _at(redis), brokers=brokers, redis_cluster=True)


def test_redis_bus_ports_are_checked_for_clashes() -> None:
    stack_topology.plan(_at(16380), 16381, _at(6379))  # a single Redis has no bus
    with pytest.raises(StackError, match="twice"):
        stack_topology.plan(_at(16380), 16381, _at(6379), redis_cluster=True)  # buses on 16379..16384


def test_topology_round_trips_through_its_file(tmp_path: Path) -> None:
    path = tmp_path / "stack" / "topology.json"
    assert stack_topology.load(path) is None
    topology = stack_topology.plan(_at(19092), 19093, _at(16379), brokers=3, redis_cluster=True)
    stack_topology.save(path, topology)
    assert stack_topology.load(path) == topology
    assert not path.with_suffix(".partial").exists()
    path.write_text('{"kafka": [{"node_id": 1}]}')
    with pytest.raises(StackError, match="malformed"):
        stack_topology.load(path)
    path.write_text("{not json")
    with pytest.raises(StackError):
        stack_topology.load(path)


def test_recorded_stack_follows_the_topology_file(tmp_path: Path) -> None:
    planned = _cluster(tmp_path)
    assert not Stack.recorded(planned.settings).topology.kafka_cluster
    stack_topology.save(planned.topology_file, planned.topology)
    # `status` and `down` read the file, whatever ports the environment names now
    elsewhere = planned.settings.model_copy(update={"kafka_bootstrap": "127.0.0.1:9092"})
    assert Stack.recorded(elsewhere).topology == planned.topology


def test_cluster_layout_gives_each_node_its_own_files(tmp_path: Path) -> None:
    stack = _cluster(tmp_path)
    kafka, redis = stack.kafka_nodes, stack.redis_nodes
    assert [node.proc.name for node in kafka] == ["kafka-1", "kafka-2", "kafka-3"]
    assert [node.proc.name for node in redis] == [f"redis-{port}" for port in range(16379, 16385)]
    files = [p for node in kafka for p in (node.proc.pid_file, node.server_properties, node.data_dir, node.log_dir)]
    files += [p for node in redis for p in (node.proc.pid_file, node.proc.log_file, node.data_dir)]
    assert len(set(files)) == len(files)
    assert kafka[1].server_properties == tmp_path.resolve() / "stack" / "conf" / "kafka-2" / "server.properties"
    assert kafka[1].proc.markers[-1] == str(kafka[1].server_properties)
    assert redis[0].proc.markers == ("redis-server", "127.0.0.1:16379", "[cluster]")
    names = {node.proc.name for node in kafka} | {node.proc.name for node in redis}
    assert names == {proc.name for proc in stack.processes()}


def test_cluster_node_properties(tmp_path: Path) -> None:
    stack = _cluster(tmp_path)
    voters = stack.topology.kafka
    text = stack_kafka.render_cluster_node_properties(voters[1], voters, tmp_path / "k2", 6, Replication(3, 2))
    props = _props(text)
    assert props["process.roles"] == "broker,controller" and props["node.id"] == "2"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:19093,2@127.0.0.1:19095,3@127.0.0.1:19097"
    assert "controller.quorum.bootstrap.servers" not in props  # static voters, formatted without --standalone
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:19094,CONTROLLER://127.0.0.1:19095"
    assert props["advertised.listeners"] == props["listeners"]
    assert props["log.dirs"] == str(tmp_path / "k2") and props["num.partitions"] == "6"
    assert props["default.replication.factor"] == "3" and props["min.insync.replicas"] == "2"
    assert props["offsets.topic.replication.factor"] == "3"
    assert props["transaction.state.log.replication.factor"] == "3"
    assert props["transaction.state.log.min.isr"] == "2"
    assert int(props["broker.session.timeout.ms"]) > int(props["broker.heartbeat.interval.ms"])


def test_cluster_node_must_be_a_voter(tmp_path: Path) -> None:
    voters = _cluster(tmp_path).topology.kafka
    stranger = KafkaNode(7, _at(29092), _at(29093))
    with pytest.raises(StackError):
        stack_kafka.render_cluster_node_properties(stranger, voters, tmp_path, 4, Replication(3, 2))


def test_single_node_properties_did_not_change(tmp_path: Path) -> None:
    props = _props(stack_kafka.render_server_properties(_at(9092), 9093, tmp_path, 4))
    assert props["node.id"] == "1" and "controller.quorum.voters" not in props
    assert "broker.session.timeout.ms" not in props
    assert props["default.replication.factor"] == props["min.insync.replicas"] == "1"


def test_formatted_cluster_id(tmp_path: Path) -> None:
    assert stack_kafka.formatted_cluster_id(tmp_path) is None
    (tmp_path / "meta.properties").write_text("#\nnode.id=2\ndirectory.id=abc\nversion=1\ncluster.id=Xy-9_abc\n")
    assert stack_kafka.formatted_cluster_id(tmp_path) == "Xy-9_abc"


def test_redis_cluster_argv(tmp_path: Path) -> None:
    argv = stack_redis.redis_cluster_argv("redis-server", _at(16381), tmp_path, "64mb", "volatile-lru", 2500)
    pairs = dict(zip(argv[1::2], argv[2::2], strict=True))
    assert pairs["--cluster-enabled"] == "yes" and pairs["--cluster-config-file"] == "nodes.conf"
    assert pairs["--cluster-node-timeout"] == "2500" and pairs["--dir"] == str(tmp_path)
    assert pairs["--appendonly"] == "yes" and pairs["--appendfsync"] == "everysec"
    assert pairs["--port"] == "16381" and pairs["--bind"] == "127.0.0.1"


CLUSTER_NODES = """\
a1 127.0.0.1:16379@26379 myself,master - 0 0 1 connected 0-5460
b2 127.0.0.1:16380@26380,host-b master - 0 1700000000000 2 connected 5461-10922 [5500->-c3]
c3 127.0.0.1:16381@26381 master,fail - 1700000000000 1700000000000 3 disconnected
d4 127.0.0.1:16382@26382 slave b2 0 1700000000000 2 connected
e5 127.0.0.1:16383@26383 master - 0 1700000000000 7 connected 10923-16382 16383
f6 127.0.0.1:16384@26384 slave,fail? a1 0 1700000000000 1 connected
"""


def test_parse_cluster_nodes() -> None:
    nodes = {node.at.port: node for node in parse_cluster_nodes(CLUSTER_NODES)}
    assert set(nodes) == set(range(16379, 16385))
    assert nodes[16379].is_master and nodes[16379].slots == ((0, 5460),) and not nodes[16379].failing
    assert nodes[16380].slots == ((5461, 10922),)  # the migration entry is no slot of its own
    assert nodes[16381].failing and not nodes[16381].connected and nodes[16381].slots == ()
    assert nodes[16382].master_id == "b2" and not nodes[16382].is_master
    assert nodes[16383].serves(16383) and nodes[16383].serves(10923) and not nodes[16383].serves(0)
    assert nodes[16383].slot_ranges() == "10923-16382,16383"
    assert nodes[16384].failing and nodes[16381].slot_ranges() == "-"


def test_parse_info() -> None:
    info = parse_info("# Cluster\r\ncluster_state:ok\r\ncluster_known_nodes:6\r\n\r\n")
    assert info == {"cluster_state": "ok", "cluster_known_nodes": "6"}


def _partition(topic: str, partition: int, leader: int, isr: tuple[int, ...]) -> PartitionState:
    return PartitionState(topic, partition, leader, (1, 2, 3), isr)


def test_partition_views() -> None:
    topic = "fleet.requests.m"
    states = (
        _partition(topic, 0, 2, (2, 1, 3)),
        _partition(topic, 1, 3, (3, 1)),
        _partition(topic, 2, 3, (3, 2, 1)),
        _partition(topic, 3, -1, ()),
        _partition("other", 0, 1, (1, 2, 3)),
    )
    assert leaders(states, topic) == {2: 1, 3: 2}
    assert busiest_leader(states, topic) == 3
    assert busiest_leader(states[:1] + states[4:], "other") == 1
    lagging = ClusterView(frozenset({1, 2, 3}), 1, states).lagging()
    assert [(s.topic, s.partition) for s in lagging] == [(topic, 1), (topic, 3)]
    with pytest.raises(LookupError):
        busiest_leader(states, "fleet.dlq")


def test_busiest_leader_breaks_ties_by_lowest_id() -> None:
    states = (_partition("t", 0, 3, (1, 2, 3)), _partition("t", 1, 2, (1, 2, 3)))
    assert busiest_leader(states, "t") == 2


@pytest.mark.parametrize(
    ("topic", "fleet"),
    [
        ("fleet.requests.minilm-embed", True),
        ("fleet.requests.minilm-embed.cpu", True),
        ("fleet.results", True),
        ("fleet.results.tenant-a", True),
        ("fleet.dlq", True),
        ("fleet.trace", False),
        ("__consumer_offsets", False),
        ("fleet.cache.m.v1", False),
    ],
)
def test_fleet_topics(topic: str, fleet: bool) -> None:
    assert is_fleet_topic(topic) is fleet
