"""Kafka of the local stack: jars from Maven Central, KRaft nodes that are broker and controller both.

The jars are fetched with `mvn dependency:copy-dependencies` from compose/kafka/pom.xml,
where the Kafka version is pinned; a stamp of the pom's hash next to them triggers a
re-fetch when the pom changes. A single node's storage is formatted once with
`kafka.tools.StorageTool format --standalone` (a dynamic KRaft quorum of this one node).
Several nodes form a static quorum: every node lists all of them in `controller.quorum.voters`
and is formatted with the same cluster id and no quorum flag. (Kafka 3.9 could also format a
dynamic quorum with `--initial-controllers`, which needs each node's directory id up front; the
static one needs nothing but the ports and survives a node's restart the same way.)
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from fleet_dev.stack.proc import Endpoint, StackError, loopback_endpoint
from fleet_dev.stack.topology import KafkaNode

POM = Path(__file__).resolve().parents[2] / "compose" / "kafka" / "pom.xml"
KAFKA_MAIN = "kafka.Kafka"
STORAGE_TOOL = "kafka.tools.StorageTool"
NODE_ID = 1
_STAMP = ".pom-sha256"


def parse_bootstrap(bootstrap: str) -> Endpoint:
    """The broker's listen address from `kafka_bootstrap` (its first host:port)."""
    first = bootstrap.split(",")[0].strip()
    host, sep, port = first.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise StackError(f"kafka_bootstrap {bootstrap!r} is not host:port")
    return loopback_endpoint(host.strip("[]"), int(port), "kafka_bootstrap")


def render_server_properties(broker: Endpoint, controller_port: int, log_dir: Path, partitions: int,
                             *, listener: str = "PLAINTEXT", overrides: dict[str, str] | None = None) -> str:
    """server.properties of a single node acting as broker and KRaft controller; `listener` names
    the client listener and `overrides` replace or add properties (the secure stack's SASL ones)."""
    if controller_port == broker.port:
        raise StackError(f"kafka controller port {controller_port} equals the broker port")
    node = KafkaNode(NODE_ID, broker, Endpoint(broker.host, controller_port))
    quorum = {"controller.quorum.bootstrap.servers": str(node.controller)}
    props = _node_properties(node, quorum, log_dir, partitions, Replication(1, 1), listener)
    return _render({**props, **(overrides or {})})


@dataclass(frozen=True)
class Replication:
    """How many copies of each partition the brokers keep, and how many must have a write for acks=all."""

    factor: int
    min_insync: int


# A SIGKILLed node is fenced (its partitions get new leaders) after the session timeout; Kafka's
# 9 s default makes every failover test wait that long, 6 s still leaves room for GC pauses.
CLUSTER_TIMEOUTS = {"broker.heartbeat.interval.ms": "1000", "broker.session.timeout.ms": "6000"}


def render_cluster_node_properties(
    node: KafkaNode, voters: Sequence[KafkaNode], log_dir: Path, partitions: int, replication: Replication
) -> str:
    """server.properties of one node of a KRaft quorum of broker+controller nodes (static voters)."""
    if node not in voters:
        raise StackError(f"kafka node {node.node_id} is not one of the quorum's voters")
    quorum = {"controller.quorum.voters": ",".join(voter.voter for voter in voters)}
    props = _node_properties(node, quorum, log_dir, partitions, replication)
    return _render({**props, **CLUSTER_TIMEOUTS})


def _node_properties(
    node: KafkaNode, quorum: dict[str, str], log_dir: Path, partitions: int, replication: Replication,
    listener: str = "PLAINTEXT",
) -> dict[str, str]:
    listeners = f"{listener}://{node.broker},CONTROLLER://{node.controller}"
    return {
        "process.roles": "broker,controller",
        "node.id": str(node.node_id),
        **quorum,
        "listeners": listeners,
        "advertised.listeners": listeners,
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "controller.listener.names": "CONTROLLER",
        "log.dirs": str(log_dir),
        "num.partitions": str(partitions),
        "default.replication.factor": str(replication.factor),
        "min.insync.replicas": str(replication.min_insync),
        "offsets.topic.replication.factor": str(replication.factor),
        "offsets.topic.num.partitions": str(partitions),
        "transaction.state.log.replication.factor": str(replication.factor),
        "transaction.state.log.min.isr": str(replication.min_insync),
        # Kafka's 50 would be created at the first transaction (exactly-once lanes), holding up its start.
        "transaction.state.log.num.partitions": str(partitions),
        # A producer that died inside a transaction holds read_committed readers of its partitions until the
        # coordinator aborts it: at its timeout (20 s, workers/assembly.py), found by a scan every 10 s by default.
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
        "group.initial.rebalance.delay.ms": "0",
        "auto.create.topics.enable": "false",  # the fleet creates the topics it needs (issue 13)
        "delete.topic.enable": "true",
        "num.network.threads": "2",
        "num.io.threads": "4",
        "log.retention.hours": "24",
        "log.segment.bytes": str(64 * 1024 * 1024),
    }


def _render(props: dict[str, str]) -> str:
    lines = ["# Written by fleet_dev.stack.cli on every `up`; edit fleet_dev/stack/kafka_server.py instead."]
    lines += [f"{key}={value}" for key, value in props.items()]
    return "\n".join(lines) + "\n"


def render_log4j(log_dir: Path) -> str:
    """log4j 1.x (reload4j) configuration: everything to <log_dir>/server.log, rolled."""
    return "\n".join(
        [
            "log4j.rootLogger=INFO, server",
            "log4j.appender.server=org.apache.log4j.RollingFileAppender",
            f"log4j.appender.server.File={log_dir / 'server.log'}",
            "log4j.appender.server.MaxFileSize=20MB",
            "log4j.appender.server.MaxBackupIndex=3",
            "log4j.appender.server.layout=org.apache.log4j.PatternLayout",
            "log4j.appender.server.layout.ConversionPattern=[%d] %p %m (%c)%n",
            "log4j.logger.kafka.request.logger=WARN",
            "log4j.logger.state.change.logger=WARN",
            "log4j.logger.kafka.log.LogCleaner=WARN",
            "",
        ]
    )


def new_cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes, URL-safe base64 without padding, not starting with '-'."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def java_binary() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        return str(Path(java_home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise StackError("java not found: install a Java 17+ runtime (e.g. apt-get install openjdk-17-jre-headless)")
    return found


def java_argv(libs: Path, log4j: Path, main: str, *args: str, heap: tuple[str, str] | None = None) -> list[str]:
    """A JVM running `main` from the fetched jars (Java expands the `dir/*` class path itself)."""
    argv = [java_binary()]
    if heap is not None:
        argv += [f"-Xms{heap[0]}", f"-Xmx{heap[1]}", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20"]
    argv += ["-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true", f"-Dlog4j.configuration=file:{log4j}"]
    return [*argv, "-cp", f"{libs}/*", main, *args]


def jars_ready(libs: Path, pom: Path = POM) -> bool:
    stamp = libs / _STAMP
    return stamp.is_file() and stamp.read_text().strip() == _sha256(pom) and any(libs.glob("kafka_2.13-*.jar"))


def fetch_jars(libs: Path, echo: Callable[[str], None], pom: Path = POM) -> None:
    """Fetch the pinned Kafka jars into `libs` with Maven (atomically: a partial fetch never counts)."""
    if not pom.is_file():
        raise StackError(f"{pom} is missing: run from a checkout of the repository")
    mvn = shutil.which("mvn")
    if mvn is None:
        raise StackError("mvn not found: install Maven (apt-get install maven) to fetch the Kafka jars")
    partial = libs.with_name(libs.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    argv = [mvn, "-B", "-f", str(pom), "dependency:copy-dependencies", f"-DoutputDirectory={partial}"]
    echo(f"fetching Kafka jars with Maven ({pom.relative_to(pom.parents[2])}) into {libs}")
    tail: deque[str] = deque(maxlen=60)
    downloaded = 0
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            tail.append(line.rstrip())
            if "Downloaded from" in line:
                downloaded += 1
                if downloaded % 25 == 0:
                    echo(f"  mvn: {downloaded} files downloaded ...")
            elif "BUILD" in line or "[ERROR]" in line:
                echo(f"  mvn: {line.strip()}")
    if proc.returncode != 0:
        raise StackError("mvn failed:\n" + "\n".join(tail))
    jars = sorted(partial.glob("*.jar"))
    if not any(jar.name.startswith("kafka_2.13-") for jar in jars):
        raise StackError(f"mvn finished but no kafka_2.13 jar is in {partial}")
    (partial / _STAMP).write_text(_sha256(pom) + "\n")
    shutil.rmtree(libs, ignore_errors=True)
    partial.rename(libs)
    echo(f"  {len(jars)} jars ({downloaded} files downloaded), Kafka {kafka_version(libs)}")


def kafka_version(libs: Path) -> str:
    for jar in libs.glob("kafka_2.13-*.jar"):
        return jar.name.removeprefix("kafka_2.13-").removesuffix(".jar")
    return "unknown"


def is_formatted(log_dir: Path) -> bool:
    return (log_dir / "meta.properties").is_file()


def formatted_cluster_id(log_dir: Path) -> str | None:
    """The cluster id a formatted log dir belongs to (from its meta.properties), or None."""
    try:
        lines = (log_dir / "meta.properties").read_text().splitlines()
    except FileNotFoundError:
        return None
    for line in lines:
        key, sep, value = line.partition("=")
        if sep and key.strip() == "cluster.id":
            return value.strip()
    return None


def format_storage(
    libs: Path, log4j: Path, server_properties: Path, log_file: Path, *, cluster_id: str | None = None,
    secret_args: Sequence[str] = (),
) -> str:
    """Format a node's log dir once; returns its cluster id (a new one unless `cluster_id` is given).

    Without `cluster_id` the node is formatted as a standalone (one-voter, dynamic) quorum; with
    it, as one of the static voters that its server.properties lists. `secret_args` (the SCRAM
    user) are passed on but never written to the log.
    """
    quorum = ["--standalone"] if cluster_id is None else []
    cluster_id = cluster_id or new_cluster_id()
    argv = java_argv(libs, log4j, STORAGE_TOOL, "format", *quorum, "-t", cluster_id, "-c", str(server_properties))
    result = subprocess.run([*argv, *secret_args], capture_output=True, text=True, check=False)
    log_file.parent.mkdir(parents=True, exist_ok=True)
    hidden = f" ({len(secret_args)} secret arguments not shown)" if secret_args else ""
    with log_file.open("a") as log:
        log.write(f"$ {' '.join(argv)}{hidden}\n{result.stdout}{result.stderr}")
    if result.returncode != 0:
        raise StackError(f"formatting Kafka storage failed (see {log_file}):\n{result.stdout}{result.stderr}")
    return cluster_id


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
