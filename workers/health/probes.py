"""What a worker process answers to an orchestrator's probes: is it alive, may it take work now.

Liveness is about the process: its event loop answers (the endpoints are served from that
loop, so a wedged loop times the probe out) and its run loop, which owns the collect,
compute and deliver stages, has not ended. Restarting is the cure for either, so liveness
fails on nothing else: a sick device or a drain is readiness' business, and the worker
recovers from those by itself.

Readiness is about the consumer group: the model is loaded, the run loop is serving, no stop
was asked for, and the worker may serve (health healthy or degraded, not drained). The
worker's own run loop leaves the group whenever it may not serve and rejoins as soon as it
may, so "may serve while the run loop runs" is what being a serving member of the group
means. Owning partitions is reported but not required: a member beyond the partition count
owns none, and a rolling update's surge pod must still count as ready.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workers.worker import Worker


@dataclass(frozen=True)
class Verdict:
    ok: bool
    detail: dict[str, Any] = field(default_factory=dict)


class ProcessProbes:
    """Liveness and readiness of a process that serves through one run loop (a shadow worker as is;
    `WorkerProbes` adds the live worker's health and drain switch)."""

    def __init__(self, worker_id: str) -> None:
        self.worker_id = worker_id
        self._run: asyncio.Task[int] | None = None
        self._stopping = False

    async def watch(self, run: Coroutine[Any, Any, int]) -> int:
        """Run the process's run loop as a task the probes can see, and return what it returns."""
        self._run = asyncio.create_task(run, name=f"run-{self.worker_id}")
        return await self._run

    def stopping(self) -> None:
        """A stop was asked for (SIGTERM): not ready any more, and the run loop ending is expected."""
        self._stopping = True

    def stop_on_signals(self, request_stop: Callable[[], None]) -> None:
        """On SIGTERM or SIGINT: report stopping, then ask the run loop to finish what it holds and return."""
        def stop() -> None:
            self.stopping()
            request_stop()

        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop)

    def live(self) -> Verdict:
        if self._run is not None and self._run.done() and not self._stopping:
            return Verdict(False, {"live": False, "worker": self.worker_id, "reason": self._ended()})
        return Verdict(True, {"live": True, "worker": self.worker_id, "phase": self._phase()})

    def ready(self) -> Verdict:
        if self._stopping:
            reason: str | None = "stopping"
        elif self._run is None:
            reason = "starting: loading the model and joining the group"
        elif self._run.done():
            reason = self._ended()
        else:
            reason = self.refusal()
        detail: dict[str, Any] = {"ready": reason is None, "worker": self.worker_id}
        if reason is not None:
            detail["reason"] = reason
        if self._run is not None:
            detail |= self.details()
        return Verdict(reason is None, detail)

    def refusal(self) -> str | None:
        """Why the started process may not serve now, or None."""
        return None

    def details(self) -> dict[str, Any]:
        """What else a readiness answer tells an operator, once the process has started."""
        return {}

    def _phase(self) -> str:
        if self._stopping:
            return "stopping"
        return "starting" if self._run is None else "serving"

    def _ended(self) -> str:
        assert self._run is not None
        if self._run.cancelled():
            return "run loop cancelled"
        error = self._run.exception()
        return f"run loop failed: {error!r}" if error is not None else "run loop returned"


class WorkerProbes(ProcessProbes):
    """A live worker's probes: readiness also needs its model on its device, a health state that
    may serve and no drain switch. Reads only the worker's public state."""

    def __init__(self, worker: Worker) -> None:
        super().__init__(worker.worker_id)
        self._worker = worker

    def refusal(self) -> str | None:
        if self._worker.unavailable is not None:
            return f"device unavailable: {self._worker.unavailable}"
        supervisor = self._worker.supervisor
        if supervisor.drained:
            return "drained"
        if not supervisor.may_serve:
            return f"health {supervisor.health.state.value}: {supervisor.health.reason}"
        return None

    def details(self) -> dict[str, Any]:
        detail: dict[str, Any] = {"group": self._worker.group, "partitions": len(self._worker.assignment())}
        if self._worker.unavailable is None:
            health = self._worker.supervisor.health
            detail |= {"state": health.state.value, "health_reason": health.reason,
                       "drained": self._worker.supervisor.drained}
        return detail
