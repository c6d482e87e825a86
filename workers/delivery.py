"""Delivering a batch's results: Redis (result key + the waiter's reply stream), results
topics, and the dead-letter queue.

`deliver` returns only when every result is durably somewhere, which is what lets the
worker commit offsets afterwards (at-least-once). Any failure propagates, so the worker
does not commit and the batch is redelivered.
"""

import asyncio
from dataclasses import dataclass

from aiokafka import AIOKafkaProducer
from redis.asyncio import Redis

from schemas.names import DLQ_TOPIC, reply_stream, result_key
from schemas.wire import DeadLetter, Request, Result


@dataclass(frozen=True)
class Outcome:
    """A result and the request it answers (None when the request could not be decoded)."""

    request: Request | None
    result: Result


class ResultSink:
    def __init__(self, redis: Redis, producer: AIOKafkaProducer, *, result_ttl_s: int, reply_stream_maxlen: int = 100_000):
        self._redis = redis
        self._producer = producer
        self._ttl = result_ttl_s
        self._maxlen = reply_stream_maxlen

    async def deliver(self, outcomes: list[Outcome], dead_letters: list[DeadLetter]) -> None:
        sends = [self._send_to_topics(outcomes), self._send_dead_letters(dead_letters)]
        if outcomes:
            sends.append(self._write_redis(outcomes))
        await asyncio.gather(*sends)

    async def _write_redis(self, outcomes: list[Outcome]) -> None:
        pipe = self._redis.pipeline(transaction=False)
        streams: set[str] = set()
        for outcome in outcomes:
            payload = outcome.result.encode()
            pipe.set(result_key(outcome.result.id), payload, ex=self._ttl)
            waiter = outcome.request.reply.redis if outcome.request is not None else None
            if waiter:
                stream = reply_stream(waiter)
                pipe.xadd(stream, {"id": outcome.result.id, "result": payload}, maxlen=self._maxlen, approximate=True)
                streams.add(stream)
        for stream in streams:
            # A waiter that went away leaves a stream nobody reads; let it expire.
            pipe.expire(stream, self._ttl)
        await pipe.execute()

    async def _send_to_topics(self, outcomes: list[Outcome]) -> None:
        futures = []
        for outcome in outcomes:
            topic = outcome.request.reply.topic if outcome.request is not None else None
            if topic:
                key = outcome.result.id.encode()
                futures.append(await self._producer.send(topic, outcome.result.encode(), key=key))
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
