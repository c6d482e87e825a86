"""Starting one node of the stack: write its configuration, format its storage once, start it detached.

`up` starts every node this way, and a restart after a crash (fleet_dev/stack/nodes.py) starts the
one node again: same configuration, same data dir, same ports.
"""

from __future__ import annotations

from collections.abc import Callable

from fleet_dev.stack import kafka_server as stack_kafka, redis_server as stack_redis, secure as stack_secure
from fleet_dev.stack.kafka_server import Replication
from fleet_dev.stack.layout import KafkaLayout, RedisLayout, Stack
from fleet_dev.stack.proc import Endpoint, Managed, StackError, pid_alive, port_open
from fleet_dev.stack.topology import REDIS_BUS_OFFSET

Echo = Callable[[str], None]
Alive = Callable[[], bool]
_SYSTEM_REDIS_HINT = " (a system redis? `service redis-server stop`)"


def start_kafka_node(stack: Stack, layout: KafkaLayout, echo: Echo) -> Alive:
    """Start one Kafka node unless it runs already; returns whether its process is still alive."""
    proc = layout.proc
    running = _already_running(proc, echo)
    if running is not None:
        return running
    node = layout.node
    _refuse_taken_ports([node.broker, node.controller])
    if not stack_kafka.jars_ready(stack.libs):
        stack_kafka.fetch_jars(stack.libs, echo)
    for folder in (layout.conf_dir, layout.data_dir, layout.log_dir):
        folder.mkdir(parents=True, exist_ok=True)
    credentials = stack.credentials() if stack.topology.secure else None
    # Mode 600: the secure node's file holds the broker's own SCRAM password.
    stack_secure.write_private(layout.server_properties, _server_properties(stack, layout, credentials))
    layout.log4j.write_text(stack_kafka.render_log4j(layout.log_dir))
    _format_once(stack, layout, credentials, echo)
    settings = stack.settings
    heap_max = settings.kafka_node_heap_max if stack.topology.kafka_cluster else settings.kafka_heap_max
    argv = stack_kafka.java_argv(
        stack.libs,
        layout.log4j,
        stack_kafka.KAFKA_MAIN,
        str(layout.server_properties),
        heap=(settings.kafka_heap_min, heap_max),
    )
    pid = proc.start(argv, cwd=stack.root)
    version = stack_kafka.kafka_version(stack.libs)
    echo(f"started {proc.name} {version} on {node.broker} (pid {pid}), log {proc.log_file}")
    return lambda: pid_alive(pid)


def _format_once(stack: Stack, layout: KafkaLayout, credentials: stack_secure.Credentials | None, echo: Echo) -> None:
    """Format the node's storage unless it was; the secure stack's with its SCRAM user (and a mark
    saying so, since a dir formatted without the user would refuse every login)."""
    secure_mark = layout.data_dir / stack_secure.SECURE_MARK
    if stack_kafka.is_formatted(layout.data_dir):
        if credentials is not None and not secure_mark.exists():
            raise StackError(f"{layout.data_dir} was formatted without --secure (no SCRAM user): "
                             "`scripts/stack down --wipe`, then `up --secure`")
        return
    cluster_id = _quorum_cluster_id(stack) if stack.topology.kafka_cluster else None
    cluster_id = stack_kafka.format_storage(
        stack.libs, layout.log4j, layout.server_properties, layout.proc.log_file, cluster_id=cluster_id,
        secret_args=stack_secure.scram_format_args(credentials) if credentials is not None else (),
    )
    if credentials is not None:
        secure_mark.write_text(f"formatted with SCRAM user {stack_secure.USER}\n")
    echo(f"formatted {layout.proc.name} storage in {layout.data_dir} (cluster id {cluster_id})")


def _server_properties(stack: Stack, layout: KafkaLayout, credentials: stack_secure.Credentials | None) -> str:
    topology, settings = stack.topology, stack.settings
    if not topology.kafka_cluster:
        node = layout.node
        if credentials is None:
            return stack_kafka.render_server_properties(node.broker, node.controller.port, layout.data_dir,
                                                        settings.partitions)
        return stack_kafka.render_server_properties(
            node.broker, node.controller.port, layout.data_dir, settings.partitions,
            listener=stack_secure.LISTENER, overrides=stack_secure.kafka_listener_properties(credentials))
    replication = Replication(topology.replication_factor, topology.min_insync_replicas)
    return stack_kafka.render_cluster_node_properties(
        layout.node, topology.kafka, layout.data_dir, settings.partitions, replication
    )


def _quorum_cluster_id(stack: Stack) -> str:
    """The id every node of the quorum is formatted with: the one a node already has, else a new one."""
    found = {stack_kafka.formatted_cluster_id(node.data_dir) for node in stack.kafka_nodes} - {None}
    if len(found) > 1:
        raise StackError(f"the Kafka nodes' data dirs belong to different clusters {sorted(found)}: "
                         "`scripts/stack down --wipe` and start again")
    return found.pop() if found else stack_kafka.new_cluster_id()


def start_redis_node(stack: Stack, layout: RedisLayout, echo: Echo) -> Alive:
    """Start one Redis node (single or cluster mode) unless it runs already."""
    proc = layout.proc
    running = _already_running(proc, echo)
    if running is not None:
        return running
    server = stack_redis.ensure_redis_server(echo)
    _refuse_taken_ports(_redis_ports(stack, layout), _SYSTEM_REDIS_HINT)
    layout.data_dir.mkdir(parents=True, exist_ok=True)
    settings = stack.settings
    memory = (settings.redis_maxmemory, settings.redis_maxmemory_policy)
    if stack.topology.redis_cluster:
        argv = stack_redis.redis_cluster_argv(
            server, layout.at, layout.data_dir, *memory, settings.redis_cluster_node_timeout_ms
        )
    else:
        argv = stack_redis.redis_argv(server, layout.at, layout.data_dir, *memory)
    if stack.topology.secure:
        # The ACL user's password goes in a file of mode 600 (redis-server's first argument), not on its command line.
        acl = stack.conf / "redis-secure.conf"
        stack_secure.write_private(acl, stack_secure.redis_acl_config(stack.credentials()))
        argv = [argv[0], str(acl), *argv[1:]]
    pid = proc.start(argv, cwd=stack.root)
    echo(f"started {proc.name} on {layout.at} (pid {pid}), log {proc.log_file}")
    return lambda: pid_alive(pid)


def refuse_taken_ports(stack: Stack) -> None:
    """Fail before anything starts when a port of a node that is not running is taken by someone else."""
    for kafka in stack.kafka_nodes:
        if kafka.proc.pid() is None:
            _refuse_taken_ports([kafka.node.broker, kafka.node.controller])
    for redis in stack.redis_nodes:
        if redis.proc.pid() is None:
            _refuse_taken_ports(_redis_ports(stack, redis), _SYSTEM_REDIS_HINT)


def _redis_ports(stack: Stack, layout: RedisLayout) -> list[Endpoint]:
    bus = [Endpoint(layout.at.host, layout.at.port + REDIS_BUS_OFFSET)] if stack.topology.redis_cluster else []
    return [layout.at, *bus]


def _already_running(proc: Managed, echo: Echo) -> Alive | None:
    running = proc.pid()
    if running is None:
        return None
    echo(f"{proc.name} already running (pid {running})")
    return lambda: proc.pid() is not None


def _refuse_taken_ports(endpoints: list[Endpoint], hint: str = "") -> None:
    for endpoint in endpoints:
        if port_open(endpoint.host, endpoint.port):
            raise StackError(f"something that is not ours already listens on {endpoint}{hint}; stop it first")
