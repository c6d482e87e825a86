"""The fleet through a secured stack of its own (`stack up --secure`: Kafka SASL/SCRAM-SHA-512,
Redis ACL user, default user off; temp FLEET_HOME, free ports away from the shared stack).

A worker, the gateway (with an API key made by `fleet keys create` through the secured Redis)
and FleetClient serve requests end to end with the credentials from secure.env; a wrong Kafka or Redis password stops a worker and the gateway at start, in seconds,
with a message naming authentication; no client gets in without credentials; and no password
shows in any log or output the stack, the worker or the gateway wrote.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from aiokafka.errors import KafkaConnectionError

from common.clients import new_admin
from common.credentials import CredentialsRejected, verify_redis_credentials
from common.settings import FleetSettings
from fleet_dev.stack import kafka_server, topology
from fleet_dev.stack.layout import Stack, StackSettings
from fleet_dev.stack.proc import Endpoint, pid_alive, port_open
from fleet.ports import free_port
from gateway.client import FleetClient
from gateway.settings import ClientSettings
from tests.integration.conftest import MODEL, Process
from tests.paths import REPO_ROOT as ROOT

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

START_REFUSAL_S = 15.0  # a refused password ends the process this fast (the model never loads)


def _free_ports() -> dict[str, str]:
    """Ports below Linux's ephemeral range (32768-60999): a port in it that no server listens on may
    still be the local end of some client's connection, and Kafka's bind then fails (CI lost the
    whole module to 33092 once). Away from the cluster tests' ports (stack_cli.free_ports)."""
    for shift in range(0, 2000, 100):
        kafka, redis = Endpoint("127.0.0.1", 24092 + shift), Endpoint("127.0.0.1", 24379 + shift)
        plan = topology.plan(kafka, kafka.port + 1, redis, secure=True)
        if not any(port_open("127.0.0.1", port, 0.2) for port in plan.ports()):
            return {"FLEET_KAFKA_BOOTSTRAP": str(kafka), "FLEET_KAFKA_CONTROLLER_PORT": str(kafka.port + 1),
                    "FLEET_REDIS_URL": f"redis://{redis}/0"}
    raise AssertionError("no free ports for a secure test stack")


def _read_env(path: Path) -> dict[str, str]:
    pairs = (line.removeprefix("export ").split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return {name: value for name, value in pairs}


class SecureStack:
    """The stack's environment, its credentials, and every text it and the fleet wrote."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.env = {**{k: v for k, v in os.environ.items() if not k.startswith("FLEET_")}, **_free_ports(),
                    "FLEET_HOME": str(home), "FLEET_MODEL_DIR": str(FleetSettings().registry_dir.resolve())}
        self.outputs: list[str] = []
        self.credentials: dict[str, str] = {}

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([sys.executable, "-m", "fleet_dev.stack", *args], cwd=ROOT, env=self.env,
                              capture_output=True, text=True, timeout=180, check=False)
        self.outputs.append(done.stdout + done.stderr)
        assert done.returncode == 0, f"stack {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
        return done

    def settings(self, **changes: str) -> ClientSettings:
        env = {**self.credentials, **changes}
        return ClientSettings.model_validate({name.removeprefix("FLEET_").lower(): value for name, value in env.items()})

    def secrets(self) -> list[str]:
        return [value for name, value in self.credentials.items() if name.endswith("PASSWORD")]


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureStack]:
    home = tmp_path_factory.mktemp("secure-home")
    libs = StackSettings().home.resolve() / "stack" / "kafka-libs"
    if kafka_server.jars_ready(libs):
        (home / "stack").mkdir(parents=True)
        (home / "stack" / "kafka-libs").symlink_to(libs)
    stack = SecureStack(home)
    try:
        stack.cli("up", "--secure")
        stack.credentials = _read_env(home / "stack" / "secure.env")
        yield stack
    finally:
        recorded = Stack.recorded(StackSettings(home=home, kafka_bootstrap=stack.env["FLEET_KAFKA_BOOTSTRAP"],
                                                kafka_controller_port=int(stack.env["FLEET_KAFKA_CONTROLLER_PORT"]),
                                                redis_url=stack.env["FLEET_REDIS_URL"]))
        pids = [proc.pid() for proc in recorded.processes()]
        subprocess.run([sys.executable, "-m", "fleet_dev.stack", "down", "--wipe"], cwd=ROOT, env=stack.env,
                       capture_output=True, timeout=120, check=False)
        assert not any(pid_alive(pid) for pid in pids if pid is not None)


def test_up_names_the_private_credentials_file_and_prints_no_password(secure: SecureStack) -> None:
    env_file = secure.home / "stack" / "secure.env"
    assert f"source {env_file}" in secure.outputs[0]
    assert env_file.stat().st_mode & 0o777 == 0o600
    assert secure.credentials["FLEET_KAFKA_SECURITY_PROTOCOL"] == "SASL_PLAINTEXT"
    assert secure.credentials["FLEET_KAFKA_SASL_MECHANISM"] == "SCRAM-SHA-512"
    assert all(len(secret) >= 32 and secret not in secure.outputs[0] for secret in secure.secrets())


async def test_no_client_gets_in_without_credentials(secure: SecureStack) -> None:
    plain = FleetSettings(kafka_bootstrap=secure.env["FLEET_KAFKA_BOOTSTRAP"], redis_url=secure.env["FLEET_REDIS_URL"])
    with pytest.raises(CredentialsRejected, match="refused authentication of user default"):
        await verify_redis_credentials(plain)
    admin = new_admin(plain, request_timeout_ms=3000)
    try:
        with pytest.raises(KafkaConnectionError):
            await admin.start()  # the SASL listener hangs up on a client that does not authenticate
    finally:
        await admin.close()


async def test_worker_gateway_and_client_serve_through_the_secured_stack(secure: SecureStack, tmp_path: Path) -> None:
    env = {**secure.credentials, "FLEET_MODEL": MODEL, "FLEET_WORKER_ID": "secure-w1", "FLEET_SESSION_TIMEOUT_MS": "6000",
           "FLEET_MAX_QUEUE_DELAY_MS": "10", "FLEET_HOME": secure.env["FLEET_HOME"],
           "FLEET_MODEL_DIR": secure.env["FLEET_MODEL_DIR"]}
    port = free_port()
    started: list[Process] = []
    try:
        started.append(Process(["-m", "workers.main"], env, "ready:", tmp_path / "worker.log"))
        gateway_env = {**env, "FLEET_PORT": str(port), "FLEET_MODELS": f'["{MODEL}"]'}
        started.append(Process(["-m", "gateway.main"], gateway_env, "gateway listening", tmp_path / "gateway.log"))
        made = subprocess.run([sys.executable, "-m", "fleet.cli", "keys", "create", "--tenant", "secure-tests"],
                              cwd=ROOT, env={**secure.env, **env}, capture_output=True, text=True, timeout=60)
        secure.outputs.append(made.stderr)  # not stdout: it is the API key, shown once by design
        assert made.returncode == 0, made.stderr
        headers = {"Authorization": f"Bearer {made.stdout.strip().splitlines()[-1]}"}
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30, headers=headers) as http:
            answer = await http.post(f"/v1/models/{MODEL}/infer", json={"text": "a secured hello", "timeout_ms": 20000})
        assert answer.status_code == 200, answer.text
        assert answer.json()["status"] == "ok" and answer.json()["worker"] == "secure-w1"
        async with FleetClient(secure.settings()) as client:
            result = await client.infer(MODEL, "a secured hello from the client", timeout=20)
        assert result.status.value == "ok" and result.worker == "secure-w1"
        assert len(result.outputs["embedding"]) == 384
    finally:
        for process in started:
            process.stop()
            secure.outputs.append(process.log_path.read_text(errors="replace"))


def _refused_at_start(secure: SecureStack, tmp_path: Path, module: str, **wrong: str) -> tuple[int, str, float]:
    env = {**secure.env, **secure.credentials, "FLEET_MODEL": MODEL, "FLEET_WORKER_ID": "secure-refused",
           "FLEET_PORT": str(free_port()), **wrong}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", module], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    output = done.stdout + done.stderr
    secure.outputs.append(output)
    return done.returncode, output, time.monotonic() - started


@pytest.mark.parametrize("module", ["workers.main", "gateway.main"])
@pytest.mark.parametrize(("server", "variable"), [("Kafka", "FLEET_KAFKA_SASL_PASSWORD"),
                                                  ("Redis", "FLEET_REDIS_PASSWORD")])
def test_a_wrong_password_fails_at_start(secure: SecureStack, tmp_path: Path, module: str, server: str,
                                         variable: str) -> None:
    wrong = f"wrong-{server.lower()}-password"
    code, output, took = _refused_at_start(secure, tmp_path, module, **{variable: wrong})
    assert code != 0 and took < START_REFUSAL_S, (code, took, output[-2000:])
    assert f"cannot start: {server} at" in output and "refused authentication of user fleet" in output, output[-2000:]
    assert wrong not in output


def test_no_password_in_any_log_or_output(secure: SecureStack) -> None:
    assert len(secure.outputs) >= 6, "the tests above ran and left their outputs"
    texts = [*secure.outputs, *(path.read_text(errors="replace") for path in (secure.home / "stack" / "logs").rglob("*")
                                if path.is_file())]
    leaks = [secret for secret in [*secure.secrets(), "wrong-kafka-password", "wrong-redis-password"]
             if any(secret in text for text in texts)]
    assert not leaks, f"{len(leaks)} password(s) found in logs"
