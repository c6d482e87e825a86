"""The chaos run's own Kafka and Redis: never the developer's stack.

It lives under <home>/chaos (its own data, logs and pid files) on its own ports (Kafka 19092 with
controller 19093, Redis 16379 by default), is started and stopped with fleet_dev.stack's functions,
wiped before and after the run, and its nodes are stopped, crashed, paused and restarted here.
The fleet's processes find it through the FLEET_* variables `env()` returns; any FLEET_* variable
of the caller's shell is left out, so the run is the same on every machine.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from common.settings import FleetSettings
from fleet_dev.stack import cli as stack_cli, kafka_server
from fleet_dev.stack.launch import start_kafka_node, start_redis_node
from fleet_dev.stack.layout import Stack, StackSettings
from fleet_dev.stack.proc import StackError, stop_all
from fleet_dev.stack.readiness import wait_for_kafka, wait_for_redis

Echo = Callable[[str], None]
DEFAULT_KAFKA_PORT = 19092
DEFAULT_REDIS_PORT = 16379
STOP_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Ports:
    kafka: int = DEFAULT_KAFKA_PORT
    redis: int = DEFAULT_REDIS_PORT

    @property
    def controller(self) -> int:
        return self.kafka + 1


def chaos_home(caller: FleetSettings) -> Path:
    return caller.home.resolve() / "chaos"


class ChaosStack:
    def __init__(self, caller: FleetSettings, ports: Ports, *, brokers: int = 1, redis_cluster: bool = False,
                 echo: Echo = print) -> None:
        self.home = chaos_home(caller)
        self.model_dir = caller.registry_dir.resolve()
        self._caller_libs = caller.home.resolve() / "stack" / "kafka-libs"
        self.brokers = brokers
        self.redis_cluster = redis_cluster
        self.echo = echo
        self.settings = StackSettings(home=self.home, kafka_bootstrap=f"127.0.0.1:{ports.kafka}",
                                      kafka_controller_port=ports.controller,
                                      redis_url=f"redis://127.0.0.1:{ports.redis}/0",
                                      kafka_node_heap_max="384m", kafka_heap_max="512m")

    @property
    def stack(self) -> Stack:
        return Stack.recorded(self.settings)

    @property
    def bootstrap(self) -> str:
        """Every broker, known before `up` (the fleet's environment is written before the stack starts)."""
        return Stack.planned(self.settings, brokers=self.brokers).topology.bootstrap

    @property
    def redis_url(self) -> str:
        return self.settings.redis_url

    @property
    def client_settings(self) -> FleetSettings:
        """What the chaos harness's own clients connect with: every broker of this stack."""
        return self.settings.model_copy(update={"kafka_bootstrap": self.bootstrap, "redis_cluster": self.redis_cluster})

    def env(self) -> dict[str, str]:
        """The environment of the fleet's processes: the caller's, minus its FLEET_*, plus this stack's."""
        kept = {name: value for name, value in os.environ.items() if not name.startswith("FLEET_")}
        return {**kept, "FLEET_HOME": str(self.home), "FLEET_KAFKA_BOOTSTRAP": self.bootstrap,
                "FLEET_REDIS_URL": self.redis_url, "FLEET_MODEL_DIR": str(self.model_dir),
                "FLEET_REDIS_CLUSTER": "true" if self.redis_cluster else "false",
                # On the cluster's replicated shards, no result is committed before a replica holds it.
                "FLEET_REDIS_WAIT_REPLICAS": "1" if self.redis_cluster else "0"}

    def up(self) -> None:
        """Start from nothing: stop and wipe what an earlier, interrupted run may have left, then `up`."""
        self.down(quiet=True)
        self._share_jars()
        stack_cli.up(self.settings, _indented(self.echo), brokers=self.brokers, redis_cluster=self.redis_cluster)

    def down(self, *, quiet: bool = False) -> None:
        self.resume_paused()
        stack_cli.down(self.settings, wipe=True, echo=(lambda line: None) if quiet else _indented(self.echo))

    def _share_jars(self) -> None:
        """The developer's stack fetched the jars already: link them rather than fetch them again."""
        libs = self.home / "stack" / "kafka-libs"
        if libs.exists() or libs.is_symlink():
            return
        if kafka_server.jars_ready(self._caller_libs):
            libs.parent.mkdir(parents=True, exist_ok=True)
            libs.symlink_to(self._caller_libs)

    # --- the faults -------------------------------------------------------------------------

    def stop_kafka(self) -> None:
        """Stop every Kafka node (SIGTERM: a controlled shutdown, as an orchestrator's restart does;
        the nodes of a quorum together, see fleet_dev.stack.proc.stop_all)."""
        stop_all([node.proc for node in self.stack.kafka_nodes], STOP_TIMEOUT_S)

    async def start_kafka(self) -> None:
        stack = self.stack
        for node in stack.kafka_nodes:
            start_kafka_node(stack, node, lambda line: None)
        await wait_for_kafka(self.client_settings, self.settings.stack_start_timeout_s,
                             brokers=len(stack.kafka_nodes))

    def stop_redis(self) -> None:
        self.resume_paused()
        for node in self.stack.redis_nodes:
            node.proc.stop(STOP_TIMEOUT_S)

    async def start_redis(self) -> None:
        stack = self.stack
        for node in stack.redis_nodes:
            start_redis_node(stack, node, lambda line: None)
        await wait_for_redis(self.settings, self.settings.stack_start_timeout_s)

    def redis_pids(self) -> list[int]:
        pids = [node.proc.pid() for node in self.stack.redis_nodes]
        if None in pids:
            raise StackError("the chaos stack's Redis does not run")
        return [pid for pid in pids if pid is not None]

    def pause_redis(self) -> None:
        """SIGSTOP: Redis keeps its connections open and answers nothing, like a hung server."""
        for pid in self.redis_pids():
            os.kill(pid, signal.SIGSTOP)

    def resume_paused(self) -> None:
        """SIGCONT to every Redis node (harmless when none is stopped); teardown calls it too, since a
        stopped process would not hear `down`'s SIGTERM."""
        for node in self.stack.redis_nodes:
            pid = node.proc.pid()
            if pid is not None:
                os.kill(pid, signal.SIGCONT)


def _indented(echo: Echo) -> Echo:
    return lambda line: echo(f"    {line}")

