"""The Python client for services and pipelines.

    async with FleetClient(settings) as client:
        result = await client.infer("minilm-embed", "where is my parcel?", timeout=5)

It produces straight to Kafka and awaits the reply through Redis (see waiter.py). Clients
are injected or, when none is passed, built from settings and owned (closed) by the client.
"""

import asyncio
import time
from collections.abc import Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any, Self

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaError
from aiokafka.partitioner import DefaultPartitioner
from redis.exceptions import RedisError

from common.redis_cluster import AnyRedis
from common.clients import new_consumer, new_producer, redis_client
from common.credentials import verify_credentials
from common.topics import ensure_topics, partitions_of
from gateway.deadline import Deadline, RequestIds
from gateway.errors import FleetUnavailable
from gateway.settings import ClientSettings
from gateway.waiter import ReplyWaiter
from gateway.routing import Router
from schemas.names import result_key
from schemas.packing import EmbeddingEncoding
from schemas.tensors import inputs_map
from schemas.wire import ReplyTo, Request, Result, now_ms

_DEFAULT_PARTITIONER = DefaultPartitioner()


def partition_of_request(key: bytes | None, all_partitions: list[int], available: list[int]) -> int:
    """The partition a request goes to, from its Kafka key, its id: 128 random bits in hex, so its
    first 32 bits spread requests as evenly as murmur2 of the key would, and one key always goes
    to one partition, as with murmur2. aiokafka's murmur2 is pure Python (~5 us a request on the
    gateway's hot path); any other key goes to its default partitioner."""
    if key is not None and len(key) == 32:
        try:
            return all_partitions[int(key[:8], 16) % len(all_partitions)]
        except ValueError:
            pass
    return _DEFAULT_PARTITIONER(key, all_partitions, available)


# A deadline shorter than this that passes before Kafka acknowledges is the deadline's doing (a
# timeout, 504), not an outage (503, counted as one): any tenant could raise the outage count at will.
# Kafka acknowledges in milliseconds when it is up; a longer deadline spent waiting says it is not.
SHORT_DEADLINE_S = 0.25


class InferenceTimeout(TimeoutError):
    def __init__(self, request_id: str, timeout_s: float) -> None:
        super().__init__(f"no result for request {request_id} within {timeout_s:g} s")
        self.request_id = request_id


@dataclass
class PipelineOutcome:
    """What a results-topic run got back: one result per id, plus what went wrong."""

    results: dict[str, Result]
    duplicates: int = 0
    missing: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Exchange:
    """A result and what only its caller saw of its way, in ms: from publishing to Kafka's
    acknowledgement (produce_ms) and to the reply (end_to_end_ms); none for a result that was
    read from Redis after its reply missed the deadline."""

    result: Result
    stages: dict[str, float]

    def timings(self) -> dict[str, float]:
        """The worker's stages and the caller's."""
        return {**self.result.timings, **self.stages}


@dataclass(frozen=True)
class RequestOptions:
    version: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    priority: int = 0
    tenant: str | None = None
    debug: bool = False
    # "f32le": the result's embedding as raw little-endian float32 bytes (Result.embedding() reads either)
    embedding_encoding: EmbeddingEncoding | None = None


class FleetClient:
    def __init__(self, settings: ClientSettings | None = None, *, producer: AIOKafkaProducer | None = None,
                 redis: AnyRedis | None = None) -> None:
        self.settings = settings if settings is not None else ClientSettings()
        self._given_producer, self._given_redis = producer, redis
        self._producer = producer
        self._redis = redis
        self._waiter: ReplyWaiter | None = None
        self._exit = AsyncExitStack()
        self._known_topics: set[str] = set()
        self._creations: dict[str, asyncio.Task[None]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ids = RequestIds()

    async def start(self) -> None:
        """Open the clients not injected. Kafka must answer (the producer bootstraps); Redis need
        not: the reply reader connects, and reconnects, by itself. Refused credentials raise
        CredentialsRejected at once."""
        if self._waiter is not None:
            return
        self._loop = asyncio.get_running_loop()
        try:
            await verify_credentials(self.settings)
            await self._open_clients()
        except BaseException:
            await self.stop()  # a start that failed half-way leaves nothing open behind it
            raise
        self.router = Router(self.redis, log_every_s=self.settings.log_every_s)
        self._waiter = ReplyWaiter(self.redis, max_pending=self.settings.max_waits,
                                   max_backoff_s=self.settings.reader_max_backoff_s,
                                   log_every_s=self.settings.log_every_s)
        self._waiter.start()
        self._exit.push_async_callback(self._waiter.stop)

    async def _open_clients(self) -> None:
        if self._redis is None:
            self._redis = redis_client(self.settings)
            self._exit.push_async_callback(self._redis.aclose)
        if self._producer is None:
            producer = new_producer(self.settings, linger_ms=2, partitioner=partition_of_request)
            self._exit.push_async_callback(producer.stop)
            await producer.start()
            self._producer = producer

    async def stop(self) -> None:
        creations = list(self._creations.values())
        for creation in creations:
            creation.cancel()
        await asyncio.gather(*creations, return_exceptions=True)
        await self._exit.aclose()
        self._waiter = None
        self._producer, self._redis = self._given_producer, self._given_redis

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    @property
    def producer(self) -> AIOKafkaProducer:
        if self._producer is None:
            raise RuntimeError("client not started")
        return self._producer

    @property
    def redis(self) -> AnyRedis:
        if self._redis is None:
            raise RuntimeError("client not started")
        return self._redis

    @property
    def waiter(self) -> ReplyWaiter:
        if self._waiter is None:
            raise RuntimeError("client not started")
        return self._waiter

    def build_request(self, model: str, text: str | Mapping[str, Any], *, timeout: float | None = None,
                      reply: ReplyTo, options: RequestOptions | None = None) -> Request:
        """`text`: a text, or the request's whole inputs map (schemas/task_inputs.py: rerank's query
        and passages; a tensor model's inputs, numpy arrays or tensor maps)."""
        options = options or RequestOptions()
        submitted = now_ms()
        deadline = submitted + int((timeout or self.settings.default_timeout_s) * 1000)
        return Request(id=self._ids.new(), model=model, version=options.version, inputs=inputs_map(text),
                       params=options.params, reply=reply, deadline_ms=deadline, priority=options.priority,
                       submitted_ms=submitted, debug=options.debug, tenant=options.tenant,
                       embedding_encoding=options.embedding_encoding)

    async def topic_for(self, model: str, priority: int = 0) -> str:
        """The topic of the lane `priority` picks (schemas/lanes.py), or that lane's CPU fallback topic
        while no healthy primary is left. With lanes off, every priority goes to the first lane."""
        lanes = self.settings.lane_plan
        lane = lanes.for_priority(priority) if self.settings.lanes_enabled else lanes.top
        route = await self.router.route(model)
        topic = lanes.topic(model, lane, fallback=route.degraded)
        if topic not in self._known_topics:
            await asyncio.shield(self._creation_of(topic))
            self._known_topics.add(topic)
        return topic

    def _creation_of(self, topic: str) -> "asyncio.Task[None]":
        """One creation per topic, shared by every request that needs it, and not cancelled when
        one of them gives up at its deadline (a hung Kafka would otherwise cost a client per request)."""
        creation = self._creations.get(topic)
        if creation is None:
            creation = asyncio.create_task(ensure_topics(self.settings, [topic], self.settings.partitions))
            self._creations[topic] = creation
            creation.add_done_callback(lambda _: self._creations.pop(topic, None))
        return creation

    async def publish(self, request: Request) -> None:
        """Produce a request and wait for Kafka to acknowledge it (acks=all), no longer than until
        the request's deadline. FleetUnavailable when Kafka did not acknowledge in time (the
        request may still reach Kafka later; its result is keyed by its id)."""
        left_s = max(request.deadline_ms - now_ms(), 0) / 1000
        loop = self._loop or asyncio.get_running_loop()
        try:
            async with Deadline(loop, loop.time() + left_s):
                topic = await self.topic_for(request.model, request.priority)
                await self.producer.send_and_wait(topic, request.encode(), key=request.id.encode())
        except TimeoutError:
            if left_s < SHORT_DEADLINE_S:
                # Too short for any Kafka to acknowledge: the caller's budget ran out, Kafka is not down.
                raise InferenceTimeout(request.id, left_s) from None
            raise FleetUnavailable("kafka", f"no acknowledgement within the request's deadline ({left_s:.3g} s)") from None
        except (KafkaError, OSError) as exc:
            raise FleetUnavailable("kafka", f"{type(exc).__name__}: {exc}") from exc

    async def infer(self, model: str, text: str | Mapping[str, Any], *, timeout: float | None = None,
                    options: RequestOptions | None = None) -> Result:
        """Send one request and await its result; InferenceTimeout names the id when the deadline
        passes, FleetUnavailable says Kafka or Redis did not answer, Overloaded that too many wait."""
        exchange = await self.exchange(model, text, timeout=timeout, options=options)
        if not exchange.stages:
            return exchange.result
        return exchange.result.model_copy(update={"timings": exchange.timings()})

    async def exchange(self, model: str, text: str | Mapping[str, Any], *, timeout: float | None = None,
                       options: RequestOptions | None = None) -> Exchange:
        """`infer()`, with the caller's own stages beside the result instead of copied into it
        (the gateway writes them straight into its answer)."""
        timeout = timeout or self.settings.default_timeout_s
        waiter = self.waiter
        request = self.build_request(model, text, timeout=timeout, reply=ReplyTo(redis=waiter.waiter_id),
                                     options=options)
        reply = waiter.expect(request.id)
        started = time.perf_counter()
        try:
            await self.publish(request)
            produced = time.perf_counter()
            result = await waiter.wait(reply, max(request.deadline_ms - now_ms(), 0) / 1000)
        except TimeoutError:
            try:
                late = await self.result(request.id)  # the reply may have raced the deadline
            except FleetUnavailable:
                late = None  # Redis still away: the request was accepted, its id finds the result later
            if late is not None:
                return Exchange(late, {})
            raise InferenceTimeout(request.id, timeout) from None
        finally:
            waiter.forget(request.id)
        answered = time.perf_counter()
        stages = {"produce_ms": (produced - started) * 1000, "end_to_end_ms": (answered - started) * 1000}
        return Exchange(result, stages)

    async def submit(self, model: str, text: str | Mapping[str, Any], *, timeout: float | None = None,
                     results_topic: str | None = None, options: RequestOptions | None = None) -> str:
        """Fire and forget: returns the request id; read the result later with `result()`."""
        request = self.build_request(model, text, timeout=timeout, reply=ReplyTo(topic=results_topic),
                                     options=options)
        await self.publish(request)
        return request.id

    async def result(self, request_id: str) -> Result | None:
        """The stored result, None when there is none (yet); FleetUnavailable when Redis does not answer."""
        try:
            raw = await self.redis.get(result_key(request_id))
        except (RedisError, OSError) as exc:
            raise FleetUnavailable("redis", f"{type(exc).__name__}: {exc}") from exc
        return Result.decode(raw) if raw is not None else None

    async def run_pipeline(self, model: str, texts: Sequence[str], *, results_topic: str,
                           timeout: float = 60.0, options: RequestOptions | None = None) -> PipelineOutcome:
        """Produce one request per text with a results topic, then read that topic until every
        id has a result (or `timeout` passes). Redelivered duplicates are counted, not returned."""
        await ensure_topics(self.settings, [results_topic], self.settings.partitions)
        # read_committed: on exactly-once lanes, results of aborted transactions are not results.
        reader = new_consumer(self.settings, enable_auto_commit=False, isolation_level="read_committed")
        await reader.start()
        try:
            partitions = await partitions_of(self.settings, results_topic)
            reader.assign(partitions)
            for tp, offset in (await reader.end_offsets(partitions)).items():
                reader.seek(tp, offset)  # only results produced after this point matter
            requests = [self.build_request(model, text, timeout=timeout, reply=ReplyTo(topic=results_topic),
                                           options=options) for text in texts]
            waiting = {request.id for request in requests}
            await self._publish_many(requests)
            return await _collect(reader, waiting, time.monotonic() + timeout)
        finally:
            await reader.stop()

    async def _publish_many(self, requests: list[Request]) -> None:
        if not requests:
            return
        model = requests[0].model
        topics = {priority: await self.topic_for(model, priority) for priority in {r.priority for r in requests}}
        futures = [await self.producer.send(topics[r.priority], r.encode(), key=r.id.encode()) for r in requests]
        await asyncio.gather(*futures)


async def _collect(reader: AIOKafkaConsumer, waiting: set[str], give_up_at: float) -> PipelineOutcome:
    outcome = PipelineOutcome(results={})
    while waiting and (left := give_up_at - time.monotonic()) > 0:
        batches = await reader.getmany(timeout_ms=int(min(left, 1.0) * 1000), max_records=1000)
        for records in batches.values():
            for record in records:
                result = Result.decode(record.value)
                if result.id in outcome.results:
                    outcome.duplicates += 1
                elif result.id in waiting:
                    outcome.results[result.id] = result
                    waiting.discard(result.id)
    outcome.missing = sorted(waiting)
    return outcome
