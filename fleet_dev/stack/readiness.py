"""Waiting until the stack's servers answer, with tenacity, for `up`, `status`, restarts and the tests."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    RetryError,
    retry_if_not_exception_type,
    stop_after_delay,
    wait_fixed,
)

from common.clients import new_admin, redis_client
from common.settings import FleetSettings
from fleet_dev.stack.proc import StackError

Echo = Callable[[str], None]


class ProcessExited(StackError):
    """The server process died while we waited for it to answer."""


async def wait_for_kafka(
    settings: FleetSettings,
    timeout_s: float,
    *,
    brokers: int = 1,
    alive: Callable[[], bool] | None = None,
    progress: Echo | None = None,
) -> None:
    """Return once Kafka (settings.kafka_bootstrap, with the settings' credentials) answers a
    metadata request naming `brokers` brokers; StackError on timeout."""
    where = f"kafka at {settings.kafka_bootstrap}"
    await wait_until(lambda: _kafka_answers(settings, brokers), where, timeout_s, alive, progress)


async def wait_for_redis(
    settings: FleetSettings, timeout_s: float, *, alive: Callable[[], bool] | None = None, progress: Echo | None = None
) -> None:
    """Return once Redis (settings.redis_url, with the settings' credentials) answers PING; StackError on timeout."""
    where = f"redis at {settings.redis_url_redacted}"
    await wait_until(lambda: _redis_answers(settings), where, timeout_s, alive, progress)


async def _kafka_answers(settings: FleetSettings, brokers: int) -> None:
    admin = new_admin(settings, request_timeout_ms=5000)
    try:
        await admin.start()
        cluster = await admin.describe_cluster()
        named = len(cluster.get("brokers") or [])
        if named < brokers:
            raise ConnectionError(f"metadata names {named} of {brokers} brokers")
    finally:
        await admin.close()


async def _redis_answers(settings: FleetSettings) -> None:
    client = redis_client(settings, socket_connect_timeout=2, socket_timeout=2)
    try:
        if not await client.ping():
            raise ConnectionError("PING was not answered")
    finally:
        await client.aclose()


async def wait_until(
    check: Callable[[], Awaitable[None]],
    what: str,
    timeout_s: float,
    alive: Callable[[], bool] | None = None,
    progress: Echo | None = None,
) -> None:
    """Retry `check` every half second until it returns without raising; StackError after `timeout_s`.

    `alive` ends the wait early (ProcessExited) when the awaited process is gone; `progress`
    hears how long the wait has taken every 5 seconds.
    """
    started = time.monotonic()
    last_report = [started]

    def report(state: RetryCallState) -> None:
        now = time.monotonic()
        if progress is not None and now - last_report[0] >= 5:
            last_report[0] = now
            progress(f"  waiting for {what} ({now - started:.0f}s)")

    retrying = AsyncRetrying(
        stop=stop_after_delay(timeout_s),
        wait=wait_fixed(0.5),
        retry=retry_if_not_exception_type(ProcessExited),
        before_sleep=report,
    )
    try:
        async for attempt in retrying:
            with attempt:
                if alive is not None and not alive():
                    raise ProcessExited(f"{what}: the process exited")
                remaining = max(timeout_s - (time.monotonic() - started), 0.5)
                await asyncio.wait_for(check(), timeout=min(10.0, remaining))
    except RetryError as exc:
        last = exc.last_attempt.exception()
        raise StackError(f"{what} did not answer within {timeout_s:.0f}s: {last!r}") from last


async def answers(check: Awaitable[None]) -> bool:
    """Whether a wait (with a short timeout) succeeded."""
    try:
        await check
    except StackError:
        return False
    return True
