"""The local stack: real Kafka (KRaft) and real Redis, no Docker needed.

    python -m fleet_dev.stack up                      # one Kafka node and one Redis (the default)
    python -m fleet_dev.stack up --brokers 3          # a 3-node KRaft quorum, replication factor 3
    python -m fleet_dev.stack up --redis-cluster      # 3 Redis masters with one replica each
    python -m fleet_dev.stack up --secure             # Kafka with SASL/SCRAM, Redis with an ACL user
                                                  # (credentials: <home>/stack/secure.env, mode 600)
    python -m fleet_dev.stack status                  # every node: pid, answers; leaders, ISR, slots
    python -m fleet_dev.stack down [--wipe]           # stop what `up` started; --wipe also deletes the data

Base ports come from the shared settings (FLEET_KAFKA_BOOTSTRAP, FLEET_KAFKA_CONTROLLER_PORT,
FLEET_REDIS_URL; fleet_dev/stack/topology.py says how the nodes of a cluster are numbered from
them); everything the stack writes lives under <home>/stack/ (FLEET_HOME, default .fleet in the
working directory), laid out as fleet_dev/stack/layout.py says. `up` records the topology it
started, so `status` and `down` need no flags.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import shutil
import sys

from fleet_dev.stack import kafka_cluster, redis_cluster, topology as stack_topology
from fleet_dev.stack.launch import Alive, refuse_taken_ports, start_kafka_node, start_redis_node
from fleet_dev.stack.layout import Stack, StackSettings
from fleet_dev.stack.proc import StackError, stop_all
from fleet_dev.stack.readiness import Echo, ProcessExited, answers, wait_for_kafka, wait_for_redis
from fleet_dev.stack.report import cluster_status
from fleet_dev.stack.topology import REDIS_CLUSTER_REPLICAS_PER_MASTER

__all__ = ["ProcessExited", "Stack", "StackSettings", "down", "status", "up", "wait_for_kafka", "wait_for_redis"]


def up(settings: StackSettings, echo: Echo = print, *, brokers: int = 1, redis_cluster: bool = False,
       secure: bool = False) -> Stack:
    """Start every node of the stack unless it runs already, then wait until all of them answer."""
    stack = Stack.planned(settings, brokers=brokers, redis_cluster=redis_cluster, secure=secure)
    _refuse_another_running_topology(stack)
    refuse_taken_ports(stack)
    stack_topology.save(stack.topology_file, stack.topology)  # first, so `down` finds a half-started stack
    kafka_alive = [start_kafka_node(stack, layout, echo) for layout in stack.kafka_nodes]
    redis_alive = [start_redis_node(stack, layout, echo) for layout in stack.redis_nodes]
    timeout = settings.stack_start_timeout_s
    echo(f"waiting for {stack.topology.describe()} to answer (up to {timeout:.0f}s)")
    try:
        asyncio.run(_wait_ready(stack, kafka_alive, redis_alive, echo))
    except StackError as exc:
        for proc in stack.processes():
            echo(f"--- last lines of {proc.log_file} ---\n{proc.log_tail()}")
        echo(f"(kafka's own logs: {stack.logs}/kafka*/server.log)")
        raise StackError(f"{exc}\nthe stack is not ready; `scripts/stack down` stops what was started") from exc
    _report_ready(stack, echo)
    return stack


def _refuse_another_running_topology(stack: Stack) -> None:
    running = Stack.recorded(stack.settings)
    if running.topology == stack.topology:
        return
    alive = [proc.name for proc in running.processes() if proc.pid() is not None]
    if alive:
        raise StackError(
            f"the stack already runs as {running.topology.describe()} ({', '.join(alive)}); "
            "`scripts/stack down` it first"
        )


async def _wait_ready(stack: Stack, kafka_alive: list[Alive], redis_alive: list[Alive], echo: Echo) -> None:
    await asyncio.gather(_wait_kafka_ready(stack, kafka_alive, echo), _wait_redis_ready(stack, redis_alive, echo))


async def _wait_kafka_ready(stack: Stack, kafka_alive: list[Alive], echo: Echo) -> None:
    timeout = stack.settings.stack_start_timeout_s
    await wait_for_kafka(
        stack.client_settings().model_copy(update={"kafka_bootstrap": stack.topology.bootstrap}),
        timeout,
        brokers=len(kafka_alive),
        alive=lambda: all(alive() for alive in kafka_alive),
        progress=echo,
    )
    if stack.topology.kafka_cluster:  # a restarted quorum: every node back in every ISR
        await kafka_cluster.wait_in_sync(stack.topology.kafka, timeout, progress=echo)


async def _wait_redis_ready(stack: Stack, redis_alive: list[Alive], echo: Echo) -> None:
    timeout = stack.settings.stack_start_timeout_s
    if not stack.topology.redis_cluster:
        await wait_for_redis(stack.client_settings(), timeout, alive=redis_alive[0], progress=echo)
        return
    nodes = stack.topology.redis
    await asyncio.gather(
        *(
            wait_for_redis(stack.settings.model_copy(update={"redis_url": f"redis://{node}/0"}), timeout,
                           alive=alive, progress=echo)
            for node, alive in zip(nodes, redis_alive, strict=True)
        )
    )
    await redis_cluster.ensure_cluster(nodes, REDIS_CLUSTER_REPLICAS_PER_MASTER, echo)
    await redis_cluster.wait_cluster_whole(nodes, timeout, progress=echo)


def _report_ready(stack: Stack, echo: Echo) -> None:
    cluster = stack.topology.kafka_cluster or stack.topology.redis_cluster
    for kafka in stack.kafka_nodes:
        where = f"{kafka.node.broker} (controller {kafka.node.controller.port})" if cluster else str(kafka.node.broker)
        echo(f"{kafka.proc.name:6} {where}  pid {kafka.proc.pid()}  ready")
    for redis in stack.redis_nodes:
        echo(f"{redis.proc.name:6} {redis.at}  pid {redis.proc.pid()}  ready")
    echo(f"logs: {stack.logs}   data: {stack.data}   jars: {stack.libs}")
    if stack.topology.secure:
        echo(f"secured: the fleet's processes need the credentials in {stack.credentials_file} (mode 600):")
        echo(f"  source {stack.credentials_file}")
    if cluster:
        echo("the fleet's processes find this stack with:")
        for line in stack.topology.env_lines():
            echo(f"  {line}")


def down(settings: StackSettings, wipe: bool = False, echo: Echo = print) -> None:
    """Stop the servers `up` started (by their pid files); `wipe` also deletes the data folder."""
    stack = Stack.recorded(settings)
    processes = stack.processes()
    for proc, pid in zip(processes, stop_all(processes, settings.stack_stop_timeout_s), strict=True):
        echo(f"{proc.name}: stopped (pid {pid})" if pid is not None else f"{proc.name}: not running")
    stack.topology_file.unlink(missing_ok=True)
    if wipe and stack.data.exists():
        shutil.rmtree(stack.data)
        echo(f"wiped {stack.data}")


def status(settings: StackSettings, echo: Echo = print) -> bool:
    """Print each server's state; True when all run (ours), answer, and nothing is under-replicated."""
    stack = Stack.recorded(settings)
    if stack.topology.kafka_cluster or stack.topology.redis_cluster:
        return asyncio.run(cluster_status(stack, echo))
    [kafka], [redis] = stack.kafka_nodes, stack.redis_nodes
    reach = stack.client_settings()

    async def probe() -> tuple[bool, bool]:
        kafka_ok, redis_ok = await asyncio.gather(
            answers(wait_for_kafka(reach, 3.0)), answers(wait_for_redis(reach, 3.0))
        )
        return kafka_ok, redis_ok

    healthy = True
    for proc, endpoint, answer in zip(
        (kafka.proc, redis.proc), (kafka.node.broker, redis.at), asyncio.run(probe()), strict=True
    ):
        pid = proc.pid()
        state = f"running (pid {pid})" if pid is not None else "not running"
        echo(f"{proc.name:6} {str(endpoint):16} {state:22} {'answers' if answer else 'does not answer'}")
        healthy = healthy and pid is not None and answer
    echo(f"logs: {stack.logs}   data: {stack.data}")
    return healthy


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/stack", description="The local stack: Kafka (KRaft) and Redis."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    start = commands.add_parser("up", help="start Kafka and Redis (idempotent) and wait until they answer")
    start.add_argument("--brokers", type=int, default=1, metavar="N",
                       help="Kafka nodes (broker+controller each); 3 gives replication factor 3, min ISR 2")
    start.add_argument("--redis-cluster", action="store_true", help="a Redis Cluster: 3 masters, 1 replica each")
    start.add_argument("--secure", action="store_true", help="Kafka behind SASL/SCRAM-SHA-512 and Redis behind an "
                       "ACL user; credentials in <home>/stack/secure.env (single node only)")
    wipe = commands.add_parser("down", help="stop every node this stack started")
    wipe.add_argument("--wipe", action="store_true", help="also delete the data folder")
    commands.add_parser("status", help="show every node, partition leaders and ISR, Redis roles and slots")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # connection refusals while waiting are expected
    echo: Echo = lambda line: print(line, flush=True)  # noqa: E731
    try:
        settings = StackSettings()
        if args.command == "up":
            up(settings, echo, brokers=args.brokers, redis_cluster=args.redis_cluster, secure=args.secure)
        elif args.command == "down":
            down(settings, args.wipe, echo)
        else:
            return 0 if status(settings, echo) else 1
    except StackError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
