"""`fleet scale`: run N local worker processes for a model, no more, no fewer.

    fleet scale minilm-embed --workers 3                  # start or stop workers until 3 run
    fleet scale minilm-embed --workers 6 --partitions 8   # first grow the request topic to 8 partitions
    fleet scale minilm-embed --status                     # the local workers: pid, alive, uptime

Workers are `python -m workers.main` processes with the stable id `<model>-w<k>` (k = 1, 2,
...), detached into their own session so they outlive this command, logging to
`<home>/workers/<model>/<id>.log` with their pid in `<id>.pid`. Scaling up starts the lowest
free numbers and returns once each new worker printed "ready:"; scaling down sends SIGTERM to
the highest-numbered ones and waits until they exit (a worker finishes its batch in hand,
delivers, commits and leaves its group). Scaling to the current count does nothing.

More workers than the request topic has partitions would sit idle in the group, so that is
refused unless `--partitions P` (P >= N) is given; partitions are only ever added.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from aiokafka.admin import NewPartitions
from pydantic import Field

from common.clients import new_admin
from common.settings import FleetSettings
from fleet.arguments import command_parser
from fleet.commands.lag import format_duration
from fleet.exits import Exit
from fleet.pids import command_line, pid_alive
from fleet.tables import format_table
from common.topics import ensure_topics, partitions_of
from schemas.names import DEFAULT_RESULTS_TOPIC, DLQ_TOPIC

Echo = Callable[[str], None]
READY_MARKER = "ready:"
WORKER_MODULE = "workers.main"


class ScaleSettings(FleetSettings):
    partitions: int = Field(4, ge=1, description="Partitions of a request topic when scaling has to create it")
    worker_ready_timeout_s: float = Field(180.0, gt=0, description="How long a new worker may take to print ready:")
    worker_stop_timeout_s: float = Field(90.0, gt=0, description="How long a worker may take to exit after SIGTERM")


class ScaleRefused(ValueError):
    """The requested scale cannot work as asked; the message says what to do instead."""


# --- planning (pure) --------------------------------------------------------------------------


def worker_id(model: str, number: int) -> str:
    return f"{model}-w{number}"


def worker_number(model: str, candidate: str) -> int | None:
    """k of `<model>-w<k>`, or None for any other name."""
    match = re.fullmatch(rf"{re.escape(model)}-w([1-9]\d*)", candidate)
    return int(match.group(1)) if match else None


@dataclass(frozen=True)
class ScalePlan:
    start: tuple[int, ...]  # worker numbers to start
    stop: tuple[int, ...]  # worker numbers to stop, highest first
    grow_partitions_to: int | None  # add partitions up to this total first; None leaves the topic alone

    @property
    def changes_nothing(self) -> bool:
        return not self.start and not self.stop and self.grow_partitions_to is None


def plan_scale(running: Collection[int], target: int, partitions: int, requested_partitions: int | None = None) -> ScalePlan:
    """What to do so that `target` workers run, given the numbers running now and the topic's partitions."""
    if target < 0:
        raise ScaleRefused(f"--workers must be >= 0, not {target}")
    if requested_partitions is not None and requested_partitions < target:
        raise ScaleRefused(f"--partitions {requested_partitions} is fewer than --workers {target}; "
                           "each worker needs a partition of its own")
    if requested_partitions is None and target > partitions:
        raise ScaleRefused(f"{target} workers but the request topic has {partitions} partitions: the extra "
                           f"workers would sit idle. Pass --partitions {target} (or more) to add partitions first")
    # Partitions are never removed: Kafka cannot, and records on them would be stranded.
    grow = requested_partitions if requested_partitions is not None and requested_partitions > partitions else None
    alive = sorted(set(running))
    if len(alive) > target:
        return ScalePlan(start=(), stop=tuple(reversed(alive[target:])), grow_partitions_to=grow)
    free = (n for n in range(1, len(alive) + target + 1) if n not in alive)
    return ScalePlan(start=tuple(next(free) for _ in range(target - len(alive))), stop=(), grow_partitions_to=grow)


# --- local worker processes -------------------------------------------------------------------


@dataclass(frozen=True)
class WorkerStatus:
    worker_id: str
    number: int
    pid: int | None
    alive: bool
    uptime_s: float | None


def _reap(pid: int) -> None:
    # A worker started by this very process (e.g. in a test) is our child: collect its exit
    # status so it does not linger as a zombie that still answers kill(pid, 0).
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def process_alive(pid: int) -> bool:
    """True while `pid` is a running (not zombie) worker process."""
    _reap(pid)
    if not pid_alive(pid):
        return False
    # A recycled pid belongs to some other program; it is not our worker. An empty command
    # line is a process between fork and exec (or no procfs to ask): judged as alive.
    command = command_line(pid)
    return not command or WORKER_MODULE in command


class LocalWorkers:
    """The worker processes of one model on this machine, tracked by pid files."""

    def __init__(self, settings: ScaleSettings, model: str, echo: Echo = print) -> None:
        self.settings = settings
        self.model = model
        self.folder = settings.home.resolve() / "workers" / model
        self.echo = echo

    def pid_file(self, number: int) -> Path:
        return self.folder / f"{worker_id(self.model, number)}.pid"

    def log_file(self, number: int) -> Path:
        return self.folder / f"{worker_id(self.model, number)}.log"

    def status(self) -> list[WorkerStatus]:
        found = []
        for path in sorted(self.folder.glob("*.pid")) if self.folder.is_dir() else []:
            number = worker_number(self.model, path.stem)
            if number is None:
                continue
            try:
                pid: int | None = int(path.read_text().strip())
                started = path.stat().st_mtime
            except (OSError, ValueError):
                pid, started = None, time.time()
            alive = pid is not None and process_alive(pid)
            found.append(WorkerStatus(path.stem, number, pid, alive, time.time() - started if alive else None))
        return sorted(found, key=lambda w: w.number)

    def running(self) -> dict[int, int]:
        """Worker number -> pid of the live workers."""
        return {w.number: w.pid for w in self.status() if w.alive and w.pid is not None}

    def spawn(self, number: int, extra_env: Mapping[str, str]) -> tuple[int, int]:
        """Start worker `number` detached; returns (pid, size of its log before this start)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        log = self.log_file(number)
        log_start = log.stat().st_size if log.exists() else 0
        settings = self.settings
        env = {**os.environ, "FLEET_MODEL": self.model, "FLEET_WORKER_ID": worker_id(self.model, number),
               "FLEET_HOME": str(settings.home.resolve()), "FLEET_MODEL_DIR": str(settings.registry_dir.resolve()),
               "FLEET_KAFKA_BOOTSTRAP": settings.kafka_bootstrap, "FLEET_REDIS_URL": settings.redis_url, **extra_env}
        # posix_spawn with setsid is start_new_session without a Popen object: the worker must
        # outlive this command, and an abandoned Popen would warn that its child still runs.
        pid = os.posix_spawn(sys.executable, [sys.executable, "-m", WORKER_MODULE], env, setsid=True, file_actions=[
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_OPEN, 1, str(log), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644),
            (os.POSIX_SPAWN_DUP2, 1, 2),
        ])
        self.pid_file(number).write_text(f"{pid}\n")
        return pid, log_start

    async def wait_ready(self, number: int, pid: int, log_start: int) -> None:
        log = self.log_file(number)
        give_up = time.monotonic() + self.settings.worker_ready_timeout_s
        while time.monotonic() < give_up:
            with log.open("rb") as stream:
                stream.seek(log_start)
                if READY_MARKER.encode() in stream.read():
                    return
            if not process_alive(pid):
                await asyncio.sleep(0.5)  # look twice: a false "gone" would leave a live worker untracked
                if not process_alive(pid):
                    raise RuntimeError(f"{worker_id(self.model, number)} exited before it was ready; "
                                       f"log {log}:\n{_tail(log, log_start)}")
            await asyncio.sleep(0.2)
        raise TimeoutError(f"{worker_id(self.model, number)} (pid {pid}) not ready after "
                           f"{self.settings.worker_ready_timeout_s:g} s; log {log}:\n{_tail(log, log_start)}")

    async def stop(self, numbers: Collection[int]) -> None:
        """SIGTERM the given workers and wait until each one exited."""
        pids = {n: pid for n, pid in self.running().items() if n in numbers}
        for number, pid in pids.items():
            os.kill(pid, signal.SIGTERM)
            self.echo(f"  SIGTERM {worker_id(self.model, number)} (pid {pid}): finishing its batch, leaving the group")
        give_up = time.monotonic() + self.settings.worker_stop_timeout_s
        waiting = dict(pids)
        while waiting:
            waiting = {n: pid for n, pid in waiting.items() if process_alive(pid)}
            for number in set(pids) - set(waiting):
                self.pid_file(number).unlink(missing_ok=True)
                self.echo(f"  {worker_id(self.model, number)} exited")
                del pids[number]
            if waiting and time.monotonic() > give_up:
                names = ", ".join(f"{worker_id(self.model, n)} (pid {p})" for n, p in sorted(waiting.items()))
                raise TimeoutError(f"still running {self.settings.worker_stop_timeout_s:g} s after SIGTERM: {names}")
            await asyncio.sleep(0.2)


def _tail(log: Path, start: int, limit: int = 3000) -> str:
    with log.open("rb") as stream:
        stream.seek(start)
        return stream.read().decode(errors="replace")[-limit:]


# --- the operation ----------------------------------------------------------------------------


async def request_topic_partitions(settings: ScaleSettings, model: str, requested: int | None) -> int:
    """Partition count of the model's request topics (the fewest of its lanes'), creating the fleet's
    topics when missing: a worker beyond a lane's partition count gets none of that lane."""
    lane_topics = settings.lane_plan.topics(model)
    await ensure_topics(settings, [*lane_topics, DLQ_TOPIC, DEFAULT_RESULTS_TOPIC],
                        max(settings.partitions, requested or 0))
    return min([len(await partitions_of(settings, topic)) for topic in lane_topics])


async def grow_partitions(settings: FleetSettings, topic: str, total: int) -> None:
    admin = new_admin(settings)
    await admin.start()
    try:
        await admin.create_partitions({topic: NewPartitions(total_count=total)})
    finally:
        await admin.close()


async def scale(settings: ScaleSettings, model: str, target: int, *, partitions: int | None = None,
                extra_env: Mapping[str, str] | None = None, echo: Echo = print) -> ScalePlan:
    """Make `target` local workers serve `model`; returns what was done. ScaleRefused changes nothing."""
    workers = LocalWorkers(settings, model, echo)
    current = await request_topic_partitions(settings, model, partitions)
    running = workers.running()
    plan = plan_scale(running.keys(), target, current, partitions)
    if plan.changes_nothing:
        echo(f"{model}: {len(running)} worker(s) running, {current} partitions; nothing to do")
        return plan
    if plan.grow_partitions_to is not None:
        for topic in settings.lane_plan.topics(model):  # every lane, so each worker gets some of each
            have = len(await partitions_of(settings, topic))
            if have < plan.grow_partitions_to:
                echo(f"{topic}: adding partitions {have} -> {plan.grow_partitions_to}")
                await grow_partitions(settings, topic, plan.grow_partitions_to)
        if running:
            # The group leader assigns from its cached metadata, so a worker that was already
            # running can leave the new partitions unassigned until its next metadata refresh.
            echo("  note: running workers see the new partitions at their next metadata refresh "
                 "(Kafka metadata.max.age.ms, 5 min by default); `fleet lag` shows them until then")
    if plan.stop:
        echo(f"{model}: scaling {len(running)} -> {target}, stopping {', '.join(worker_id(model, n) for n in plan.stop)}")
        await workers.stop(plan.stop)
    if plan.start:
        echo(f"{model}: scaling {len(running)} -> {target}, starting "
             f"{', '.join(worker_id(model, n) for n in plan.start)} (logs in {workers.folder})")
        spawned = {n: workers.spawn(n, extra_env or {}) for n in plan.start}
        for number, (pid, log_start) in spawned.items():
            await workers.wait_ready(number, pid, log_start)
            echo(f"  {worker_id(model, number)} (pid {pid}) ready")
    return plan


def status_table(workers: list[WorkerStatus]) -> str:
    rows = [(w.worker_id, str(w.pid or "-"), "yes" if w.alive else "no",
             format_duration(w.uptime_s) if w.uptime_s is not None else "-") for w in workers]
    return format_table(("worker", "pid", "alive", "uptime"), rows, right=("pid", "alive", "uptime"))


def main(argv: list[str] | None = None) -> int:
    settings = ScaleSettings()
    parser = command_parser("scale", __doc__)
    parser.add_argument("model")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--workers", type=int, metavar="N", help="run exactly N local workers")
    action.add_argument("--status", action="store_true", help="list the local workers of the model")
    parser.add_argument("--partitions", type=int, metavar="P", help="first grow the request topic to P partitions")
    args = parser.parse_args(argv)
    if args.status:
        workers = LocalWorkers(settings, args.model).status()
        print(status_table(workers) if workers else f"no local workers of {args.model} under {settings.home}")
        return Exit.OK
    try:
        asyncio.run(scale(settings, args.model, args.workers, partitions=args.partitions))
    except ScaleRefused as refused:
        print(f"refused: {refused}", file=sys.stderr)
        return Exit.UNAVAILABLE
    except (RuntimeError, TimeoutError) as failed:
        print(f"failed: {failed}", file=sys.stderr)
        return Exit.FAILED
    workers = LocalWorkers(settings, args.model).status()
    print(status_table(workers) if workers else f"no local workers of {args.model} left running")
    return Exit.OK


if __name__ == "__main__":
    raise SystemExit(main())
