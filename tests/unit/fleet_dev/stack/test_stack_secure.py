"""`stack up --secure` configuration: the SASL listener, the Redis ACL, credentials kept private."""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path

import pytest

from fleet_dev.stack import kafka_server as stack_kafka, secure as stack_secure, topology as stack_topology
from fleet_dev.stack.layout import Stack, StackSettings
from fleet_dev.stack.proc import Endpoint, StackError


def _props(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))


def _settings(home: Path) -> StackSettings:
    return StackSettings(home=home, kafka_bootstrap="127.0.0.1:19092", kafka_controller_port=19093,
                         redis_url="redis://127.0.0.1:16379/0")


def test_secure_refuses_a_multi_node_stack() -> None:
    at, redis = Endpoint("127.0.0.1", 19092), Endpoint("127.0.0.1", 16379)
    for shape in ({"brokers": 3}, {"redis_cluster": True}):
        with pytest.raises(StackError, match="--secure runs one Kafka node and one Redis"):
            stack_topology.plan(at, 19093, redis, secure=True, **shape)  # type: ignore[arg-type]


def test_the_topology_remembers_it_is_secure(tmp_path: Path) -> None:
    planned = Stack.planned(_settings(tmp_path), secure=True)
    stack_topology.save(planned.topology_file, planned.topology)
    recorded = Stack.recorded(_settings(tmp_path))
    assert recorded.topology.secure and recorded.topology == planned.topology
    assert "secured" in recorded.topology.describe()


def test_credentials_are_private_and_kept_across_ups(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    first = stack_secure.ensure_credentials(tmp_path, settings)
    path = stack_secure.credentials_file(tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    again = stack_secure.ensure_credentials(tmp_path, settings)
    assert again == first, "a restarted stack keeps the passwords its data was formatted with"
    text = path.read_text()
    assert "export FLEET_KAFKA_SECURITY_PROTOCOL=SASL_PLAINTEXT" in text
    assert f"export FLEET_REDIS_PASSWORD={first.redis_password.get_secret_value()}" in text
    assert first.kafka_password != first.redis_password


def test_client_settings_of_a_secure_stack_carry_its_credentials(tmp_path: Path) -> None:
    stack = Stack.planned(_settings(tmp_path), secure=True)
    credentials = stack.credentials()
    reach = stack.client_settings()
    assert reach.kafka_security_protocol == "SASL_PLAINTEXT" and reach.kafka_sasl_mechanism == "SCRAM-SHA-512"
    assert reach.kafka_sasl_password == credentials.kafka_password and reach.redis_username == "fleet"
    assert Stack.planned(_settings(tmp_path)).client_settings().kafka_security_protocol == "PLAINTEXT"


def test_the_secure_broker_listens_with_sasl_scram_only(tmp_path: Path) -> None:
    credentials = stack_secure.Credentials.new()
    text = stack_kafka.render_server_properties(
        Endpoint("127.0.0.1", 19092), 19093, tmp_path, 4, listener=stack_secure.LISTENER,
        overrides=stack_secure.kafka_listener_properties(credentials))
    props = _props(text)
    assert props["listeners"] == "SASL_PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093"
    assert props["listener.security.protocol.map"] == "SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT"
    assert props["sasl.enabled.mechanisms"] == "SCRAM-SHA-512"
    assert props["inter.broker.listener.name"] == "SASL_PLAINTEXT"
    assert "PLAINTEXT://127.0.0.1:19092" not in props["listeners"].replace("SASL_PLAINTEXT://", "")


def test_redis_acl_turns_the_default_user_off() -> None:
    credentials = stack_secure.Credentials.new()
    lines = stack_secure.redis_acl_config(credentials).splitlines()
    assert lines[0] == "user default off"
    assert lines[1] == f"user fleet on >{credentials.redis_password.get_secret_value()} ~* &* +@all"


def test_the_format_log_never_shows_the_scram_password(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[list[str]] = []

    def fake_run(argv: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        ran.append(argv)
        return subprocess.CompletedProcess(argv, 0, "Formatting metadata directory\n", "")

    monkeypatch.setattr(stack_kafka, "java_binary", lambda: "/usr/bin/java")
    monkeypatch.setattr(stack_kafka.subprocess, "run", fake_run)
    credentials = stack_secure.Credentials.new()
    log = tmp_path / "kafka.out"
    stack_kafka.format_storage(tmp_path, tmp_path / "log4j", tmp_path / "server.properties", log,
                               secret_args=stack_secure.scram_format_args(credentials))
    password = credentials.kafka_password.get_secret_value()
    assert any(f"SCRAM-SHA-512=[name=fleet,password={password}]" in arg for arg in ran[0])
    assert password not in log.read_text() and "2 secret arguments not shown" in log.read_text()
