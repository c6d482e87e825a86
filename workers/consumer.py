"""The worker: a consumer-group member that turns micro-batches of requests into results.

Life cycle follows aiokafka: `start()`, idempotent `stop()`, or `async with`. `run()` serves
until `request_stop()` (SIGTERM) or, in burst mode, until the assigned partitions are
drained. Offsets are committed only after a batch's results are delivered.
"""

import asyncio
import logging
import os
import socket
import time
from contextlib import AsyncExitStack
from typing import Self

import numpy as np
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.errors import CommitFailedError, IllegalStateError
from redis.asyncio import Redis

from fleet.topics import ensure_topics
from schemas.names import DEFAULT_RESULTS_TOPIC, DLQ_TOPIC, consumer_group, requests_topic
from schemas.wire import Status, now_ms
from workers.backends.base import Backend
from workers.delivery import Outcome, ResultSink
from workers.metrics import WorkerMetrics
from workers.settings import WorkerSettings
from workers.triage import Provenance, Ready, triage

log = logging.getLogger(__name__)

POLL_TIMEOUT_MS = 200


def load_backend(settings: WorkerSettings) -> Backend:
    from workers.backends.onnx import OnnxEmbeddingBackend
    from workers.registry import ModelRegistry

    registry = ModelRegistry(settings.registry_dir)
    manifest = registry.resolve(settings.model, settings.model_version, settings.precision)
    return OnnxEmbeddingBackend.load(registry, manifest, device=settings.device,
                                     intra_op_threads=settings.intra_op_threads,
                                     max_input_tokens=settings.max_input_tokens)


class Worker:
    def __init__(self, settings: WorkerSettings, *, backend: Backend | None = None, redis: Redis | None = None,
                 producer: AIOKafkaProducer | None = None, metrics: WorkerMetrics | None = None) -> None:
        self.settings = settings
        self.worker_id = settings.worker_id or f"{socket.gethostname()}-{os.getpid()}"
        self.topic = requests_topic(settings.model)
        self.metrics = metrics if metrics is not None else WorkerMetrics()
        self.processed = 0
        self._backend = backend
        self._redis = redis
        self._producer = producer
        self._consumer: AIOKafkaConsumer | None = None
        self._exit = AsyncExitStack()
        self._stop_requested = asyncio.Event()
        self._started = False

    @property
    def backend(self) -> Backend:
        if self._backend is None:
            raise RuntimeError("worker not started")
        return self._backend

    async def start(self) -> None:
        if self._started:
            return
        self._started = True
        if self._backend is None:
            self._backend = await asyncio.to_thread(load_backend, self.settings)
        await ensure_topics(self.settings.kafka_bootstrap, [self.topic, DLQ_TOPIC, DEFAULT_RESULTS_TOPIC],
                            self.settings.partitions)
        if self._redis is None:
            self._redis = Redis.from_url(self.settings.redis_url)
            self._exit.push_async_callback(self._redis.aclose)
        if self._producer is None:
            self._producer = AIOKafkaProducer(bootstrap_servers=self.settings.kafka_bootstrap, acks="all",
                                              linger_ms=1, enable_idempotence=True)
            await self._producer.start()
            self._exit.push_async_callback(self._producer.stop)
        self._consumer = AIOKafkaConsumer(
            self.topic, bootstrap_servers=self.settings.kafka_bootstrap,
            group_id=consumer_group(self.settings.model, self.settings.role.value),
            client_id=self.worker_id, enable_auto_commit=False, auto_offset_reset="earliest",
            max_poll_records=self.settings.max_batch_size,
            session_timeout_ms=self.settings.session_timeout_ms,
            heartbeat_interval_ms=max(self.settings.session_timeout_ms // 3, 100),
        )
        await self._consumer.start()
        # Leaving the group last lets the partitions move only after everything is delivered.
        self._exit.push_async_callback(self._consumer.stop)
        self._sink = ResultSink(self._redis, self._producer, result_ttl_s=self.settings.result_ttl_s)
        manifest = self.backend.manifest
        self._who = Provenance(model=self.settings.model, version=manifest.id, device=self.backend.device,
                               worker=self.worker_id)
        self._labels = dict(model=self.settings.model, version=manifest.id, role=self.settings.role.value,
                            device=self.backend.device)
        log.info("worker %s serving %s version %s on %s", self.worker_id, self.topic, manifest.id, self.backend.device)

    async def stop(self) -> None:
        await self._exit.aclose()
        self._consumer = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    def assignment(self) -> frozenset[TopicPartition]:
        """Partitions this worker owns right now (empty before it joins its group)."""
        return frozenset(self._consumer.assignment()) if self._consumer is not None else frozenset()

    def request_stop(self) -> None:
        """Finish the batch in hand, deliver, commit, then return from `run()`."""
        self._stop_requested.set()

    async def run(self, *, burst: bool = False) -> int:
        """Serve until asked to stop; with burst=True, return once the backlog is drained."""
        consumer = self._require_consumer()
        while not self._stop_requested.is_set():
            records = await self._next_batch(consumer)
            if records:
                await self.handle(records)
            elif burst and await self._drained(consumer):
                break
        return self.processed

    def _require_consumer(self) -> AIOKafkaConsumer:
        if self._consumer is None:
            raise RuntimeError("worker not started")
        return self._consumer

    async def _next_batch(self, consumer: AIOKafkaConsumer) -> list[ConsumerRecord]:
        limit = self.settings.max_batch_size
        batch = _flatten(await consumer.getmany(timeout_ms=POLL_TIMEOUT_MS, max_records=limit))
        if not batch:
            return batch
        fill_until = time.monotonic() + self.settings.max_queue_delay_ms / 1000
        while len(batch) < limit and (left := fill_until - time.monotonic()) > 0:
            batch += _flatten(await consumer.getmany(timeout_ms=max(int(left * 1000), 1), max_records=limit - len(batch)))
        return batch

    async def _drained(self, consumer: AIOKafkaConsumer) -> bool:
        assigned = consumer.assignment()
        if not assigned:
            return False
        ends = await consumer.end_offsets(list(assigned))
        for tp in assigned:
            if await consumer.position(tp) < ends[tp]:
                return False
        return True

    async def handle(self, records: list[ConsumerRecord]) -> None:
        """Answer every record of one micro-batch, deliver, then commit its offsets."""
        start_ms = now_ms()
        sorted_out = triage(records, self._who, start_ms)
        outcomes = list(sorted_out.answered)
        if sorted_out.ready:
            outcomes += await self._compute(sorted_out.ready, start_ms)
        delivery_started = time.perf_counter()
        await self._sink.deliver(outcomes, sorted_out.dead_letters)
        self.metrics.delivery.labels(**self._labels).observe(time.perf_counter() - delivery_started)
        await self._commit(records)
        self._count(outcomes, sorted_out.dead_letters)
        self.processed += len(records)

    async def _compute(self, ready: list[Ready], start_ms: int) -> list[Outcome]:
        texts = [item.text for item in ready]
        started = time.perf_counter()
        try:
            vectors: list[np.ndarray | Exception] = list(await asyncio.to_thread(self.backend.infer, texts))
        except Exception:
            log.exception("batch of %d failed; retrying one by one so one bad input fails alone", len(texts))
            vectors = await self._compute_one_by_one(texts)
        elapsed_ms = (time.perf_counter() - started) * 1000
        self.metrics.inference.labels(**self._labels).observe(elapsed_ms / 1000)
        self.metrics.batch_size.labels(**self._labels).observe(len(ready))
        outcomes = []
        for item, vector in zip(ready, vectors, strict=True):
            queue_ms = max(start_ms - item.record.timestamp, 0)
            self.metrics.queue_wait.labels(**self._labels).observe(queue_ms / 1000)
            timings = {"queue_ms": float(queue_ms), "inference_ms": elapsed_ms,
                       "since_submit_ms": float(max(now_ms() - item.request.submitted_ms, 0))}
            if isinstance(vector, Exception):
                result = self._who.error(item.request.id, "inference_failed", f"{type(vector).__name__}: {vector}",
                                         batch_size=len(ready), timings=timings)
            else:
                result = self._who.result(item.request.id, Status.ok, outputs={"embedding": vector.tolist()},
                                          batch_size=len(ready), timings=timings)
            outcomes.append(Outcome(item.request, result))
        return outcomes

    async def _compute_one_by_one(self, texts: list[str]) -> list[np.ndarray | Exception]:
        answers: list[np.ndarray | Exception] = []
        for text in texts:
            try:
                answers.append((await asyncio.to_thread(self.backend.infer, [text]))[0])
            except Exception as exc:
                answers.append(exc)
        return answers

    async def _commit(self, records: list[ConsumerRecord]) -> None:
        offsets: dict[TopicPartition, int] = {}
        for record in records:
            tp = TopicPartition(record.topic, record.partition)
            offsets[tp] = max(offsets.get(tp, 0), record.offset + 1)
        try:
            await self._require_consumer().commit(offsets)
        except (CommitFailedError, IllegalStateError) as exc:
            # The partitions moved during a rebalance: the new owner redelivers these
            # records, and results keyed by request id make that harmless.
            log.warning("commit after rebalance refused (%s); %d records will be redelivered", exc, len(records))

    def _count(self, outcomes: list[Outcome], dead_letters: list) -> None:
        for outcome in outcomes:
            self.metrics.results.labels(**self._labels, status=outcome.result.status.value).inc()
        for letter in dead_letters:
            self.metrics.dead_letters.labels(model=self.settings.model, reason=letter.reason.split(":")[0]).inc()


def _flatten(by_partition: dict[TopicPartition, list[ConsumerRecord]]) -> list[ConsumerRecord]:
    return [record for records in by_partition.values() for record in records]
