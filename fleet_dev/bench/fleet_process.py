"""The benchmark's handle on the fleet: a bench-only model name (its own topic and consumer
group), one worker as a real subprocess, a watch on its consumer group (who is a member, how
much backlog is left), and CPU counters that say where a window's CPU time went (worker,
bench client, everything else: Kafka, Redis, neighbours)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from aiokafka import TopicPartition

from common.clients import new_admin, new_consumer
from common.settings import FleetSettings
from common.topics import partitions_of
from models.registry import MANIFEST_FILE, ModelManifest, ModelRegistry

READY_MARKER = "ready:"
# DescribeGroups v0-v2 response rows: (error_code, group, state, protocol_type, protocol, members),
# each member (member_id, client_id, client_host, metadata, assignment).
_GROUP_MEMBERS_FIELD = 5
_MEMBER_CLIENT_ID_FIELD = 1


def bench_alias(source: ModelRegistry, manifest: ModelManifest, alias_registry: ModelRegistry,
                alias_name: str) -> ModelManifest:
    """The same model version registered under `alias_name` in `alias_registry`, its artifacts
    symlinked to the source's: a worker serving the alias consumes `fleet.requests.<alias>` in
    group `<alias>`, so workers and tests on the real model's topic never share the bench's
    partitions, and it runs exactly the same bytes (the worker re-checks every sha256)."""
    alias_id = alias_name + manifest.id.removeprefix(manifest.name)
    folder = alias_registry.version_dir(alias_name, alias_id)
    if (folder / MANIFEST_FILE).is_file():
        existing = alias_registry.resolve(alias_name, alias_id)
        if existing.files == manifest.files:
            return existing
    shutil.rmtree(folder, ignore_errors=True)  # stale: the source was rebuilt
    folder.mkdir(parents=True)
    for filename in manifest.files:
        link = folder / filename
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(source.path_of(manifest, filename).resolve())
    recipe = {**manifest.recipe, "bench_alias_of": manifest.id}
    alias = ModelManifest.model_validate({**manifest.model_dump(), "id": alias_id, "name": alias_name, "recipe": recipe})
    return alias_registry.register(alias)


@dataclass(frozen=True)
class CpuCounters:
    """CPU seconds used so far (user + system) and wall time, from /proc (Linux)."""

    worker_s: float
    bench_s: float
    machine_busy_s: float
    wall_s: float


@dataclass(frozen=True)
class CpuSplit:
    """CPU milliseconds per completed request over a window, by who spent them."""

    worker_ms: float
    bench_client_ms: float
    other_ms: float  # Kafka, Redis and anything else on the machine
    machine_busy: float  # fraction of all cores busy during the window

    @property
    def other_share(self) -> float:
        """Share of the window's busy CPU that neither the worker nor the bench used."""
        total = self.worker_ms + self.bench_client_ms + self.other_ms
        return self.other_ms / total if total else 0.0

    @classmethod
    def between(cls, before: CpuCounters, after: CpuCounters, requests: int) -> CpuSplit | None:
        wall = after.wall_s - before.wall_s
        if requests <= 0 or wall <= 0:
            return None
        worker = after.worker_s - before.worker_s
        bench = after.bench_s - before.bench_s
        busy = after.machine_busy_s - before.machine_busy_s
        per_request = 1000 / requests
        return cls(worker * per_request, bench * per_request, max(busy - worker - bench, 0.0) * per_request,
                   busy / (wall * (os.cpu_count() or 1)))


def _ticks_per_s() -> int:
    return os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process, all its threads (fields 14 and 15 of /proc/PID/stat)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2:].split()  # the command name may contain spaces
    return (int(fields[11]) + int(fields[12])) / _ticks_per_s()


def machine_busy_cpu_s() -> float:
    """CPU seconds all cores spent neither idle nor waiting for I/O since boot."""
    with open("/proc/stat") as stat:
        values = [int(v) for v in stat.readline().split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    # guest time is already counted in user/nice
    return (sum(values[:8]) - idle) / _ticks_per_s()


def cpu_counters(worker_pid: int) -> CpuCounters | None:
    """None where /proc is not there (not Linux) or the worker is gone."""
    try:
        return CpuCounters(process_cpu_s(worker_pid), process_cpu_s(os.getpid()), machine_busy_cpu_s(),
                           time.monotonic())
    except (OSError, ValueError, IndexError):
        return None


class WorkerFailed(RuntimeError):
    """The worker exited or never said it was ready; the message ends with its log's tail."""


class WorkerProcess:
    """`python -m workers.main` with extra FLEET_* variables, its output in `log_file`.

    with WorkerProcess(env, log_file) as worker:
        worker.wait_ready(90)
    # SIGTERM on exit: the worker finishes its batch, delivers, commits and leaves the group.
    """

    def __init__(self, env: Mapping[str, str], log_file: Path) -> None:
        self.env = dict(env)
        self.log_file = log_file
        self._process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Self:
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with self.log_file.open("wb") as log:
            self._process = subprocess.Popen([sys.executable, "-m", "workers.main"], env={**os.environ, **self.env},
                                             stdout=log, stderr=subprocess.STDOUT)
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.stop()

    @property
    def pid(self) -> int:
        return self._require_process().pid

    def _log_tail(self, lines: int = 15) -> str:
        text = self.log_file.read_text(errors="replace") if self.log_file.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def wait_ready(self, timeout_s: float) -> None:
        process = self._require_process()
        give_up = time.monotonic() + timeout_s
        while time.monotonic() < give_up:
            if READY_MARKER in self.log_file.read_text(errors="replace"):
                return
            if process.poll() is not None:
                raise WorkerFailed(f"worker exited with {process.returncode} before it was ready "
                                   f"({self.log_file}):\n{self._log_tail()}")
            time.sleep(0.1)
        raise WorkerFailed(f"worker not ready after {timeout_s:g} s ({self.log_file}):\n{self._log_tail()}")

    def stop(self, timeout_s: float = 30) -> int | None:
        """SIGTERM and wait; SIGKILL if it does not exit in time. Returns the exit code."""
        process = self._process
        if process is None:
            return None
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        return process.returncode

    def _require_process(self) -> subprocess.Popen[bytes]:
        if self._process is None:
            raise RuntimeError("worker not started")
        return self._process


class GroupWatch:
    """Members and lag of one consumer group on one topic (an admin client and a group-less
    consumer, opened once for the whole bench)."""

    def __init__(self, settings: FleetSettings, group: str, topic: str) -> None:
        self.settings = settings
        self.group = group
        self.topic = topic
        self._admin = new_admin(settings)
        self._offsets = new_consumer(settings, enable_auto_commit=False)
        self._partitions: list[TopicPartition] = []

    async def __aenter__(self) -> Self:
        await self._admin.start()
        await self._offsets.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._offsets.stop()
        await self._admin.close()

    async def members(self) -> list[str]:
        """Client ids of the group's current members (a worker's client id is its worker id)."""
        responses: list[Any] = await self._admin.describe_consumer_groups([self.group])
        return [str(member[_MEMBER_CLIENT_ID_FIELD]) for response in responses for group in response.groups
                for member in group[_GROUP_MEMBERS_FIELD]]

    async def lag(self) -> int:
        """Records on the topic that the group has not committed yet."""
        if not self._partitions:
            self._partitions = await partitions_of(self.settings, self.topic)
            if not self._partitions:
                return 0
        committed = await self._admin.list_consumer_group_offsets(self.group)
        ends = await self._offsets.end_offsets(self._partitions)
        starts = await self._offsets.beginning_offsets(self._partitions)
        total = 0
        for tp in self._partitions:
            done = committed[tp].offset if tp in committed and committed[tp].offset >= 0 else starts[tp]
            total += max(ends[tp] - done, 0)
        return total
