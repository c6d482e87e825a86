"""A worker, a gateway and a shadow started while Kafka (or Redis) is stopped: each waits, saying
what it waits for, comes up when the server returns within FLEET_STARTUP_TIMEOUT_S, and ends with
exit code 3 and one line (no traceback) when it does not. Real processes, the stack's own servers."""

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import pytest

from common.process import ExitCode
from tests.integration.conftest import MODEL, Process
from tests.integration.stack_nodes import kafka_stopped, redis_stopped
from fleet.ports import free_port

PATIENT_S = "180"  # outlives the restart by far: these must come up
IMPATIENT_S = "4"  # shorter than the outage: these must give up
READY = {"worker": "ready:", "shadow": "ready:", "gateway": "gateway listening"}


def launch(kind: str, tag: str, window_s: str, tmp_path: Path) -> Process:
    """A process of `kind` with start-up window `window_s`, once it says it waits for a server."""
    env = {"FLEET_STARTUP_TIMEOUT_S": window_s, "FLEET_MODEL": MODEL, "FLEET_WORKER_ID": f"startup-{tag}-{kind}",
           "FLEET_SESSION_TIMEOUT_MS": "6000"}
    if kind == "gateway":
        args, env = ["-m", "gateway.main"], {**env, "FLEET_PORT": str(free_port())}
    else:
        args, env = ["-m", "workers.main"], {**env, "FLEET_ROLE": "shadow" if kind == "shadow" else "primary"}
    return Process(args, env, f"{kind} waiting for ", tmp_path / f"{tag}-{kind}.log")


def ended_in_one_line(process: Process, server: str, window_s: str) -> None:
    code = process.popen.wait(timeout=60)
    output = process.log_path.read_text(errors="replace")
    assert code == ExitCode.DEPENDENCIES, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    last = output.strip().splitlines()[-1]
    assert "cannot start: " in last and f"{server} at " in last and f"did not answer within {window_s} s" in last, last


@pytest.fixture
async def started(tmp_path: Path) -> AsyncIterator[list[Process]]:
    processes: list[Process] = []
    yield processes
    for process in processes:
        process.stop()


@pytest.mark.parametrize(("server", "stopped"), [("Kafka", kafka_stopped), ("Redis", redis_stopped)])
async def test_start_up_waits_out_an_outage_within_its_window_and_ends_cleanly_past_it(
        server: str, stopped: Callable[[], AbstractAsyncContextManager[None]], tmp_path: Path,
        started: list[Process]) -> None:
    kinds = ("worker", "gateway", "shadow")
    async with stopped():
        patient = {kind: launch(kind, "patient", PATIENT_S, tmp_path) for kind in kinds}
        impatient = {kind: launch(kind, "impatient", IMPATIENT_S, tmp_path) for kind in kinds}
        started += [*patient.values(), *impatient.values()]
        for kind, process in impatient.items():
            ended_in_one_line(process, server, IMPATIENT_S)
        for kind, process in patient.items():
            assert process.popen.poll() is None, f"the patient {kind} still waits"
            assert f"{kind} waiting for {server} at " in process.log_path.read_text(), kind
    for kind, process in patient.items():  # the server is back
        process.wait_for(READY[kind], timeout_s=150)
        assert process.popen.poll() is None, f"{kind} serves"
