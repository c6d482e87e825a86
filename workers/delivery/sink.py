"""Delivering a batch's results: Redis (result key + the waiter's reply stream), results
topics, and the dead-letter queue.

`deliver` returns only when every result is durably somewhere, which is what lets the
worker commit offsets afterwards (at-least-once). An outage of Redis or Kafka is waited out
(workers/delivery/patience.py), never passed on; a result that its topic refuses for good
(too large, a topic Kafka will not take) becomes a dead letter instead, so one record never
holds up its partition. A stored `ok` or `degraded` result is never replaced by a later
`error` or `expired` one for the same id (a redelivered record past its deadline).
"""

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

import msgpack
from aiokafka import AIOKafkaProducer
from redis.asyncio.cluster import RedisCluster

from common.redis_cluster import AnyRedis
from schemas.names import DLQ_TOPIC, reply_stream, result_key
from schemas.wire import DeadLetter, Request, Result, Status
from workers.delivery.batched_produce import Send, produce_batched, send_alone
from workers.delivery.cluster_writes import ResultWrite, write_on_cluster
from workers.delivery.replication import Replication
from workers.delivery.turns import Turn, Turns
from workers.delivery.dead_letters import DeadLetterPolicy
from workers.delivery.patience import Patience, is_outage

# KEYS: the batch's result keys, then its reply streams. ARGV: ttl, stream maxlen, then one msgpack
# array holding per result: request id, msgpack result, 1-based reply-stream index (0: no waiter),
# and 1 when the result is final (ok, degraded): only a final result replaces a stored one. One
# blob instead of four arguments a result: redis-py packs every argument in Python, which cost
# more than the rest of the delivery (Redis's cmsgpack predates msgpack's bin type: bytes go as str).
# One script touches many keys, which a Redis Cluster refuses unless they share a slot: there
# workers/delivery/cluster_writes.py does the same in two pipelined steps.
DELIVER_SCRIPT = """
local ttl, maxlen = ARGV[1], ARGV[2]
local items = cmsgpack.unpack(ARGV[3])
local n = #items / 4
for i = 1, n do
  local base = 4 * (i - 1)
  local id, payload, stream, final = items[base + 1], items[base + 2], items[base + 3], items[base + 4]
  local written
  if final == 1 then
    written = redis.call('SET', KEYS[i], payload, 'EX', ttl)
  else
    written = redis.call('SET', KEYS[i], payload, 'EX', ttl, 'NX')
  end
  if written and stream > 0 then
    redis.call('XADD', KEYS[n + stream], 'MAXLEN', '~', maxlen, '*', 'id', id, 'result', payload)
  end
end
for j = n + 1, #KEYS do
  redis.call('EXPIRE', KEYS[j], ttl)
end
return n
"""
FINAL = frozenset({Status.ok, Status.degraded})
MAX_KNOWN_TOPICS = 10_000
MAX_DEAD_BYTES = 256 * 1024  # a dead letter must fit the producer's 1 MiB request

class _Record(Protocol):
    topic: str
    partition: int
    offset: int


class HasRecord(Protocol):
    """A request and the Kafka record it came in (triage's `Ready`)."""

    @property
    def request(self) -> Request: ...

    @property
    def record(self) -> _Record: ...


@dataclass(slots=True)
class Outcome:
    """A result and the request it answers (None when the request could not be decoded).

    One per request, so slotted and not frozen: a frozen dataclass's `__init__` sets each field
    through `object.__setattr__`, four times the cost. Nothing changes an outcome once made."""

    request: Request | None
    result: Result
    source: tuple[str, int, int] | None = None  # (topic, partition, offset) the request was read from
    _payload: bytes | None = field(default=None, init=False, repr=False, compare=False)

    @classmethod
    def of(cls, item: "HasRecord", result: Result) -> "Outcome":
        return cls(item.request, result, (item.record.topic, item.record.partition, item.record.offset))

    @property
    def payload(self) -> bytes:
        """The result as delivered, packed once for Redis and the results topic, stamped with the
        request's tenant so that only that tenant may read it, its embedding in the encoding the
        request asked for."""
        # Kept by hand: functools.cached_property needs a __dict__, and before Python 3.12 takes a
        # lock on every first read, a lock per result.
        if self._payload is None:
            self._payload = self._pack()
        return self._payload

    def _pack(self) -> bytes:
        if self.request is None:
            return self.result.encode()
        return self.result.encode(tenant=self.request.tenant, embedding_encoding=self.request.embedding_encoding)


def pack_payloads(outcomes: Iterable[Outcome]) -> None:
    """Pack each outcome's payload now, from a stage thread: at delivery it is then ready, and the
    event loop, which every batch's round trips wait on, is spared a pack per result."""
    for outcome in outcomes:
        _ = outcome.payload


class ResultSink:
    def __init__(self, redis: AnyRedis, producer: AIOKafkaProducer, *, result_ttl_s: int, patience: Patience,
                 reply_stream_maxlen: int = 100_000,
                 ensure_topic: Callable[[str], Awaitable[None]] | None = None,
                 dead_letters: DeadLetterPolicy | None = None, replication: Replication | None = None) -> None:
        """`ensure_topic` creates a results topic the first time a result goes there (brokers may
        not auto-create; the names were checked against the allow-list at triage)."""
        self._redis = redis
        self._producer = producer
        self._ttl = result_ttl_s
        self._maxlen = reply_stream_maxlen
        self._patience = patience
        self._ensure_topic = ensure_topic
        self._known_topics: set[str] = set()
        self._dead_letters = dead_letters or DeadLetterPolicy()
        self.replication = replication or Replication()
        self._deliver_script = redis.register_script(DELIVER_SCRIPT)
        self._turns = Turns()

    async def deliver(self, outcomes: list[Outcome], dead_letters: list[DeadLetter]) -> None:
        """Deliveries may overlap; their results-topic records go to the producer in the order the
        deliveries began (workers/delivery/turns.py)."""
        turn = self._turns.take()
        try:
            refused, *_ = await asyncio.gather(self._send_to_topics(outcomes, turn), self.write_redis(outcomes),
                                               self._send_dead_letters(dead_letters))
        finally:
            turn.release()
        if refused:
            await self._send_dead_letters(refused)

    async def write_redis(self, outcomes: list[Outcome]) -> None:
        """Every result key and reply-stream entry of a batch in one script call: one command to
        pack and one reply to parse instead of two per result, which is most of what a cache hit
        costs the worker."""
        if not outcomes:
            return
        if isinstance(self._redis, RedisCluster):
            await self._write_cluster(self._redis, outcomes)
            return
        streams: dict[str, int] = {}
        keys: list[str] = []
        items: list[bytes | str | int] = []
        for outcome in outcomes:
            keys.append(result_key(outcome.result.id))
            waiter = outcome.request.reply.redis if outcome.request is not None else None
            stream = streams.setdefault(reply_stream(waiter), len(streams) + 1) if waiter else 0
            items += [outcome.result.id, outcome.payload, stream, 1 if outcome.result.status in FINAL else 0]
        args = [self._ttl, self._maxlen, msgpack.packb(items, use_bin_type=False)]

        async def write_and_replicate() -> None:
            await self._deliver_script(keys=keys + list(streams), args=args)
            await self.replication.acknowledged(self._redis, keys + list(streams))

        # A master that dies before its replica has the writes may have lost them: written again.
        await self._patience.until_done("redis", write_and_replicate)

    async def _write_cluster(self, redis: RedisCluster, outcomes: list[Outcome]) -> None:
        writes = []
        for outcome in outcomes:
            waiter = outcome.request.reply.redis if outcome.request is not None else None
            writes.append(ResultWrite(result_key(outcome.result.id), outcome.result.id, outcome.payload,
                                      reply_stream(waiter) if waiter else None, outcome.result.status in FINAL))
        async def write_and_replicate() -> None:
            await write_on_cluster(redis, writes, ttl_s=self._ttl, maxlen=self._maxlen,
                                   retry=lambda attempt: self._patience.until_done("redis", attempt))
            streams = {write.stream for write in writes if write.stream is not None}
            await self.replication.acknowledged(redis, [write.key for write in writes] + sorted(streams))

        # A master that dies before its replica has the writes may have lost them: written again.
        await self._patience.until_done("redis", write_and_replicate)

    @staticmethod
    def topic_sends(outcomes: list[Outcome]) -> list[tuple[Outcome, Send]]:
        """What goes to results topics: each outcome whose request named one, keyed by request id."""
        return [(outcome, (outcome.request.reply.topic, outcome.payload, outcome.result.id.encode()))
                for outcome in outcomes if outcome.request is not None and outcome.request.reply.topic]

    def letter_send(self, letter: DeadLetter) -> Send:
        """A dead letter as the DLQ gets it (masked, or with its original bytes: the policy says)."""
        return DLQ_TOPIC, self._dead_letters.outgoing(letter).encode(), None

    async def ensure_topics(self, topics: Iterable[str]) -> None:
        """Create the results topics a delivery names that were not seen before (outages raise)."""
        for topic in dict.fromkeys(topics):
            await self._ensure_known(topic)

    async def _send_to_topics(self, outcomes: list[Outcome], turn: Turn) -> list[DeadLetter]:
        """Produce each result to its topic; the ones a topic refuses for good come back as dead letters."""
        bound = self.topic_sends(outcomes)
        sends = [send for _, send in bound]
        refused = await self._produce(sends, turn=turn)
        if not refused:
            return []
        by_send = {id(send): outcome for outcome, send in bound}
        return [undeliverable(by_send[id(send)], send[0], exc) for send, exc in refused]

    async def _send_dead_letters(self, dead_letters: list[DeadLetter]) -> None:
        outgoing = [self._dead_letters.outgoing(letter) for letter in dead_letters]
        sends = [(DLQ_TOPIC, letter.encode(), None) for letter in outgoing]
        refused = await self._produce(sends)
        if not refused:
            return
        # Capped already (workers/delivery/dead_letters.py); should one still be refused, say a broker
        # with a smaller message limit, the letter goes without the record's view and bytes: which
        # record, and why, is what an operator needs, and one record must not stop the worker.
        letters = {id(send): letter for send, letter in zip(sends, outgoing, strict=True)}
        bare = [letters[id(send)].model_copy(update={"masked": None, "original": None}) for send, _ in refused]
        for _, exc in await self._produce([(DLQ_TOPIC, letter.encode(), None) for letter in bare]):
            raise RuntimeError(f"the dead-letter topic refused a letter: {exc}") from exc

    async def forward(self, topic: str, originals: list[tuple[bytes | None, bytes]]) -> None:
        """Hand requests, byte for byte, to another topic (the CPU fallback) before committing them here."""
        refused = await self._produce([(topic, value, key) for key, value in originals])
        for _, exc in refused:
            raise RuntimeError(f"{topic} refused a forwarded request: {exc}") from exc

    async def _produce(self, sends: list[Send], *, turn: Turn | None = None) -> list[tuple[Send, BaseException]]:
        """Produce every send; outages are waited out, and each send a topic refuses for good is
        returned with its error (the others are delivered regardless)."""
        refused: list[tuple[Send, BaseException]] = []
        pending = sends

        async def attempt() -> None:
            nonlocal pending
            errors = await self._send_all(pending, turn)
            failed = [(send, exc) for send, exc in zip(pending, errors, strict=True) if exc is not None]
            refused.extend((send, exc) for send, exc in failed if not is_outage(exc))
            pending = [send for send, exc in failed if is_outage(exc)]
            if pending:
                raise next(exc for _, exc in failed if is_outage(exc))

        if pending:
            await self._patience.until_done("kafka", attempt)
        return refused

    async def _send_all(self, sends: list[Send], turn: Turn | None) -> list[BaseException | None]:
        """Each send's error, or None once acknowledged. Results (sent in a delivery's turn) go as one
        record batch per partition (workers/delivery/batched_produce.py); dead letters and forwards,
        rare and possibly large, one by one."""
        if turn is None:
            return await self._send_each(sends)
        unready: dict[str, BaseException] = {}
        for topic in dict.fromkeys(topic for topic, _, _ in sends):
            try:
                await self._ensure_known(topic)
            except Exception as exc:  # that topic's sends fail with it; the others go ahead
                unready[topic] = exc
        ready = [send for send in sends if send[0] not in unready]
        sent = iter(await produce_batched(self._producer, ready, self._send_alone, turn))
        return [unready[send[0]] if send[0] in unready else next(sent) for send in sends]

    async def _send_each(self, sends: list[Send]) -> list[BaseException | None]:
        """Hand every send to the producer in order, then wait for all their acknowledgements: each
        send's error, or None. The producer batches them per partition; a task per send would cost
        more than the send."""
        handles: list[asyncio.Future[object] | BaseException] = []
        for topic, value, key in sends:
            try:
                handles.append(await self._producer.send(topic, value, key=key))
            except Exception as exc:
                handles.append(exc)
        acks = [handle for handle in handles if isinstance(handle, asyncio.Future)]
        if acks:
            await asyncio.wait(acks)
        return [handle if isinstance(handle, BaseException) else _error_of(handle) for handle in handles]

    async def _send_alone(self, sends: list[Send]) -> list[BaseException | None]:
        return await send_alone(self._producer, sends)

    async def _ensure_known(self, topic: str) -> None:
        if self._ensure_topic is not None and topic not in self._known_topics:
            await self._ensure_topic(topic)
            if len(self._known_topics) < MAX_KNOWN_TOPICS:
                self._known_topics.add(topic)


def _error_of(ack: "asyncio.Future[object]") -> BaseException | None:
    if ack.cancelled():
        return asyncio.CancelledError("the producer dropped the send")
    return ack.exception()


def undeliverable(outcome: Outcome, topic: str, exc: BaseException) -> DeadLetter:
    """A result its topic refused for good, as a dead letter that carries it."""
    source_topic, partition, offset = outcome.source or ("", -1, -1)
    payload = outcome.payload
    return DeadLetter(reason=f"result {outcome.result.id} could not be produced to {topic}: "
                             f"{type(exc).__name__}: {str(exc)[:300]}", code="result_undeliverable",
                      topic=source_topic, partition=partition, offset=offset, original=payload[:MAX_DEAD_BYTES],
                      original_size=len(payload), truncated=len(payload) > MAX_DEAD_BYTES)

