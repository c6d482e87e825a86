"""A test's own multi-node stack, started with the real CLI (`python -m fleet_dev.stack`): a temporary
FLEET_HOME, ports away from the shared stack that are free right now, and the Kafka jars of the
usual stack linked in rather than fetched again. Never the developer's stack on the default ports.

    share_jars(home)
    cli = StackCli(home, brokers=1)        # picks the ports; cli.env is the environment of the CLI
    cli("up", "--redis-cluster")
    ...
    cli("down", "--wipe", check=False)
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from fleet_dev.stack import kafka_server, topology
from fleet_dev.stack.layout import StackSettings
from fleet_dev.stack.proc import Endpoint, port_open
from tests.paths import REPO_ROOT as ROOT


def free_ports(*, brokers: int = 3, first_shift: int = 0, redis_base: int = 19379) -> dict[str, str]:
    """FLEET_* port settings of a `brokers`-node Kafka + Redis Cluster whose every port is free now.
    Tests that may run at the same time start from different `first_shift`s. A Redis node's cluster
    bus listens on its port + 10000: with `redis_base` below 22768 that stays under Linux's
    ephemeral range (32768-60999), where a client socket of the moment can hold the port."""
    for shift in range(first_shift, first_shift + 2000, 100):
        kafka, redis = Endpoint("127.0.0.1", 29092 + shift), Endpoint("127.0.0.1", redis_base + shift)
        plan = topology.plan(kafka, kafka.port + 1, redis, brokers=brokers, redis_cluster=True)
        if not any(port_open("127.0.0.1", port, 0.2) for port in plan.ports()):
            return {
                "FLEET_KAFKA_BOOTSTRAP": str(kafka),
                "FLEET_KAFKA_CONTROLLER_PORT": str(kafka.port + 1),
                "FLEET_REDIS_URL": f"redis://{redis}/0",
            }
    raise AssertionError("no free ports for a test cluster")


def share_jars(home: Path) -> None:
    """Reuse the jars of the usual stack when they match the pom (else `up` fetches them with Maven)."""
    libs = StackSettings().home.resolve() / "stack" / "kafka-libs"
    if kafka_server.jars_ready(libs):
        (home / "stack").mkdir(parents=True)
        (home / "stack" / "kafka-libs").symlink_to(libs)


class StackCli:
    """`python -m fleet_dev.stack` with this test's environment, and the timings of each step."""

    def __init__(self, home: Path, *, brokers: int = 3, first_shift: int = 0, redis_base: int = 19379) -> None:
        ports = free_ports(brokers=brokers, first_shift=first_shift, redis_base=redis_base)
        self.env = {**os.environ, **ports, "FLEET_HOME": str(home), "FLEET_KAFKA_NODE_HEAP_MAX": "384m"}
        self.timings: dict[str, float] = {}

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "fleet_dev.stack", *args]
        done = subprocess.run(argv, cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=180, check=False)
        if check:
            assert done.returncode == 0, f"{' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
        return done

    def settings(self) -> StackSettings:
        return StackSettings(
            home=Path(self.env["FLEET_HOME"]),
            kafka_bootstrap=self.env["FLEET_KAFKA_BOOTSTRAP"],
            kafka_controller_port=int(self.env["FLEET_KAFKA_CONTROLLER_PORT"]),
            redis_url=self.env["FLEET_REDIS_URL"],
        )
