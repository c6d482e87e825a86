"""Opening a process's shared clients at start, waiting out a Kafka or Redis outage meanwhile.

A worker, shadow or gateway started during a broker or Redis restart must not crash-loop: each
start-up step that needs Kafka or Redis (`waited`) is retried with a bounded backoff until it
succeeds or `startup_timeout_s` has passed, with one log line every few seconds saying what the
process waits for. When the time is up the step raises `StartupTimedOut`, whose message is the
one line the process ends with (exit code 3, common.process.ExitCode.DEPENDENCIES).

Check the credentials (common/credentials.py) before this, first thing at start, so a wrong
password fails the process before it spends seconds loading a model: a refusal is never retried.
"""

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from typing import TypeVar

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError
from redis.exceptions import AuthenticationError, RedisError
from tenacity import (AsyncRetrying, RetryCallState, retry_if_exception, stop_after_delay, wait_exponential)

from common.clients import new_producer, redis_client
from common.redis_cluster import AnyRedis
from common.settings import FleetSettings
from common.topics import ensure_topics

log = logging.getLogger(__name__)
T = TypeVar("T")
# What an outage looks like from a client: retried at start. Anything else (a refused password,
# a bug) ends the start at once.
OUTAGE_ERRORS: tuple[type[BaseException], ...] = (KafkaError, RedisError, OSError, TimeoutError)
FIRST_BACKOFF_S = 0.2
MAX_BACKOFF_S = 2.0
LOG_EVERY_S = 5.0


class StartupTimedOut(Exception):
    """A dependency did not answer within the start-up window; str() is the process's last line."""


def is_outage(exc: BaseException) -> bool:
    return isinstance(exc, OUTAGE_ERRORS) and not isinstance(exc, AuthenticationError)


def _describe(exc: BaseException | None) -> str:
    if exc is None:
        return "no answer"
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class _WaitLog:
    """One line every LOG_EVERY_S while a step waits: what for, the last error, the time left."""

    def __init__(self, what: str, waiting_for: str, timeout_s: float) -> None:
        self.what, self.waiting_for, self.timeout_s = what, waiting_for, timeout_s
        self.started = time.monotonic()
        self.logged_at: float | None = None

    def before_sleep(self, state: RetryCallState) -> None:
        now = time.monotonic()
        if self.logged_at is not None and now - self.logged_at < LOG_EVERY_S:
            return
        self.logged_at = now
        error = state.outcome.exception() if state.outcome is not None else None
        log.warning("%s waiting for %s (%s); %.0f s of %.0f s left", self.what, self.waiting_for,
                    _describe(error), max(self.timeout_s - (now - self.started), 0.0), self.timeout_s)


async def waited(what: str, waiting_for: str, step: Callable[[], Awaitable[T]], timeout_s: float, *,
                 deadline: float | None = None) -> T:
    """`step()`'s result, retrying it while it fails for an outage (backoff from 0.2 s doubling to
    2 s) for up to `timeout_s` in all (or until `deadline`, a time.monotonic(), when it comes first:
    steps that share one window); then StartupTimedOut naming `waiting_for` and the last error.
    A single attempt that hangs is cut off at the same deadline."""
    deadline = min(deadline if deadline is not None else float("inf"), time.monotonic() + timeout_s)
    wait_log = _WaitLog(what, waiting_for, timeout_s)
    last: list[BaseException] = []

    async def attempt() -> T:
        try:
            async with asyncio.timeout(max(deadline - time.monotonic(), 0.0)):
                return await step()
        except BaseException as exc:
            if not (isinstance(exc, TimeoutError) and last):  # an attempt cut off at the deadline says less
                last[:] = [exc]
            raise

    try:
        async for retrying in AsyncRetrying(retry=retry_if_exception(is_outage), reraise=True,
                                            stop=stop_after_delay(max(deadline - time.monotonic(), 0.0)),
                                            wait=wait_exponential(multiplier=FIRST_BACKOFF_S, max=MAX_BACKOFF_S),
                                            before_sleep=wait_log.before_sleep):
            with retrying:
                return await attempt()
    except BaseException as exc:
        if not is_outage(exc):
            raise
    raise StartupTimedOut(f"{what} cannot start: {waiting_for} did not answer within {timeout_s:g} s; "
                          f"last error: {_describe(last[0] if last else None)}")


async def open_clients(settings: FleetSettings, exit_stack: AsyncExitStack, redis: AnyRedis | None,
                       producer: AIOKafkaProducer | None, *, topics: list[str], partitions: int,
                       linger_ms: int, what: str = "worker") -> tuple[AnyRedis, AIOKafkaProducer]:
    """Create `topics` if missing, then the clients: the injected ones (tests share theirs), else
    new ones that `exit_stack` closes. Kafka is waited for (see `waited`)."""
    timeout_s = settings.startup_timeout_s
    await waited(what, f"Kafka at {settings.kafka_bootstrap} (creating topics)",
                 lambda: ensure_topics(settings, topics, partitions), timeout_s)
    if redis is None:
        redis = redis_client(settings)
        exit_stack.push_async_callback(redis.aclose)
    if producer is None:
        producer = await waited(what, f"Kafka at {settings.kafka_bootstrap} (starting the producer)",
                                lambda: started_producer(settings, linger_ms), timeout_s)
        exit_stack.push_async_callback(producer.stop)
    return redis, producer


async def started_producer(settings: FleetSettings, linger_ms: int) -> AIOKafkaProducer:
    """A started producer, or the error of its start (with its connections closed)."""
    producer = new_producer(settings, linger_ms=linger_ms)
    try:
        await producer.start()
    except BaseException:
        await producer.stop()
        raise
    return producer
