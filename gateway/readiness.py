"""What /readyz answers: whether Kafka and Redis answer, asked at most once a second; and
`ModelReadiness`: whether a live worker serves a model, for the Open Inference Protocol's ready routes.

/readyz is open to everyone (an orchestrator's probe carries no key). Asked on every call, a burst
of probes pinged Redis and fetched Kafka's metadata once each, all at once: 300 of them took the
connection pool that key lookups and replies use, so the gateway reported itself down and turned
real tenants away while Redis was fine. Here one check runs at a time, every caller meanwhile gets
its answer, and the answer serves for `fresh_s` after it, so probes cost Kafka and Redis nothing
more however many arrive.
"""

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from common.heartbeats import SERVING_STATES, WorkerInfo, list_workers
from common.redis_cluster import AnyRedis
from gateway.shared_fetch import SharedFetch
from schemas.names import versions_key

Check = Callable[[], Awaitable[Any]]
SHADOW = "shadow"  # a shadow consumer's role: it answers no caller
MAX_MODELS = 10_000  # stable pointers remembered


class Readiness:
    def __init__(self, checks: dict[str, Check], *, timeout_s: float, fresh_s: float = 1.0) -> None:
        """`checks`: name -> a call that raises (or hangs past `timeout_s`) when that dependency is down."""
        self._checks = checks
        self._timeout_s = timeout_s
        self._fresh_s = fresh_s
        self._answers_of_all: SharedFetch[dict[str, bool]] = SharedFetch(self._ask)

    async def checks(self) -> dict[str, bool]:
        """Each dependency's answer, at most `fresh_s` old."""
        shared = self._answers_of_all
        if shared.value is not None and shared.age_s() < self._fresh_s:
            return dict(shared.value)
        return dict(await shared.refresh())

    async def _ask(self) -> dict[str, bool]:
        names = list(self._checks)
        answers = await asyncio.gather(*(self._answers(self._checks[name]) for name in names))
        return dict(zip(names, answers, strict=True))

    async def _answers(self, check: Check) -> bool:
        try:
            async with asyncio.timeout(self._timeout_s):
                await check()
            return True
        except Exception:
            return False


@dataclass(frozen=True)
class Served:
    """Whether a model is ready, as the Open Inference Protocol's clients mean it, and why not."""

    ready: bool
    reason: str = ""


class ModelReadiness:
    """Whether a live worker serves a model's stable version (or a pinned version) now.

    Read from the workers' heartbeats and the stable pointers at most once per `fresh_s`, one read
    shared by every caller meanwhile: the server's readiness route is open to everyone."""

    def __init__(self, redis: Callable[[], AnyRedis], *, fresh_s: float = 1.0) -> None:
        self._redis = redis
        self._fresh_s = fresh_s
        self._workers: SharedFetch[list[WorkerInfo]] = SharedFetch(lambda: list_workers(self._redis()))
        self._stable: dict[str, tuple[float, str | None]] = {}

    async def of(self, model: str, version: str | None = None) -> Served:
        """Raises what Redis raises when it does not answer."""
        shared = self._workers
        workers = shared.value if shared.value is not None and shared.age_s() < self._fresh_s else \
            await shared.refresh()
        serving = [w for w in workers if w.model == model and w.role != SHADOW and w.state in SERVING_STATES
                   and not w.drained]
        wanted = version if version is not None else await self._stable_of(model)
        if wanted is not None:
            if any(w.version == wanted for w in serving):
                return Served(True)
            return Served(False, f"no live worker serves version {wanted} of {model}" + (
                f" (they serve {', '.join(sorted({w.version for w in serving}))})" if serving else ""))
        if serving:
            return Served(True)
        return Served(False, f"no live worker serves {model}")

    async def _stable_of(self, model: str) -> str | None:
        now = time.monotonic()
        cached = self._stable.get(model)
        if cached is not None and now - cached[0] < self._fresh_s:
            return cached[1]
        raw = await self._redis().hget(versions_key(model), "stable")  # type: ignore[misc]
        stable = (raw.decode() if isinstance(raw, bytes) else raw) or None
        if len(self._stable) >= MAX_MODELS:
            self._stable.clear()
        self._stable[model] = (now, stable)
        return stable
