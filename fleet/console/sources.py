"""What each page shows, read through the functions the `fleet` commands call; an unreachable
Redis or Kafka becomes an `Outage` in words for its section, and the rest of the page stays."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aiokafka.errors import KafkaError
from redis.exceptions import RedisError

from common.catalog import read_catalog
from common.heartbeats import WorkerInfo, list_workers
from common.redis_cluster import AnyRedis
from fleet.commands.lag import GroupLag, format_duration
from fleet.commands.workers import state_cell
from fleet.console.cache_rates import cache_words
from fleet.console.lag_monitor import LagMonitor
from fleet.console.semantic_bounds import bound_lines
from fleet.console.throughput import ThroughputMemory, VersionFigures
from versions import PointerState, VersionPointers

T = TypeVar("T")
CALL_TIMEOUT_S = 3.0
HEALTHY = "healthy"
SLOW_DRAIN_S = 60.0
LATE_BEAT_S = 3.0  # workers beat every second; three missed beats are worth a line


@dataclass(frozen=True)
class Outage:
    server: str
    cannot_show: str
    detail: str

    @property
    def words(self) -> str:
        return f"{self.server} does not answer ({self.detail}): {self.cannot_show} cannot be shown."


class Gathered:
    """Collects outages while a page reads its sources."""

    def __init__(self) -> None:
        self.outages: list[Outage] = []

    async def read(self, server: str, cannot_show: str, call: Awaitable[T], default: T) -> T:
        try:
            return await asyncio.wait_for(call, CALL_TIMEOUT_S)
        except (RedisError, KafkaError, OSError, TimeoutError) as exc:
            if not any(o.server == server and o.cannot_show == cannot_show for o in self.outages):
                self.outages.append(Outage(server, cannot_show, type(exc).__name__))
            return default


@dataclass
class ModelView:
    name: str
    workers: list[WorkerInfo] = field(default_factory=list)
    pointers: PointerState | None = None
    lag: GroupLag | None = None
    problems: list[str] = field(default_factory=list)
    figures: list[VersionFigures] = field(default_factory=list)
    bounds: list[str] = field(default_factory=list)  # the semantic tier's learned bounds, when on

    @property
    def cache_text(self) -> str:
        return cache_words(self.workers)

    @property
    def drain_text(self) -> str:
        return "-" if self.lag is None else format_duration(self.lag.drain_s)


def worker_problem(worker: WorkerInfo) -> str | None:
    if worker.age_s > LATE_BEAT_S:
        return f"worker {worker.worker} has not sent a heartbeat for {worker.age_s:.1f} s"
    if worker.drained:
        return f"worker {worker.worker} is drained: it takes no work until undrained"
    if worker.state != HEALTHY:
        why = f" ({worker.reason})" if worker.reason else ""
        return f"worker {worker.worker} is {worker.state}{why}"
    return None


def lag_problem(lag: GroupLag) -> str | None:
    """Judged on the group's first lane, the one whose callers wait: a bulk lane lags for hours by
    design, and while the lanes above it are busy it is paused for seconds at a time."""
    lanes = lag.by_lane()
    first = lanes[0] if lanes else None
    behind, drain_s = (first.lag, first.drain_s) if first is not None else (lag.lag, lag.drain_s)
    where = f"group {lag.group}" + (f" (lane {first.lane})" if first is not None and len(lanes) > 1 else "")
    if behind and drain_s == float("inf"):
        return f"{where} is stalled: {behind} records behind and not moving"
    if drain_s > SLOW_DRAIN_S:
        return f"{where} is {behind} records behind, {format_duration(drain_s)} to drain"
    return None


def model_problems(view: ModelView) -> list[str]:
    problems = [p for w in view.workers if (p := worker_problem(w)) is not None]
    if not any(w.serving_primary for w in view.workers):
        problems.insert(0, f"no healthy primary worker serves {view.name}")
    if view.lag is not None and (p := lag_problem(view.lag)) is not None:
        problems.append(p)
    if view.pointers is not None and view.pointers.state == "paused":
        problems.append(f"the rollout of {view.pointers.candidate} is paused: {view.pointers.reason}")
    return problems


async def served_figures(redis: AnyRedis, view: ModelView, memory: ThroughputMemory,
                         gathered: Gathered) -> list[VersionFigures]:
    """Recent throughput, p99 and error rate of each version the model's workers serve."""
    found = []
    for version in sorted({w.version for w in view.workers if w.version}):
        figures = await gathered.read("Redis", "workers and pointers", memory.figures(redis, view.name, version), None)
        if figures is not None:
            found.append(figures)
    return found


async def overview(redis: AnyRedis, monitor: LagMonitor, memory: ThroughputMemory,
                   gathered: Gathered) -> list[ModelView]:
    """Per served model: workers, pointers, lag, problems; models with problems first.

    Served: what the catalogue lists and what live workers serve, less the retired (common/catalog.py),
    as the gateways see it, and any group with records waiting (a backlog nobody serves is news). Not
    every folder of the registry nor every group Kafka remembers: the cache verifier the workers use
    inside, drained benchmark copies and abandoned imports are not served, and would only bury the
    real alerts under "no healthy primary worker". While Redis is away, Kafka's groups stand in."""
    workers = await gathered.read("Redis", "workers and pointers", list_workers(redis), [])
    catalogue = await gathered.read("Redis", "workers and pointers", read_catalog(redis), None)
    waiting = {group for group, lag in monitor.latest.items() if lag.lag > 0}
    if catalogue is None:
        names = {w.model for w in workers} | set(monitor.latest)
    else:
        retired = {model for model, entry in catalogue.items() if entry.retired}
        listed = {model for model, entry in catalogue.items() if not entry.retired}
        names = (listed | {w.model for w in workers} | waiting) - retired
    names = {n for n in names if "." not in n}  # shadow groups (model.shadow) show under their model
    if monitor.problem is not None:
        gathered.outages.append(Outage("Kafka", "consumer-group lag and its history", monitor.problem))
    views = []
    for name in sorted(names):
        view = ModelView(name, [w for w in workers if w.model == name], lag=monitor.latest.get(name))
        if not any(o.server == "Redis" for o in gathered.outages):
            view.pointers = await gathered.read("Redis", "workers and pointers", VersionPointers(redis, name).get(), None)
            view.figures = await served_figures(redis, view, memory, gathered)
            view.bounds = await gathered.read("Redis", "workers and pointers",
                                              bound_lines(redis, name, {w.version for w in view.workers}), [])
        view.problems = model_problems(view)
        views.append(view)
    views.sort(key=lambda v: (not v.problems, v.name))
    return views


def worker_row(worker: WorkerInfo) -> dict[str, Any]:
    return {"worker": worker.worker, "role": worker.role, "device": worker.device, "state": state_cell(worker),
            "healthy": worker.state == HEALTHY and not worker.drained, "version": worker.version,
            "lag": worker.lag, "age": f"{worker.age_s:.1f}s ago", "drained": worker.drained,
            "batch": f"{worker.batch} / {worker.max_batch}" if worker.max_batch else "-"}
