"""Pure logic of the local stack: ports from the shared settings, rendered configuration, pid files.

The cluster topology and the cluster-mode rendering are in test_stack_cluster_config.py."""

from __future__ import annotations

import base64
import os
import signal
import sys
from pathlib import Path

import pytest
from tenacity import Retrying, retry_if_result, stop_after_delay, wait_fixed

from fleet_dev.stack import kafka_server as stack_kafka, redis_server as stack_redis
from fleet_dev.stack.layout import Stack, StackSettings
from fleet_dev.stack import proc
from fleet_dev.stack.proc import Endpoint, Managed, StackError, pid_alive, stop_all


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
    assert props["auto.create.topics.enable"] == "false"


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


def test_redis_argv_aof_every_second_bounded_memory(tmp_path: Path) -> None:
    argv = stack_redis.redis_argv("redis-server", Endpoint("127.0.0.1", 6380), tmp_path, "64mb", "allkeys-lru")
    pairs = dict(zip(argv[1::2], argv[2::2], strict=True))
    assert pairs["--bind"] == "127.0.0.1" and pairs["--port"] == "6380"
    assert pairs["--save"] == "" and pairs["--appendonly"] == "yes" and pairs["--appendfsync"] == "everysec"
    assert pairs["--dir"] == str(tmp_path)
    assert pairs["--maxmemory"] == "64mb" and pairs["--maxmemory-policy"] == "allkeys-lru"
    assert "--cluster-enabled" not in pairs


def test_stack_takes_ports_and_home_from_the_shared_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEET_KAFKA_BOOTSTRAP", "localhost:19092")
    monkeypatch.setenv("FLEET_REDIS_URL", "redis://127.0.0.1:16379/0")
    monkeypatch.setenv("FLEET_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("FLEET_KAFKA_CONTROLLER_PORT", "19093")
    stack = Stack.planned(StackSettings())
    [kafka], [redis] = stack.kafka_nodes, stack.redis_nodes
    assert kafka.node.broker == Endpoint("127.0.0.1", 19092)
    assert kafka.node.controller == Endpoint("127.0.0.1", 19093)
    assert redis.at == Endpoint("127.0.0.1", 16379)
    assert stack.root == tmp_path / "home" / "stack"
    assert kafka.proc.pid_file.parent == redis.proc.pid_file.parent == stack.root / "run"
    assert kafka.data_dir.is_relative_to(stack.data) and redis.data_dir.is_relative_to(stack.data)


def test_single_node_stack_keeps_its_file_names(tmp_path: Path) -> None:
    """A stack started before clusters existed must still be found by `status` and `down`."""
    stack = Stack.recorded(StackSettings(home=tmp_path))
    [kafka], [redis] = stack.kafka_nodes, stack.redis_nodes
    root = tmp_path.resolve() / "stack"
    assert (kafka.proc.name, redis.proc.name) == ("kafka", "redis")
    assert kafka.proc.pid_file == root / "run" / "kafka.pid" and redis.proc.pid_file == root / "run" / "redis.pid"
    assert kafka.server_properties == root / "conf" / "server.properties"
    assert kafka.log4j == root / "conf" / "log4j.properties"
    assert kafka.data_dir == root / "data" / "kafka" and redis.data_dir == root / "data" / "redis"
    assert kafka.proc.log_file == root / "logs" / "kafka.out" and kafka.log_dir == root / "logs" / "kafka"
    assert redis.proc.log_file == root / "logs" / "redis.log"
    assert kafka.proc.markers == (stack_kafka.KAFKA_MAIN, str(root / "conf" / "server.properties"))
    assert redis.proc.markers == ("redis-server", "6379")


def test_stack_settings_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in [key for key in os.environ if key.startswith("FLEET_")]:
        monkeypatch.delenv(key)
    settings = StackSettings()
    assert Stack.planned(settings).topology.kafka[0].broker == Endpoint("127.0.0.1", 9092)
    assert settings.partitions == 4 and settings.kafka_controller_port == 9093
    assert settings.redis_maxmemory_policy == "volatile-lru"
    assert settings.kafka_node_heap_max == "512m" and settings.redis_cluster_node_timeout_ms == 3000


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
    pid = managed.start([sys.executable, "-c", code], cwd=tmp_path)
    try:
        _wait_for_line(managed.log_file, "hello")
        assert managed.pid() == pid
        assert _parent_of(pid) != os.getpid()  # detached: not our child, so no Popen is left to warn
        assert managed.stop(5.0) == pid
        assert not pid_alive(pid)
        assert managed.pid() is None and not managed.pid_file.exists()
    finally:
        _kill_if_alive(pid)
    assert managed.log_tail().splitlines() == ["hello"]


def test_managed_stop_escalates_to_sigkill(tmp_path: Path) -> None:
    marker = f"fleet-test-stubborn-{os.getpid()}"
    managed = Managed("stubborn", tmp_path / "s.pid", tmp_path / "s.log", (marker,))
    code = (
        f"import signal, time  # {marker}\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('ok', flush=True)\ntime.sleep(60)"
    )
    pid = managed.start([sys.executable, "-c", code], cwd=tmp_path)
    try:
        _wait_for_line(managed.log_file, "ok")
        assert managed.stop(0.5) == pid
        assert not pid_alive(pid)
    finally:
        _kill_if_alive(pid)


def _stubborn_sleeper(tmp_path: Path, name: str) -> Managed:
    marker = f"fleet-test-{name}-{os.getpid()}"
    managed = Managed(name, tmp_path / f"{name}.pid", tmp_path / f"{name}.log", (marker,))
    code = (
        f"import signal, time  # {marker}\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('ok', flush=True)\ntime.sleep(60)"
    )
    managed.start([sys.executable, "-c", code], cwd=tmp_path)
    _wait_for_line(managed.log_file, "ok")
    return managed


def test_managed_kill_is_immediate(tmp_path: Path) -> None:
    managed = _stubborn_sleeper(tmp_path, "crash")
    pid = managed.pid()
    assert pid is not None
    try:
        # The sleeper ignores SIGTERM: gone once kill() returns means SIGKILL, with no grace period.
        assert managed.kill() == pid
        assert not pid_alive(pid) and managed.pid() is None
        assert managed.kill() is None
    finally:
        _kill_if_alive(pid)


class GraceClock:
    """proc.py's `time` and its waits for an exit, on a fake clock: a grace wait lets its time pass
    at once and records it; the wait after SIGKILL is the real one."""

    def __init__(self) -> None:
        self.now = 0.0
        self.grace_waits: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def wait_gone(self, pid: int, timeout_s: float) -> bool:
        if timeout_s == proc.KILLED_EXIT_WAIT_S:
            return real_wait_gone(pid, timeout_s)
        self.grace_waits.append(round(timeout_s, 6))
        self.now += timeout_s
        return real_wait_gone(pid, 0.0)


real_wait_gone = proc._wait_gone


def test_stop_all_signals_every_server_before_waiting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    group = [_stubborn_sleeper(tmp_path, f"node{i}") for i in range(3)]
    pids = [managed.pid() for managed in group]
    idle = Managed("idle", tmp_path / "idle.pid", tmp_path / "idle.log", ("never-started",))
    clock = GraceClock()
    monkeypatch.setattr(proc, "time", clock)
    monkeypatch.setattr(proc, "_wait_gone", clock.wait_gone)
    try:
        assert stop_all([*group, idle], 1.0) == [*pids, None]
        # One shared grace period: the first server's wait uses it up, the others get the floor.
        assert clock.grace_waits == [1.0, 0.1, 0.1]
        assert not any(pid_alive(pid) for pid in pids if pid is not None)
        assert not any(managed.pid_file.exists() for managed in group)
    finally:
        for pid in pids:
            _kill_if_alive(pid)


def _parent_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[-1].split()[1])


def _kill_if_alive(pid: int | None) -> None:
    if pid is not None and pid_alive(pid):
        os.kill(pid, signal.SIGKILL)


def _wait_for_line(path: Path, text: str) -> None:
    def seen() -> bool:
        return path.exists() and text in path.read_text()

    Retrying(stop=stop_after_delay(10), wait=wait_fixed(0.05), retry=retry_if_result(lambda ok: not ok))(seen)
