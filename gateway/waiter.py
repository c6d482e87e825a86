"""Awaiting replies through Redis without a connection per waiting request.

One process has one waiter id and one reply stream (`fleet:reply:<waiter id>`). A single
background task reads the stream with a blocking XREAD and resolves the future of each
request id; thousands of concurrent waits share that one connection. If the reader fails
for good, its exception is passed to every pending future (as aiokafka does), so callers
never hang on a dead reader.
"""

import asyncio
import logging
import secrets

from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from tenacity import AsyncRetrying, retry_if_exception_type, wait_exponential

from schemas.names import reply_stream
from schemas.wire import Result

log = logging.getLogger(__name__)

READ_BLOCK_MS = 1000
READ_COUNT = 1000


class ReplyWaiter:
    def __init__(self, redis: Redis, waiter_id: str | None = None, *, reconnect_for_s: float = 30.0) -> None:
        self.waiter_id = waiter_id or secrets.token_hex(8)
        self.stream = reply_stream(self.waiter_id)
        self._redis = redis
        self._reconnect_for_s = reconnect_for_s
        self._pending: dict[str, asyncio.Future[Result]] = {}
        self._reader: asyncio.Task[None] | None = None
        self._last_id = "0-0"

    @property
    def pending(self) -> int:
        return len(self._pending)

    def start(self) -> None:
        if self._reader is None:
            self._reader = asyncio.create_task(self._read_forever(), name=f"reply-reader-{self.waiter_id}")

    async def stop(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            try:
                await self._reader
            except (asyncio.CancelledError, Exception):
                pass
            self._reader = None
        self._fail_all(ConnectionError("reply waiter stopped"))

    def expect(self, request_id: str) -> asyncio.Future[Result]:
        """Register interest before producing the request, so no reply can arrive unseen."""
        if self._reader is None or self._reader.done():
            raise RuntimeError("reply waiter is not running")
        future = self._pending.get(request_id)
        if future is None:
            future = asyncio.get_running_loop().create_future()
            self._pending[request_id] = future
        return future

    def forget(self, request_id: str) -> None:
        future = self._pending.pop(request_id, None)
        if future is not None and not future.done():
            future.cancel()

    async def _read_forever(self) -> None:
        try:
            while True:
                for _stream, entries in await self._read_with_retry():
                    for entry_id, fields in entries:
                        self._last_id = entry_id
                        self._resolve(fields)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.error("reply reader for %s failed: %s", self.stream, exc)
            self._fail_all(exc)
            raise

    async def _read_with_retry(self) -> list[tuple[bytes, list[tuple[bytes, dict[bytes, bytes]]]]]:
        """One blocking XREAD; connection trouble is retried until reconnect_for_s were spent backing off.

        (Not tenacity's stop_after_delay: that counts from the start of the first attempt, so a
        read stalled longer than the window would never be retried.)
        """
        window = self._reconnect_for_s
        async for attempt in AsyncRetrying(
            retry=retry_if_exception_type((RedisConnectionError, RedisTimeoutError, OSError)),
            wait=wait_exponential(multiplier=0.05, max=2.0),
            stop=lambda state: state.idle_for >= window,
            reraise=True,
        ):
            with attempt:
                return await self._redis.xread({self.stream: self._last_id}, count=READ_COUNT, block=READ_BLOCK_MS)
        raise AssertionError("unreachable: tenacity reraises the last error")

    def _resolve(self, fields: dict[bytes, bytes]) -> None:
        request_id = fields[b"id"].decode()
        future = self._pending.pop(request_id, None)
        if future is None or future.done():
            return  # a duplicate delivery, or a caller that stopped waiting: first reply wins
        try:
            future.set_result(Result.decode(fields[b"result"]))
        except Exception as exc:
            future.set_exception(exc)

    def _fail_all(self, exc: BaseException) -> None:
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(exc)
