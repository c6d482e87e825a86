"""`python -m workers.main` configured for CUDA on an install that cannot run CUDA exits at once with
one line naming the fix and no traceback, before it connects to Kafka or Redis (neither is running
here: the addresses point at closed ports, and a worker that tried them would wait its startup window
out and exit 3 instead)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import onnxruntime
import pytest

from common.process import ExitCode
from common.settings import ENV_PREFIX
from models.backends.flavour import CUDA_PROVIDER
from tests.paths import REPO_ROOT

STARTUP_WINDOW_S = 30


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def run_worker(**fleet: str) -> tuple[int, str]:
    env = {key: value for key, value in os.environ.items() if not key.upper().startswith(ENV_PREFIX)}
    env |= {"FLEET_KAFKA_BOOTSTRAP": f"127.0.0.1:{closed_port()}", "FLEET_REDIS_URL": f"redis://127.0.0.1:{closed_port()}/0",
            "FLEET_STARTUP_TIMEOUT_S": str(STARTUP_WINDOW_S), "FLEET_METRICS_PORT": str(closed_port())} | fleet
    # The timeout guards against a hang: a worker that waited out the whole window would fail here.
    done = subprocess.run([sys.executable, "-m", "workers.main"], env=env, cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=STARTUP_WINDOW_S - 5)
    return done.returncode, done.stdout + done.stderr


@pytest.mark.skipif(CUDA_PROVIDER in onnxruntime.get_available_providers(),
                    reason="this install has the GPU flavour: a CUDA worker passes the install check")
@pytest.mark.parametrize("role", ["primary", "shadow"])
def test_a_cuda_worker_on_the_cpu_flavour_refuses_in_one_line_without_a_traceback(role: str) -> None:
    code, output = run_worker(FLEET_DEVICE="cuda", FLEET_ROLE=role)
    assert code == ExitCode.WRONG_INSTALL, output
    assert "Traceback" not in output, output
    [line] = [line for line in output.splitlines() if "worker cannot start" in line]
    assert "device cuda needs ONNX Runtime's CUDAExecutionProvider" in line
    assert "pip install '.[gpu]'" in line and "FLEET_FLAVOUR=gpu" in line and "compose/Dockerfile.gpu" in line
    assert "waiting for Kafka" not in output, "refused before connecting anywhere"


def test_a_cpu_worker_passes_the_check_and_goes_on_to_wait_for_kafka() -> None:
    code, output = run_worker(FLEET_DEVICE="cpu", FLEET_STARTUP_TIMEOUT_S="1")
    assert code == ExitCode.DEPENDENCIES, output
    assert "did not answer within 1 s" in output and "Traceback" not in output
