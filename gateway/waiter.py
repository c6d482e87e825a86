"""Awaiting replies through Redis without a connection per waiting request.

One process has one waiter id and one reply stream (`fleet:reply:<waiter id>`). A single
background task reads the stream with a blocking XREAD and resolves the future of each
request id; thousands of concurrent waits share that one connection.

The reader never gives up: when Redis is away it reconnects forever with bounded backoff and
reports itself down (`down_reason`, for /readyz). Waits go on meanwhile, old and new alike: the
request goes to Kafka, which does not need Redis, and the worker delivers once Redis is back. A
caller whose deadline outlives the outage sees nothing of it. Back, the reader resumes after the
last entry it read, and first reads the result keys (`fleet:result:<id>`) of every pending wait,
so a reply whose stream entry was lost (an AOF that had not synced it) is still found.

Entries read are trimmed away every TRIM_EVERY replies: workers cap a reply stream at
`FLEET_REPLY_STREAM_MAXLEN` entries (100,000), which for embeddings is about 200 MB of Redis per
gateway process holding replies nobody will read again.
"""

import asyncio
import logging
import secrets
import time

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, wait_exponential

from common.redis_cluster import AnyRedis
from common.logs import LogThrottle
from gateway.errors import Overloaded
from schemas.names import reply_stream, result_key
from schemas.wire import Result

log = logging.getLogger(__name__)

READ_BLOCK_MS = 1000
READ_COUNT = 1000
TRIM_EVERY = 1000  # replies read between two trims of the stream (one XTRIM each time)
CATCH_UP_CHUNK = 500  # result keys read in one round trip when the reader is back
STARTING = "starting"
Entries = list[tuple[bytes, list[tuple[bytes, dict[bytes, bytes]]]]]


class ReplyWaiter:
    def __init__(self, redis: AnyRedis, waiter_id: str | None = None, *, max_pending: int = 100_000,
                 max_backoff_s: float = 1.0, log_every_s: float = 10.0) -> None:
        self.waiter_id = waiter_id or secrets.token_hex(8)
        self.stream = reply_stream(self.waiter_id)
        self._redis = redis
        self._max_pending = max_pending
        self._max_backoff_s = max_backoff_s
        self._throttle = LogThrottle(log, log_every_s)
        self._pending: dict[str, asyncio.Future[Result]] = {}
        self._reader: asyncio.Task[None] | None = None
        self._stopping = False
        self._last_id = "0-0"
        self._read_since_trim = 0
        self._down_reason: str | None = STARTING
        self._down_since = time.monotonic()
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def pending(self) -> int:
        return len(self._pending)

    @property
    def down_reason(self) -> str | None:
        """Why replies cannot be read now, or None while the reader reads."""
        if self._reader is None or self._reader.done():
            return "reply reader not running"
        return self._down_reason

    def start(self) -> None:
        if self._reader is None:
            self._stopping = False
            self._loop = asyncio.get_running_loop()
            self._reader = asyncio.create_task(self._read_forever(), name=f"reply-reader-{self.waiter_id}")

    async def stop(self) -> None:
        if self._reader is not None:
            self._stopping = True
            # redis-py can turn a cancellation inside a socket timeout into a TimeoutError, which the
            # reconnect loop would retry: cancel until the reader is really gone.
            while not self._reader.done():
                self._reader.cancel()
                await asyncio.wait({self._reader}, timeout=0.2)
            if not self._reader.cancelled():
                self._reader.exception()  # retrieved: a reader that failed on its way out is not news
            self._reader = None
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(ConnectionError("reply waiter stopped"))

    def expect(self, request_id: str) -> asyncio.Future[Result]:
        """Register interest before producing the request, so no reply can arrive unseen.

        Accepted while the reader cannot read: it reads what was delivered meanwhile once Redis
        is back (`_catch_up`). Overloaded when `max_pending` waits are pending already.
        """
        if self._reader is None or self._loop is None:
            raise RuntimeError("reply waiter is not started")
        future = self._pending.get(request_id)
        if future is None:
            if len(self._pending) >= self._max_pending:
                raise Overloaded(self._max_pending)
            future = self._loop.create_future()
            self._pending[request_id] = future
        return future

    async def wait(self, reply: "asyncio.Future[Result]", timeout_s: float) -> Result:
        """The result of `reply` (from `expect`), or TimeoutError once `timeout_s` has passed;
        `forget` the request id either way.

        A timer on the future rather than asyncio.timeout: on Python 3.11 each asyncio.timeout
        asks the kernel for the process id three times (the fork check of get_running_loop),
        which on the gateway's hot path cost more than the rest of the wait."""
        assert self._loop is not None, "a future from expect() means the waiter was started"
        timer = self._loop.call_later(timeout_s, _time_out, reply)
        try:
            return await reply
        finally:
            timer.cancel()

    def forget(self, request_id: str) -> None:
        future = self._pending.pop(request_id, None)
        if future is not None and not future.done():
            future.cancel()

    async def _read_forever(self) -> None:
        while not self._stopping:
            was_down = await self._connect()
            try:
                if was_down:
                    await self._catch_up()
                while not self._stopping:
                    self._deliver(await self._redis.xread({self.stream: self._last_id}, count=READ_COUNT,
                                                          block=READ_BLOCK_MS))
                    if self._read_since_trim >= TRIM_EVERY:
                        # Approximate: Redis drops whole nodes older than the last entry read, cheaply.
                        await self._redis.xtrim(self.stream, minid=self._last_id, approximate=True)
                        self._read_since_trim = 0
            except Exception as exc:  # whatever Redis did, the reader reconnects; cancellation ends it
                if not self._stopping:
                    self._went_down(exc)

    async def _connect(self) -> bool:
        """PING until Redis answers, forever, with a bounded pause between attempts; True when
        the reader had been down (not merely starting)."""
        async for attempt in AsyncRetrying(retry=retry_if_exception_type(Exception),
                                           wait=wait_exponential(multiplier=0.05, max=self._max_backoff_s),
                                           before_sleep=self._attempt_failed):
            with attempt:
                if self._stopping:
                    raise asyncio.CancelledError
                await self._redis.ping()
        was_down = self._down_reason not in (None, STARTING)
        if was_down:
            held = self._throttle.reset("redis")
            log.info("reply reader for %s reads again after %.1f s (%d reconnection attempts not logged)",
                     self.stream, time.monotonic() - self._down_since, held)
        self._down_reason = None
        return was_down

    async def _catch_up(self) -> None:
        """Resolve the pending waits whose result key is in Redis: results delivered while the
        reader was away, whatever became of their stream entries. CATCH_UP_CHUNK keys a round trip."""
        waiting = list(self._pending)
        for start in range(0, len(waiting), CATCH_UP_CHUNK):
            chunk = waiting[start:start + CATCH_UP_CHUNK]
            async with self._redis.pipeline(transaction=False) as pipe:
                for request_id in chunk:
                    pipe.get(result_key(request_id))
                found = await pipe.execute()
            for request_id, raw in zip(chunk, found):
                if raw is not None:
                    self._resolve(b"catch-up", {b"id": request_id.encode(), b"result": raw})

    def _attempt_failed(self, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        # One failed attempt is not yet an outage when the reader was up or starting: the next comes
        # 50 ms later. A connect whose timer ran out while the event loop was held up by other work
        # (a model loading in the same process, say) had turned a starting client away with a 503.
        if exc is not None and (state.attempt_number > 1 or self._down_reason not in (None, STARTING)):
            self._went_down(exc)

    def _went_down(self, exc: BaseException) -> None:
        if self._down_reason is None:
            self._down_since = time.monotonic()
        self._down_reason = f"{type(exc).__name__}: {exc}"[:300]
        self._throttle.log(logging.WARNING, "redis", "reply reader for %s cannot read from Redis: %s",
                           self.stream, self._down_reason)

    def _deliver(self, entries: Entries) -> None:
        for _stream, stream_entries in entries:
            self._read_since_trim += len(stream_entries)
            for entry_id, fields in stream_entries:
                self._last_id = entry_id
                self._resolve(entry_id, fields)

    def _resolve(self, entry_id: bytes, fields: dict[bytes, bytes]) -> None:
        raw_id = fields.get(b"id")
        if raw_id is None:
            self._throttle.log(logging.WARNING, "malformed", "reply %r on %s has no id; skipped", entry_id, self.stream)
            return
        future = self._pending.pop(raw_id.decode(errors="replace"), None)
        if future is None or future.done():
            return  # a duplicate delivery, or a caller that stopped waiting: first reply wins
        try:
            future.set_result(Result.decode(fields.get(b"result", b"")))
        except Exception as exc:
            future.set_exception(exc)


def _time_out(reply: "asyncio.Future[Result]") -> None:
    if not reply.done():
        reply.set_exception(TimeoutError())
