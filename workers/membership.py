"""The life cycle every Kafka reader of a worker process shares (live worker, shadow, replay).

Like aiokafka's own clients: `start()`, an idempotent `stop()`, `async with`; `request_stop()`
asks `run()` to finish what it holds and return. Subclasses open their clients in `_open()`
and register whatever must be closed on `self._exit`; the consumer, when there is one, is left
before anything else closes, so partitions move while the producer can still deliver.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from typing import Self

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition

from common.clients import new_consumer
from common.settings import FleetSettings
from common.startup import waited

log = logging.getLogger(__name__)
# Partitions added by `fleet scale --partitions` are seen within 30 s, not Kafka's default 5 min.
METADATA_MAX_AGE_MS = 30_000
# aiokafka's stop() first lets the group coordinator finish what it is doing, which in a group
# that never settles (a member that stopped answering mid-rebalance) is forever. Past this the
# member goes without a clean leave; the broker drops it after its session timeout.
LEAVE_TIMEOUT_S = 20.0


def group_consumer(settings: FleetSettings, topics: Sequence[str], *, group: str, client_id: str, max_poll_records: int,
                   session_timeout_ms: int, auto_offset_reset: str = "earliest",
                   group_instance_id: str | None = None, fetch_max_wait_ms: int = 500,
                   listener: ConsumerRebalanceListener | None = None) -> AIOKafkaConsumer:
    """A consumer-group member that commits by hand, after delivery; `listener` hears its rebalances."""
    consumer = new_consumer(
        settings, *topics, group_id=group, client_id=client_id, enable_auto_commit=False,
        auto_offset_reset=auto_offset_reset, max_poll_records=max_poll_records, fetch_max_wait_ms=fetch_max_wait_ms,
        metadata_max_age_ms=METADATA_MAX_AGE_MS, session_timeout_ms=session_timeout_ms,
        heartbeat_interval_ms=max(session_timeout_ms // 3, 100), group_instance_id=group_instance_id,
        # A primary forwards to its CPU fallback in transactions on exactly-once lanes: an aborted forward is never served.
        isolation_level="read_committed")
    if listener is not None:
        consumer.subscribe(list(topics), listener=listener)  # the same topics: only the listener is new
    return consumer


async def started_consumer(settings: FleetSettings, what: str, make: Callable[[], AIOKafkaConsumer]) -> AIOKafkaConsumer:
    """A consumer from `make()`, started; a Kafka outage is waited out for up to `startup_timeout_s`
    (common/startup.py), each attempt with a fresh consumer and the failed one closed."""
    async def attempt() -> AIOKafkaConsumer:
        consumer = make()
        try:
            await consumer.start()
        except BaseException:
            # A start cut off at the window's end was waiting for a group that does not settle: its
            # stop would wait for that group too, past the window the process promised to keep.
            await stop_within(consumer, what)
            raise
        return consumer
    return await waited(what, f"Kafka at {settings.kafka_bootstrap} (joining the group)", attempt,
                        settings.startup_timeout_s)


async def stop_within(consumer: AIOKafkaConsumer, what: str) -> None:
    """`consumer.stop()`, given up (with a warning) after LEAVE_TIMEOUT_S. Safe to call while a
    cancellation is being handled (the cleanup of a start cut off by a timeout)."""
    try:
        async with asyncio.timeout(LEAVE_TIMEOUT_S):
            await consumer.stop()
    except TimeoutError:
        log.warning("%s did not leave its group within %g s; closing without a clean leave "
                    "(the broker drops the member after its session timeout)", what, LEAVE_TIMEOUT_S)


class KafkaMember:
    what = "kafka member"  # names the subclass in "not started" errors

    def __init__(self) -> None:
        self._exit = AsyncExitStack()
        self._stop_requested = asyncio.Event()
        self._started = False
        self._consumer: AIOKafkaConsumer | None = None

    async def _open(self) -> None:
        raise NotImplementedError

    async def start(self) -> None:
        if self._started:
            return
        self._started = True
        await self._open()

    async def _leave(self) -> None:
        """Stop consuming (leave the group) before the other clients close; bounded in time."""
        if self._consumer is not None:
            consumer, self._consumer = self._consumer, None
            await stop_within(consumer, self.what)

    async def _unless_stopped(self, step: Awaitable[None]) -> bool:
        """Run `step` unless `request_stop()` comes first (then cancel it): False when stopped."""
        doing = asyncio.ensure_future(step)
        stopping = asyncio.ensure_future(self._stop_requested.wait())
        try:
            await asyncio.wait({doing, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
        if not doing.done():
            doing.cancel()
            await asyncio.gather(doing, return_exceptions=True)
            return False
        doing.result()
        return True

    async def stop(self) -> None:
        await self._leave()
        await self._exit.aclose()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    def request_stop(self) -> None:
        """Finish what is in hand, deliver or publish it, commit, then return from `run()`."""
        self._stop_requested.set()

    def assignment(self) -> frozenset[TopicPartition]:
        """Partitions this member owns right now (empty before it joins)."""
        return frozenset(self._consumer.assignment()) if self._consumer is not None else frozenset()

    def _require_consumer(self) -> AIOKafkaConsumer:
        if self._consumer is None:
            raise RuntimeError(f"{self.what} not started")
        return self._consumer
