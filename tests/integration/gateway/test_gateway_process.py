"""The gateway process fails fast at start and always ends on SIGTERM: real subprocesses."""

import signal
import socket
import time
from pathlib import Path

import httpx

from tests.integration.conftest import Process
from fleet.ports import free_port
from tests.integration.gateway.gateway_harness import hung_broker

GATEWAY = ["-m", "gateway.main"]


def ended_within(process: Process, seconds: float) -> int:
    """The exit code, once the process has ended; fails when it is still running after `seconds`."""
    try:
        process.popen.wait(timeout=seconds)
    except Exception:
        process.stop(signal.SIGKILL)
        raise AssertionError(f"still running after {seconds} s:\n{process.log_path.read_text()[-2000:]}") from None
    return process.stop()


def test_a_taken_port_ends_the_process_at_once(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        started = time.monotonic()
        process = Process(GATEWAY, {"FLEET_PORT": str(port)}, "cannot listen", tmp_path / "gateway.log")
        code = ended_within(process, 10)
    print(f"exit {code} after {time.monotonic() - started:.1f} s")
    assert code != 0
    assert "Address already in use" in process.log_path.read_text()


def test_unreachable_redis_or_kafka_at_start_exits_non_zero(tmp_path: Path) -> None:
    for name, env in (("redis", {"FLEET_REDIS_URL": "redis://127.0.0.1:1/0"}),
                      ("kafka", {"FLEET_KAFKA_BOOTSTRAP": "127.0.0.1:1"})):
        started = time.monotonic()
        process = Process(GATEWAY, {"FLEET_PORT": str(free_port()), "FLEET_STARTUP_TIMEOUT_S": "3", **env},
                          "cannot start", tmp_path / f"{name}.log")
        code = ended_within(process, 15)
        elapsed = time.monotonic() - started
        print(f"{name} down: exit {code} after {elapsed:.1f} s")
        assert code != 0
        assert elapsed >= 3, "it retried for the start-up window before giving up"


def test_sigterm_ends_a_gateway_waiting_for_a_hung_kafka(tmp_path: Path) -> None:
    with hung_broker() as bootstrap:
        process = Process(GATEWAY, {"FLEET_PORT": str(free_port()), "FLEET_KAFKA_BOOTSTRAP": bootstrap}, "",
                          tmp_path / "gateway.log")
        time.sleep(2)
        assert process.popen.poll() is None, "still trying to reach Kafka"
        process.popen.terminate()
        ended_within(process, 5)


def test_sigterm_ends_a_serving_gateway_within_its_grace_period(tmp_path: Path) -> None:
    port = free_port()
    process = Process(GATEWAY, {"FLEET_PORT": str(port), "FLEET_SHUTDOWN_GRACE_S": "4"}, "gateway listening",
                      tmp_path / "gateway.log")
    assert httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5).status_code == 200
    started = time.monotonic()
    process.popen.terminate()
    ended_within(process, 4 + 1)
    print(f"ended {time.monotonic() - started:.1f} s after SIGTERM")
