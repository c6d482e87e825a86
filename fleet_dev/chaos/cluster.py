"""`--cluster` (issue 15): against a stack of 3 Kafka nodes and a Redis Cluster (3 masters, one replica
each), under load: SIGKILL the Kafka node that leads most request partitions, bring it back and show
that it rejoined (every partition fully in sync); then SIGKILL the Redis master that holds the load
client's reply stream, see its replica take over, bring the node back and show it serves again as a
replica."""

from __future__ import annotations

import time

from fleet_dev.chaos.report import ScenarioReport
from fleet_dev.chaos.scenarios import Run, Scenario, Window
from fleet_dev.stack import kafka_cluster, nodes
from fleet_dev.stack.proc import StackError
from schemas.names import requests_topic

CLUSTER_BROKERS = 3


class LeaderKill:
    """The scenario's two steps share the node they act on."""

    def __init__(self) -> None:
        self.node_id: int | None = None

    async def fault(self, run: Run, report: ScenarioReport) -> Window:
        stack = run.stack.stack
        topic = requests_topic(run.model)
        view = await kafka_cluster.cluster_view(stack.topology.bootstrap, [topic])
        self.node_id = kafka_cluster.busiest_leader(view.partitions, topic)
        led = kafka_cluster.leaders(view.partitions, topic)[self.node_id]
        at = time.monotonic()
        pid = nodes.kill_kafka_node(stack, self.node_id)
        report.notes.append(f"SIGKILLed Kafka node {self.node_id} (pid {pid}), leader of {led} of "
                            f"{len(view.partitions)} partitions of {topic}")
        return at, at

    async def recover(self, run: Run, report: ScenarioReport) -> None:
        if self.node_id is None:
            return
        stack = run.stack.stack
        began = time.monotonic()
        try:
            await nodes.restart_kafka_node(stack, self.node_id)
        except StackError as exc:
            report.notes.append(f"node {self.node_id} did not rejoin: {exc}")
        view = await kafka_cluster.cluster_view(stack.topology.bootstrap)
        lagging = view.lagging()
        report.notes.append(f"node {self.node_id} restarted and rejoined in {time.monotonic() - began:.1f} s: live "
                            f"brokers {sorted(view.brokers)}, under-replicated or offline partitions: {len(lagging)}")
        report.checks[f"node {self.node_id} rejoined, 0 under-replicated partitions"] = (
            self.node_id in view.brokers and not lagging)
        if lagging:
            report.notes.append(f"still lagging: {[f'{p.topic}[{p.partition}]' for p in lagging[:5]]}")


class MasterKill:
    """SIGKILL the Redis master of the load client's reply stream; its replica must take over."""

    def __init__(self) -> None:
        self.port: int | None = None

    async def fault(self, run: Run, report: ScenarioReport) -> Window:
        stack = run.stack.stack
        stream = run.load.client.waiter.stream
        victim = await nodes.redis_master_of_key(stack, stream)
        at = time.monotonic()
        pid = nodes.kill_redis_node(stack, victim.port)
        self.port = victim.port
        report.notes.append(f"SIGKILLed the Redis master on port {victim.port} (pid {pid}), holder of {stream}")
        await nodes.wait_redis_failover(stack, victim.port)
        promoted = await nodes.redis_master_of_key(stack, stream)
        report.notes.append(f"its replica on port {promoted.port} took over after {time.monotonic() - at:.1f} s")
        return at, at

    async def recover(self, run: Run, report: ScenarioReport) -> None:
        if self.port is None:
            return
        stack = run.stack.stack
        began = time.monotonic()
        try:
            await nodes.restart_redis_node(stack, self.port)
        except StackError as exc:
            report.notes.append(f"Redis node {self.port} did not rejoin: {exc}")
            report.checks[f"Redis node {self.port} rejoined"] = False
            return
        report.notes.append(f"Redis node {self.port} restarted and rejoined in {time.monotonic() - began:.1f} s")
        report.checks[f"Redis node {self.port} rejoined"] = True


def cluster_scenarios() -> tuple[Scenario, ...]:
    kill, master = LeaderKill(), MasterKill()
    return (Scenario("kafka-leader-kill", kill.fault, kill.recover),
            Scenario("redis-master-kill", master.fault, master.recover))
