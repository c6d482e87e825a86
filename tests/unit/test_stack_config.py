"""Pure logic of the local stack: ports from the shared settings, rendered configuration, pid files."""

from __future__ import annotations

import base64
import os
import sys
from pathlib import Path

import pytest
from tenacity import Retrying, retry_if_result, stop_after_delay, wait_fixed

from fleet.stack import kafka_server as stack_kafka, redis_server as stack_redis
from fleet.stack.cli import Stack, StackSettings
from fleet.stack.proc import Endpoint, Managed, StackError


def _props(text: str) -> dict[str, str]:
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    return dict(line.split("=", 1) for line in lines)


@pytest.mark.parametrize(
    ("bootstrap", "port"),
    [("127.0.0.1:9092", 9092), ("localhost:19092", 19092), (" 127.0.0.1:9094 ,127.0.0.1:9095", 9094)],
)
def test_parse_bootstrap(bootstrap: str, port: int) -> None:
    assert stack_kafka.parse_bootstrap(bootstrap) == Endpoint("127.0.0.1", port)


@pytest.mark.parametrize(
    "bootstrap", ["127.0.0.1", "127.0.0.1:x", ":9092", "kafka:9092", "10.0.0.5:9092", "127.0.0.1:0"]
)
def test_parse_bootstrap_rejects(bootstrap: str) -> None:
    with pytest.raises(StackError):
        stack_kafka.parse_bootstrap(bootstrap)


@pytest.mark.parametrize(
    ("url", "port"),
    [("redis://127.0.0.1:6379/0", 6379), ("redis://localhost/2", 6379), ("redis://127.0.0.1:6380", 6380)],
)
def test_parse_redis_url(url: str, port: int) -> None:
    assert stack_redis.parse_redis_url(url) == Endpoint("127.0.0.1", port)


@pytest.mark.parametrize("url", ["rediss://127.0.0.1:6379/0", "redis://redis:6379/0", "redis://127.0.0.1:99999/0"])
def test_parse_redis_url_rejects(url: str) -> None:
    with pytest.raises(StackError):
        stack_redis.parse_redis_url(url)


def test_server_properties_single_node_kraft_on_loopback(tmp_path: Path) -> None:
    props = _props(stack_kafka.render_server_properties(Endpoint("127.0.0.1", 9092), 9093, tmp_path / "kafka", 4))
    assert props["process.roles"] == "broker,controller"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"
    assert props["advertised.listeners"].startswith("PLAINTEXT://127.0.0.1:9092")
    assert props["controller.listener.names"] == "CONTROLLER"
    assert props["controller.quorum.bootstrap.servers"] == "127.0.0.1:9093"
    assert "controller.quorum.voters" not in props  # --standalone formats a dynamic quorum
    assert props["log.dirs"] == str(tmp_path / "kafka")
    assert props["num.partitions"] == "4"
    assert props["offsets.topic.replication.factor"] == "1"
    assert props["transaction.state.log.replication.factor"] == "1"
    assert props["group.initial.rebalance.delay.ms"] == "0"
    assert props["auto.create.topics.enable"] == "true"


def test_server_properties_refuses_one_port_for_both(tmp_path: Path) -> None:
    with pytest.raises(StackError):
        stack_kafka.render_server_properties(Endpoint("127.0.0.1", 9092), 9092, tmp_path, 4)


def test_log4j_writes_to_a_file(tmp_path: Path) -> None:
    props = _props(stack_kafka.render_log4j(tmp_path))
    assert props["log4j.rootLogger"] == "INFO, server"
    assert props["log4j.appender.server.File"] == str(tmp_path / "server.log")


def test_cluster_id_is_a_kafka_uuid() -> None:
    ids = {stack_kafka.new_cluster_id() for _ in range(200)}
    assert len(ids) == 200
    for cluster_id in ids:
        assert len(cluster_id) == 22 and not cluster_id.startswith("-")
        assert len(base64.urlsafe_b64decode(cluster_id + "==")) == 16


def test_java_argv_uses_the_jar_folder_and_log4j_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stack_kafka, "java_binary", lambda: "/usr/bin/java")
    argv = stack_kafka.java_argv(
        tmp_path, tmp_path / "log4j.properties", "kafka.Kafka", "s.properties", heap=("1m", "2m")
    )
    assert argv[0] == "/usr/bin/java" and "-Xms1m" in argv and "-Xmx2m" in argv
    assert f"-Dlog4j.configuration=file:{tmp_path / 'log4j.properties'}" in argv
    assert argv[-4:] == ["-cp", f"{tmp_path}/*", "kafka.Kafka", "s.properties"]


def test_jars_ready_follows_the_pom(tmp_path: Path) -> None:
    pom, libs = tmp_path / "pom.xml", tmp_path / "libs"
    pom.write_text("<project>1</project>")
    libs.mkdir()
    (libs / "kafka_2.13-3.9.2.jar").write_bytes(b"")
    assert not stack_kafka.jars_ready(libs, pom)
    (libs / ".pom-sha256").write_text(stack_kafka._sha256(pom))
    assert stack_kafka.jars_ready(libs, pom)
    assert stack_kafka.kafka_version(libs) == "3.9.2"
    pom.write_text("<project>2</project>")
    assert not stack_kafka.jars_ready(libs, pom)


def test_redis_argv_no_persistence_bounded_memory(tmp_path: Path) -> None:
    argv = stack_redis.redis_argv("redis-server", Endpoint("127.0.0.1", 6380), tmp_path, "64mb", "allkeys-lru")
    pairs = dict(zip(argv[1::2], argv[2::2], strict=True))
    assert pairs["--bind"] == "127.0.0.1" and pairs["--port"] == "6380"
    assert pairs["--save"] == "" and pairs["--appendonly"] == "no"
    assert pairs["--maxmemory"] == "64mb" and pairs["--maxmemory-policy"] == "allkeys-lru"


def test_stack_takes_ports_and_home_from_the_shared_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEET_KAFKA_BOOTSTRAP", "localhost:19092")
    monkeypatch.setenv("FLEET_REDIS_URL", "redis://127.0.0.1:16379/0")
    monkeypatch.setenv("FLEET_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("FLEET_KAFKA_CONTROLLER_PORT", "19093")
    stack = Stack.of(StackSettings())
    assert stack.kafka_at == Endpoint("127.0.0.1", 19092)
    assert stack.redis_at == Endpoint("127.0.0.1", 16379)
    assert stack.settings.kafka_controller_port == 19093
    assert stack.root == tmp_path / "home" / "stack"
    assert stack.kafka.pid_file.parent == stack.redis.pid_file.parent == stack.root / "run"
    assert stack.kafka_data.is_relative_to(stack.data) and stack.redis_data.is_relative_to(stack.data)


def test_stack_settings_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in [key for key in os.environ if key.startswith("FLEET_")]:
        monkeypatch.delenv(key)
    settings = StackSettings()
    assert Stack.of(settings).kafka_at == Endpoint("127.0.0.1", 9092)
    assert settings.partitions == 4 and settings.kafka_controller_port == 9093
    assert settings.redis_maxmemory_policy == "volatile-lru"


def test_managed_pid_ignores_stale_and_foreign_pids(tmp_path: Path) -> None:
    managed = Managed("x", tmp_path / "x.pid", tmp_path / "x.log", ("fleet-test-marker",))
    assert managed.pid() is None
    managed.pid_file.write_text(f"{os.getpid()}\n")  # alive, but not started with our marker
    assert managed.pid() is None and not managed.pid_file.exists()
    managed.pid_file.write_text("not a pid\n")
    assert managed.pid() is None
    assert managed.stop(1.0) is None


def test_managed_start_and_stop(tmp_path: Path) -> None:
    marker = f"fleet-test-{os.getpid()}"
    managed = Managed("sleeper", tmp_path / "run" / "s.pid", tmp_path / "s.log", (marker,))
    code = f"import time  # {marker}\nprint('hello', flush=True)\ntime.sleep(60)"
    proc = managed.start([sys.executable, "-c", code], cwd=tmp_path)
    try:
        _wait_for_line(managed.log_file, "hello")
        assert managed.pid() == proc.pid
        assert managed.stop(5.0) == proc.pid
        assert proc.wait(5) != 0  # terminated by SIGTERM
        assert managed.pid() is None and not managed.pid_file.exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert managed.log_tail().splitlines() == ["hello"]


def test_managed_stop_escalates_to_sigkill(tmp_path: Path) -> None:
    marker = f"fleet-test-stubborn-{os.getpid()}"
    managed = Managed("stubborn", tmp_path / "s.pid", tmp_path / "s.log", (marker,))
    code = (
        f"import signal, time  # {marker}\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('ok', flush=True)\ntime.sleep(60)"
    )
    proc = managed.start([sys.executable, "-c", code], cwd=tmp_path)
    try:
        _wait_for_line(managed.log_file, "ok")
        assert managed.stop(0.5) == proc.pid
        assert proc.wait(5) == -9
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _wait_for_line(path: Path, text: str) -> None:
    def seen() -> bool:
        return path.exists() and text in path.read_text()

    Retrying(stop=stop_after_delay(10), wait=wait_fixed(0.05), retry=retry_if_result(lambda ok: not ok))(seen)
