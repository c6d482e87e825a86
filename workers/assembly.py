"""Wiring a started worker's parts: everything between a loaded model and joining the group.

The worker keeps its life cycle and its three stages (workers/worker.py); what those stages
use is built here from the settings and the injected clients, in the order they depend on
each other, and whatever runs in the background is registered on the worker's exit stack.
"""

import asyncio
import logging
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from common.clients import new_producer
from common.process import BACKGROUND_STOP_S, cancel_within
from common.redis_cluster import AnyRedis
from models.backends.base import Backend
from models.loading import ModelLoader
from versions.stats import VersionStatsRecorder
from workers.batching.policy import BatchPolicy
from workers.cancelled_batches import CancelledBatches
from workers.batching.sizing import BatchSizing
from workers.cache.batch import BatchCaches
from workers.cache.semantic_models import DEFAULT_ENCODER, semantic_models
from common.startup import waited
from common.topics import ensure_topics
from workers.delivery.dead_letters import MAX_TEXT_CHARS as DEAD_LETTER_TEXT_CHARS, DeadLetterPolicy
from workers.delivery.patience import Patience
from workers.delivery.replication import Replication
from workers.delivery.sink import ResultSink
from workers.delivery.transactions import PartitionTransactions
from workers.health.supervisor import Supervisor
from workers.observability.metrics import WorkerMetrics
from workers.observability.redaction import Redactor
from workers.observability.tracing import DebugTracer
from workers.serving.cards import CardPublisher
from workers.serving.model_set import ModelSet
from workers.serving.pointer_watch import PointerWatcher
from workers.settings import WorkerSettings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WorkerIdentity:
    """Who the worker is, and the live figures its parts report."""

    worker_id: str
    labels: Callable[[], dict[str, str]]  # model, stable version, role, device: they change on a hot swap
    backlog: Callable[[], int]


@dataclass
class WorkerParts:
    models: ModelSet
    policy: BatchPolicy
    sizing: BatchSizing
    sink: ResultSink
    stats: VersionStatsRecorder
    caches: BatchCaches
    pointers: PointerWatcher
    tracer: DebugTracer
    supervisor: Supervisor
    patience: Patience
    cancelled: CancelledBatches
    transactions: PartitionTransactions


async def _cancelled(task: "asyncio.Task[None]") -> None:
    # A loop that retries through Redis outages can swallow one cancel: a worker's stop once hung here.
    await cancel_within([task], BACKGROUND_STOP_S)


def serving_set(settings: WorkerSettings, first: Backend, load_version: Callable[[str], Backend], loader: ModelLoader,
                metrics: WorkerMetrics) -> ModelSet:
    """The resident versions, starting with `first`; further versions load like it (hot swaps)."""
    metrics.observe_model(settings.model, first)
    return ModelSet(first, load_version, budget_bytes=int(settings.model_memory_budget_mb * 2**20),
                    size_of=loader.resident_size,
                    on_load=lambda backend, seconds: metrics.observe_load(settings.model, backend, seconds))


async def assemble(settings: WorkerSettings, who: WorkerIdentity, *, models: ModelSet, loader: ModelLoader,
                   probe: Callable[[], None],
                   redis: AnyRedis, producer: AIOKafkaProducer, metrics: WorkerMetrics,
                   group: str, consumer: Callable[[], AIOKafkaConsumer], exit_stack: AsyncExitStack) -> WorkerParts:
    """`group` is the consumer group the worker joins and `consumer` gives its member of the moment
    (the transactions commit offsets in that group and read them through it)."""
    stable = models.serving.stable
    policy = BatchPolicy(settings.max_batch_size, settings.max_queue_delay_ms, settings.batch_policy,
                         settings.preferred_batch_sizes)
    cache_settings = settings
    if settings.semantic_cache:
        semantic = semantic_models(settings, loader.registry, stable.manifest)
        log.info("semantic cache reads with %s (%s) and %s", semantic.encoder, semantic.why, semantic.verifier)
        cache_settings = semantic.applied(settings)
    caches = BatchCaches(cache_settings, redis=redis, producer=producer, metrics=metrics.cache,
                         load_encoder=lambda: loader.load_encoder(cache_settings.semantic_encoder_model or DEFAULT_ENCODER,
                                                                  settings.semantic_encoder_precision),
                         task=stable.manifest.task)
    # The cache generation is read from Redis before the first lookup: a Redis restart is waited out.
    await waited("worker", f"Redis at {settings.redis_url_redacted} (reading the cache generation)", caches.start,
                 settings.startup_timeout_s)
    exit_stack.push_async_callback(caches.stop)
    pointers = PointerWatcher(redis, settings.model, models, poll_s=settings.pointer_poll_s)
    await pointers.sync_once()
    exit_stack.push_async_callback(_cancelled, asyncio.create_task(pointers.run()))
    cards = CardPublisher(redis, settings.model, models, check_s=settings.pointer_poll_s,
                          serves_stable=settings.role.value != "shadow")
    await cards.publish_once()
    exit_stack.push_async_callback(_cancelled, asyncio.create_task(cards.run()))
    patience = Patience(metrics.waiting, max_backoff_s=settings.delivery_max_backoff_s)
    cancelled = CancelledBatches(redis, poll_s=settings.pointer_poll_s)
    await cancelled.refresh()
    exit_stack.push_async_callback(_cancelled, asyncio.create_task(cancelled.run()))
    sizing = BatchSizing(policy, clean_period_s=settings.oom_clean_period_s, metrics=metrics, labels=who.labels)
    supervisor = Supervisor(settings, redis, who.worker_id, stable.device, lambda: models.serving.stable.manifest.id,
                            probe=probe, backlog=who.backlog,
                            batch_sizes=lambda: (sizing.last_batch, policy.max_batch_size),
                            cache_lookups=lambda: tuple(sorted(metrics.cache.totals.items())))
    return WorkerParts(
        models=models, policy=policy, caches=caches, pointers=pointers, supervisor=supervisor, sizing=sizing,
        sink=ResultSink(redis, producer, result_ttl_s=settings.result_ttl_s, patience=patience,
                        reply_stream_maxlen=settings.reply_stream_maxlen,
                        replication=Replication(settings.redis_wait_replicas, settings.redis_wait_timeout_ms),
                        ensure_topic=lambda topic: ensure_topics(settings, [topic], settings.partitions),
                        dead_letters=DeadLetterPolicy(settings.dlq_keep_original,
                                                      Redactor.with_defaults(settings.redact_patterns,
                                                                             max_chars=DEAD_LETTER_TEXT_CHARS))),
        patience=patience, cancelled=cancelled,
        transactions=_transactions(settings, group, consumer, patience, metrics, exit_stack),
        stats=VersionStatsRecorder(redis, settings.model),
        tracer=DebugTracer(redis, producer, settings.model, Redactor.with_defaults(settings.redact_patterns),
                           refresh_s=settings.debug_switch_refresh_s))


# A killed worker's open transaction holds read_committed readers of its partitions back until the next
# owner fences it or this passes (aiokafka's default is 60 s); a transaction itself takes milliseconds.
TRANSACTION_TIMEOUT_MS = 20_000


def _transactions(settings: WorkerSettings, group: str, consumer: Callable[[], AIOKafkaConsumer], patience: Patience,
                  metrics: WorkerMetrics, exit_stack: AsyncExitStack) -> PartitionTransactions:
    transactions = PartitionTransactions(
        group, settings.exactly_once_topics(), consumer=consumer, patience=patience,
        counted=lambda outcome: metrics.transactions.labels(model=settings.model, outcome=outcome).inc(),
        make_producer=lambda transactional_id: new_producer(settings, linger_ms=1, transactional_id=transactional_id,
                                                            transaction_timeout_ms=TRANSACTION_TIMEOUT_MS))
    exit_stack.push_async_callback(transactions.release)
    return transactions
