"""Delivering a batch's results: Redis (result key + the waiter's reply stream), results
topics, and the dead-letter queue.

`deliver` returns only when every result is durably somewhere, which is what lets the
worker commit offsets afterwards (at-least-once). Any failure propagates, so the worker
does not commit and the batch is redelivered.
"""

import asyncio
from dataclasses import dataclass
from typing import Protocol
from functools import cached_property

from aiokafka import AIOKafkaProducer
from redis.asyncio import Redis

from schemas.names import DLQ_TOPIC, reply_stream, result_key
from schemas.wire import DeadLetter, Request, Result


class _Record(Protocol):
    topic: str
    partition: int


class HasRecord(Protocol):
    """A request and the Kafka record it came in (triage's `Ready`)."""

    @property
    def request(self) -> Request: ...

    @property
    def record(self) -> _Record: ...


# KEYS: the batch's result keys, then its reply streams. ARGV: ttl, stream maxlen, result count,
# then per result: request id, msgpack result, 1-based reply-stream index (0: no waiter).
# (One script touches many keys: on Redis Cluster they would need one hash slot.)
DELIVER_SCRIPT = """
local ttl, maxlen, n = ARGV[1], ARGV[2], tonumber(ARGV[3])
for i = 1, n do
  local id, payload, stream = ARGV[1 + 3 * i], ARGV[2 + 3 * i], tonumber(ARGV[3 + 3 * i])
  redis.call('SET', KEYS[i], payload, 'EX', ttl)
  if stream > 0 then
    redis.call('XADD', KEYS[n + stream], 'MAXLEN', '~', maxlen, '*', 'id', id, 'result', payload)
  end
end
for j = n + 1, #KEYS do
  redis.call('EXPIRE', KEYS[j], ttl)
end
return n
"""


@dataclass(frozen=True)
class Outcome:
    """A result and the request it answers (None when the request could not be decoded)."""

    request: Request | None
    result: Result
    source: tuple[str, int] | None = None  # (topic, partition) the request was read from

    @classmethod
    def of(cls, item: "HasRecord", result: Result) -> "Outcome":
        return cls(item.request, result, (item.record.topic, item.record.partition))

    @cached_property
    def payload(self) -> bytes:
        """The result as delivered, packed once for Redis and the results topic, stamped with the
        request's tenant so that only that tenant may read it."""
        tenant = self.request.tenant if self.request is not None else None
        if tenant is None or self.result.tenant == tenant:
            return self.result.encode()
        return self.result.model_copy(update={"tenant": tenant}).encode()


class ResultSink:
    def __init__(self, redis: Redis, producer: AIOKafkaProducer, *, result_ttl_s: int, reply_stream_maxlen: int = 100_000):
        self._redis = redis
        self._producer = producer
        self._ttl = result_ttl_s
        self._maxlen = reply_stream_maxlen
        self._deliver_script = redis.register_script(DELIVER_SCRIPT)

    async def deliver(self, outcomes: list[Outcome], dead_letters: list[DeadLetter]) -> None:
        sends = [self._send_to_topics(outcomes), self._send_dead_letters(dead_letters)]
        if outcomes:
            sends.append(self._write_redis(outcomes))
        await asyncio.gather(*sends)

    async def _write_redis(self, outcomes: list[Outcome]) -> None:
        """Every result key and reply-stream entry of a batch in one script call: one command to
        pack and one reply to parse instead of two per result, which is most of what a cache hit
        costs the worker."""
        streams: dict[str, int] = {}
        keys: list[str] = []
        args: list[bytes | str | int] = [self._ttl, self._maxlen, len(outcomes)]
        for outcome in outcomes:
            keys.append(result_key(outcome.result.id))
            waiter = outcome.request.reply.redis if outcome.request is not None else None
            stream = streams.setdefault(reply_stream(waiter), len(streams) + 1) if waiter else 0
            args += [outcome.result.id, outcome.payload, stream]
        await self._deliver_script(keys=keys + list(streams), args=args)

    async def _send_to_topics(self, outcomes: list[Outcome]) -> None:
        futures = []
        for outcome in outcomes:
            topic = outcome.request.reply.topic if outcome.request is not None else None
            if topic:
                key = outcome.result.id.encode()
                futures.append(await self._producer.send(topic, outcome.payload, key=key))
        if futures:
            await asyncio.gather(*futures)

    async def _send_dead_letters(self, dead_letters: list[DeadLetter]) -> None:
        futures = [await self._producer.send(DLQ_TOPIC, letter.encode()) for letter in dead_letters]
        if futures:
            await asyncio.gather(*futures)

    async def forward(self, topic: str, originals: list[tuple[bytes | None, bytes]]) -> None:
        """Hand requests, byte for byte, to another topic (the CPU fallback) before committing them here."""
        futures = [await self._producer.send(topic, value, key=key) for key, value in originals]
        if futures:
            await asyncio.gather(*futures)
