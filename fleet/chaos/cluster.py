"""`--cluster` (issue 15): against a stack of 3 Kafka nodes, SIGKILL the node that leads most request
partitions under load, then bring it back and show that it rejoined (every partition fully in sync)."""

from __future__ import annotations

import time

from fleet.chaos.report import ScenarioReport
from fleet.chaos.scenarios import Run, Scenario, Window
from fleet.stack import kafka_cluster, nodes
from fleet.stack.proc import StackError
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


def cluster_scenarios() -> tuple[Scenario, ...]:
    kill = LeaderKill()
    return (Scenario("kafka-leader-kill", kill.fault, kill.recover),)
