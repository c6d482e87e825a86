"""What every fleet process does at its edges: fail fast and loud at start, and end within its
grace period once told to stop, whatever Kafka and Redis do meanwhile."""

import asyncio
import ctypes
import ctypes.util
import logging
import os
import threading
import time
from collections.abc import Collection
from enum import IntEnum
from typing import Any

from common.clients import new_admin, redis_client
from common.credentials import verify_credentials
from common.settings import FleetSettings
from common.startup import waited

log = logging.getLogger(__name__)


class ExitCode(IntEnum):
    OK = 0
    CANNOT_BIND = 2
    DEPENDENCIES = 3
    GRACE_EXCEEDED = 4
    # 5 is the gateway's unusable keys file (gateway/main.py).
    WRONG_INSTALL = 6  # the installed libraries cannot serve the settings (e.g. device cuda on the CPU flavour)


BACKGROUND_STOP_S = 5.0  # what a process's stop waits for a background loop that swallowed its cancel


async def cancel_within(tasks: Collection["asyncio.Task[Any]"], within_s: float) -> None:
    """Cancel `tasks` and wait at most `within_s` for them to end, cancelling again those still running:
    a background loop that retries through Redis outages may swallow one cancellation (on Python 3.11,
    a cancel landing as a command's timeout fires comes out as redis' TimeoutError, which the loop
    catches as an outage), and a shutdown must not wait on it for ever."""
    pending = set(tasks)
    deadline = time.monotonic() + within_s
    while pending and (left := deadline - time.monotonic()) > 0:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=min(left, 0.2))
    if pending:
        log.warning("%d background task(s) did not end within %.1f s of being cancelled", len(pending), within_s)


async def kafka_answers(settings: FleetSettings) -> None:
    """Kafka lists its topics, or the error is raised."""
    admin = new_admin(settings)
    try:
        await admin.start()
        await admin.list_topics()
    finally:
        await admin.close()


async def redis_answers(settings: FleetSettings) -> None:
    redis = redis_client(settings)
    try:
        await redis.ping()
    finally:
        await redis.aclose()


async def wait_for_dependencies(settings: FleetSettings, what: str) -> None:
    """Return once Kafka, then Redis, answer. While one does not, wait (one log line every few
    seconds naming it), both together for up to `startup_timeout_s`, then raise StartupTimedOut.
    Refused credentials raise CredentialsRejected at once: waiting does not heal a wrong password."""
    timeout_s = settings.startup_timeout_s
    deadline = time.monotonic() + timeout_s
    await verify_credentials(settings)
    await waited(what, f"Kafka at {settings.kafka_bootstrap}", lambda: kafka_answers(settings), timeout_s,
                 deadline=deadline)
    await waited(what, f"Redis at {settings.redis_url_redacted}", lambda: redis_answers(settings), timeout_s,
                 deadline=deadline)


def arm_watchdog(grace_s: float) -> None:
    """From now on the process has `grace_s` to end by itself; after that it is ended here."""
    def give_up() -> None:
        log.error("shutdown took longer than %.1f s; exiting now", grace_s)
        logging.shutdown()
        os._exit(ExitCode.GRACE_EXCEEDED)

    watchdog = threading.Timer(grace_s, give_up)
    watchdog.daemon = True
    watchdog.start()


def return_memory() -> bool:
    """Ask glibc to hand freed heap back to the OS (malloc_trim); False where there is no glibc."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        return bool(ctypes.CDLL(name).malloc_trim(0))
    except (OSError, AttributeError):
        return False
