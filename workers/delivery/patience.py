"""Waiting out a dependency's outage instead of dying of it (DESIGN invariant 8).

`Patience.until_done` retries one delivery step with tenacity: exponential backoff bounded by
`max_backoff_s`, no limit on attempts, because giving up would mean committing past an
undelivered result or exiting. While it waits, `waiting_for` names the dependency (the worker
pauses its partitions and its health endpoints and metrics say what it waits for), and the
log gets one line per dependency per interval, not one per attempt.
"""

import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from aiokafka.errors import KafkaError
from prometheus_client import Gauge
from redis.exceptions import RedisError, SlotNotCoveredError
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, wait_exponential

from common.logs import LogThrottle

T = TypeVar("T")
log = logging.getLogger(__name__)

# What a produce can never get past by waiting: the record or the topic itself is wrong.
PERMANENT_KAFKA_ERRORS = ("MessageSizeTooLargeError", "RecordTooLargeError", "InvalidTopicError",
                          "TopicAuthorizationFailedError", "RecordListTooLargeError")


def is_permanent(exc: BaseException) -> bool:
    """A Kafka error that a retry cannot cure (it concerns one record, not an outage)."""
    return type(exc).__name__ in PERMANENT_KAFKA_ERRORS


def is_outage(exc: BaseException) -> bool:
    """Connection trouble worth waiting out: Redis or Kafka errors other than the permanent ones,
    the OS-level and timeout errors their clients let through, and a Redis Cluster slot without a
    known master while a failover is under way (no RedisError in redis-py)."""
    if is_permanent(exc):
        return False
    return isinstance(exc, (RedisError, KafkaError, ConnectionError, TimeoutError, OSError, SlotNotCoveredError))


class Patience:
    def __init__(self, waiting: Gauge, *, max_backoff_s: float = 5.0, log_every_s: float = 10.0) -> None:
        self._waiting = waiting  # labelled by dependency
        self._max_backoff_s = max_backoff_s
        self._log = LogThrottle(log, log_every_s)
        self._since: dict[str, float] = {}

    @property
    def waiting_for(self) -> dict[str, float]:
        """Dependencies delivery is waiting for now, with how long (s) it has waited for each."""
        now = time.monotonic()
        return {name: now - since for name, since in self._since.items()}

    async def until_done(self, dependency: str, step: Callable[[], Awaitable[T]]) -> T:
        """`step()`, retried through outages of `dependency` until it succeeds; other errors propagate."""
        def note(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome is not None else None
            self._since.setdefault(dependency, time.monotonic())
            self._waiting.labels(dependency=dependency).set(1)
            self._log.log(logging.WARNING, dependency, "delivery waits for %s (attempt %d): %s: %s", dependency,
                          state.attempt_number, type(exc).__name__, str(exc)[:200])

        try:
            async for attempt in AsyncRetrying(retry=retry_if_exception(is_outage), before_sleep=note, reraise=True,
                                               wait=wait_exponential(multiplier=0.05, max=self._max_backoff_s)):
                with attempt:
                    return await step()
        finally:
            self._recovered(dependency)
        raise AssertionError("unreachable: tenacity retries until the step succeeds or reraises")

    def _recovered(self, dependency: str) -> None:
        since = self._since.pop(dependency, None)
        if since is None:
            return
        self._waiting.labels(dependency=dependency).set(0)
        self._log.reset(dependency)
        log.warning("%s answers again; delivery resumed after %.1f s", dependency, time.monotonic() - since)
