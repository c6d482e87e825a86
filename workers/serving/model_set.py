"""The versions of one model a worker holds in memory, and which of them answer traffic.

Hot swap is a double buffer: a new version is loaded and warmed in a thread while the
current ones keep serving, then `serving` (an immutable `Serving`) is replaced in one
assignment. The collect stage reads `serving` once per micro-batch, so a switch always falls
between batches and no request waits on a load. Replaced versions stay resident while the
memory budget allows, so a rollback is a pointer switch, not a reload (seed §3.3: the
40-second outage while the old model reloads).
"""

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from models.backends.base import Backend
from versions.pointers import ServingPointers
from versions.routing import version_for

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Serving:
    """Which resident version answers a request: its pin, else stable or candidate by a
    deterministic hash of its id against the rollout percentage."""

    stable: Backend
    candidate: Backend | None = None
    percent: float = 0.0

    def pick(self, request_id: str, pinned: str | None, resident: Mapping[str, Backend]) -> Backend | None:
        """The backend for one request; None when it pins a version that is not resident."""
        if pinned is not None:
            return resident.get(pinned)
        if self.candidate is not None and self.percent > 0 and version_for(request_id, self.percent) == "candidate":
            return self.candidate
        return self.stable


class ModelSet:
    """Resident versions, least recently served first; `apply` loads what pointers name."""

    def __init__(self, initial: Backend, load: Callable[[str], Backend], *, budget_bytes: int,
                 size_of: Callable[[Backend], int], on_load: Callable[[Backend, float], None] | None = None) -> None:
        self._load = load
        self._size_of = size_of
        self._on_load = on_load
        self.budget_bytes = budget_bytes
        self.resident: OrderedDict[str, Backend] = OrderedDict({initial.manifest.id: initial})
        self.serving = Serving(stable=initial)
        self.loads = 0
        self.unloads = 0
        self._lock = asyncio.Lock()

    @property
    def pointers(self) -> ServingPointers:
        candidate = self.serving.candidate
        return ServingPointers(self.serving.stable.manifest.id, candidate.manifest.id if candidate else None,
                        self.serving.percent)

    async def apply(self, wanted: ServingPointers) -> bool:
        """Make `wanted` the serving set, loading missing versions first; True when anything changed.

        Raises what loading raises (unknown version, integrity failure); the serving set is
        then left as it was.
        """
        async with self._lock:
            if wanted == self.pointers:
                return False
            for version in (wanted.stable, wanted.candidate):
                if version is not None and version not in self.resident:
                    await self._load_resident(version)
            candidate = self.resident[wanted.candidate] if wanted.candidate is not None else None
            self.serving = Serving(stable=self.resident[wanted.stable], candidate=candidate,
                                   percent=wanted.percent if candidate is not None else 0.0)
            for version in (wanted.candidate, wanted.stable):
                if version is not None:
                    self.resident.move_to_end(version)
            self._unload_over_budget()
            log.info("serving stable %s, candidate %s at %.1f%%; resident: %s", wanted.stable, wanted.candidate,
                     self.serving.percent, ", ".join(self.resident))
            return True

    async def _load_resident(self, version: str) -> None:
        started = time.perf_counter()
        backend = await asyncio.to_thread(self._load, version)
        elapsed = time.perf_counter() - started
        task, serving_task = backend.manifest.task, self.serving.stable.manifest.task
        if task != serving_task:
            # Requests are read by the served task (models/tasks): a version of another task would
            # get inputs it cannot take, and callers answers of another shape.
            raise ValueError(f"{version} is a {task} model and this worker serves {serving_task}: a model keeps "
                             "its task across versions (register it under another name)")
        self.resident[version] = backend
        self.loads += 1
        log.info("loaded and warmed %s in %.2f s beside the serving versions", version, elapsed)
        if self._on_load is not None:
            self._on_load(backend, elapsed)

    def _unload_over_budget(self) -> None:
        live = {self.serving.stable.manifest.id}
        if self.serving.candidate is not None:
            live.add(self.serving.candidate.manifest.id)
        while sum(self._size_of(b) for b in self.resident.values()) > self.budget_bytes:
            spare = next((version for version in self.resident if version not in live), None)
            if spare is None:
                log.warning("stable and candidate together exceed the model memory budget of %d MB",
                            self.budget_bytes >> 20)
                return
            del self.resident[spare]
            self.unloads += 1
            log.info("unloaded %s: over the model memory budget", spare)
