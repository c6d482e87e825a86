"""The fleet under test as real processes: two `python -m workers.main` and one `python -m gateway.main`,
watched like an orchestrator watches pods. A process that dies is recorded (with its exit code and
the tail of its log) and started again, so the scenarios after it still have a fleet to measure.

Each runs in its own session: a Ctrl-C in the operator's terminal reaches the harness alone,
which then stops them in order.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

WORKER_READY = "ready:"
READY_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 20.0
WATCH_INTERVAL_S = 0.3
RESTART_AFTER_S = 1.0  # a process that dies at once is started again no more than once a second


@dataclass
class Exited:
    name: str
    code: int | None
    at: float  # time.monotonic()
    planned: bool
    log_tail: str


@dataclass
class FleetProcess:
    name: str
    module: str
    env: dict[str, str]
    log_file: Path
    popen: subprocess.Popen[bytes] | None = None
    log_offset: int = 0  # where this incarnation's output starts in the log
    planned_exit: bool = False
    starts: int = 0
    started_at: float = 0.0

    def start(self) -> None:
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        self.log_offset = self.log_file.stat().st_size if self.log_file.exists() else 0
        with self.log_file.open("ab") as log:
            self.popen = subprocess.Popen([sys.executable, "-m", self.module], env=self.env, stdout=log,
                                          stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        self.planned_exit = False
        self.starts += 1
        self.started_at = time.monotonic()

    def output(self) -> str:
        """What this incarnation has written so far."""
        try:
            with self.log_file.open("rb") as log:
                log.seek(self.log_offset)
                return log.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def tail(self, lines: int = 15) -> str:
        return "\n".join(self.output().splitlines()[-lines:])

    def exit_code(self) -> int | None:
        """None while it runs."""
        return None if self.popen is None else self.popen.poll()

    def kill(self) -> None:
        """SIGKILL, as a crashed node or an OOM kill: nothing is finished, delivered or committed."""
        if self.popen is not None and self.popen.poll() is None:
            self.planned_exit = True
            self.popen.send_signal(signal.SIGKILL)
            self.popen.wait(timeout=10)

    def stop(self) -> int | None:
        if self.popen is None:
            return None
        self.planned_exit = True
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=10)
        return self.popen.returncode


@dataclass
class Fleet:
    workers: list[FleetProcess]
    gateway: FleetProcess
    gateway_url: str
    exits: list[Exited] = field(default_factory=list)
    restarts: list[tuple[str, float]] = field(default_factory=list)
    exactly_once: str = ""  # the workers' FLEET_EXACTLY_ONCE (`scripts/chaos --exactly-once LANES`)
    _watch: asyncio.Task[None] | None = None

    @classmethod
    def planned(cls, env: dict[str, str], log_dir: Path, *, model: str, gateway_port: int, workers: int = 2,
                exactly_once: str = "") -> Fleet:
        # One intra-op thread each, no spinning: the machine also runs Kafka, Redis, the gateway and the load.
        worker_env = {**env, "FLEET_MODEL": model, "FLEET_INTRA_OP_THREADS": "1", "FLEET_INTRA_OP_SPINNING": "false",
                      "FLEET_SESSION_TIMEOUT_MS": "6000", "FLEET_EXACTLY_ONCE": exactly_once}
        members = [FleetProcess(f"worker-{n}", "workers.main", {**worker_env, "FLEET_WORKER_ID": f"chaos-worker-{n}"},
                                log_dir / f"worker-{n}.log") for n in range(1, workers + 1)]
        gateway = FleetProcess("gateway", "gateway.main", {**env, "FLEET_PORT": str(gateway_port),
                                                           "FLEET_MODELS": f'["{model}"]'}, log_dir / "gateway.log")
        return cls(members, gateway, f"http://127.0.0.1:{gateway_port}", exactly_once=exactly_once)

    @property
    def processes(self) -> list[FleetProcess]:
        return [*self.workers, self.gateway]

    async def start(self) -> None:
        for process in self.processes:
            process.start()
        await asyncio.gather(*(self.wait_worker_ready(worker) for worker in self.workers), self.wait_gateway_ready())
        self._watch = asyncio.create_task(self._watch_forever())

    async def wait_worker_ready(self, worker: FleetProcess, timeout_s: float = READY_TIMEOUT_S) -> None:
        give_up = time.monotonic() + timeout_s
        while WORKER_READY not in worker.output():
            if worker.exit_code() is not None:
                raise RuntimeError(f"{worker.name} exited with {worker.exit_code()} before it was ready:\n{worker.tail()}")
            if time.monotonic() > give_up:
                raise RuntimeError(f"{worker.name} not ready after {timeout_s:.0f} s:\n{worker.tail()}")
            await asyncio.sleep(0.2)

    async def wait_gateway_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        give_up = time.monotonic() + timeout_s
        async with httpx.AsyncClient(timeout=2) as http:
            while True:
                if self.gateway.exit_code() is not None:
                    raise RuntimeError(f"the gateway exited with {self.gateway.exit_code()}:\n{self.gateway.tail()}")
                try:
                    if (await http.get(f"{self.gateway_url}/readyz")).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                if time.monotonic() > give_up:
                    raise RuntimeError(f"the gateway not ready after {timeout_s:.0f} s:\n{self.gateway.tail()}")
                await asyncio.sleep(0.2)

    def kill_worker(self, index: int = 0) -> str:
        """SIGKILL one worker (the watch records the exit as planned and starts it again at once)."""
        worker = self.workers[index]
        worker.kill()
        return worker.name

    async def _watch_forever(self) -> None:
        while True:
            for process in self.processes:
                code = process.exit_code()
                if code is None or process.popen is None:
                    continue
                if not any(died.name == process.name and died.at >= process.started_at for died in self.exits):
                    self.exits.append(Exited(process.name, code, time.monotonic(), process.planned_exit, process.tail()))
                if process.planned_exit or time.monotonic() - process.started_at >= RESTART_AFTER_S:
                    process.start()
                    self.restarts.append((process.name, time.monotonic()))
            await asyncio.sleep(WATCH_INTERVAL_S)

    async def stop(self) -> dict[str, int | None]:
        if self._watch is not None:
            self._watch.cancel()
            await asyncio.gather(self._watch, return_exceptions=True)
        codes: dict[str, int | None] = {}
        for process in self.processes:
            codes[process.name] = await asyncio.to_thread(process.stop)
        return codes
