"""The worker's life cycle: a consumer-group member that serves one model, one role, one device.

Like aiokafka's clients (workers/membership.py): `start()`, idempotent `stop()`, or `async with`.
`start()` loads the model, opens Kafka and Redis, wires the parts (workers/assembly.py) and joins the
group; `run()` serves until `request_stop()` (SIGTERM) or, in burst mode, until the assigned
partitions are drained. Each membership of the group is served by a `Pipeline`
(workers/pipeline.py: the stages a batch goes through and the queues between them). While the
device is failed or an operator drained the worker, it leaves the group so its partitions move to
healthy members, and rejoins when it may serve again.
"""

import asyncio
import logging
import os
import socket
import time
from collections.abc import Callable
from typing import Any

from aiokafka import AIOKafkaProducer, TopicPartition

from common.clients import redis_client
from common.credentials import verify_credentials
from common.heartbeats import HealthState
from common.redis_cluster import AnyRedis
from common.startup import open_clients
from models.backends.base import Backend
from models.backends.errors import DeviceUnavailable
from models.loading import ModelLoader
from models.tasks import task_of
from schemas.names import DEFAULT_RESULTS_TOPIC, DLQ_TOPIC, TRACE_TOPIC, consumer_group
from workers.assembly import WorkerIdentity, WorkerParts, assemble, serving_set
from workers.batching.collector import BatchCollector
from workers.batching.lanes import LaneChoice, LaneGate
from workers.batching.sizing import BatchSizing
from workers.cache.batch import BatchCaches
from workers.compute.compute import Computed
from workers.compute.parallelism import batches_in_flight
from workers.compute.threads import stage_threads
from workers.delivery.transactions import Fenced
from workers.health.faults import FaultInjector
from workers.health.supervisor import Supervisor, beat_failed
from workers.membership import KafkaMember, group_consumer, started_consumer
from workers.observability.metrics import WorkerMetrics
from workers.observability.tracing import DebugTracer
from workers.pipeline import PREPARE_DEPTH, ModelActivity, Pipeline
from workers.serving.model_set import ModelSet
from workers.settings import Role, WorkerSettings

log = logging.getLogger(__name__)


class Worker(KafkaMember):
    what = "worker"

    def __init__(self, settings: WorkerSettings, *, backend: Backend | None = None, redis: AnyRedis | None = None,
                 producer: AIOKafkaProducer | None = None, metrics: WorkerMetrics | None = None,
                 takeover: bool = False, load_version: Callable[[str], Backend] | None = None) -> None:
        """`takeover=True` makes a fallback worker serve the primary topic in the primary group,
        for when no healthy primary is left (see workers/fallback.py). `load_version` loads
        further versions for hot swaps (default: from the registry, like the first)."""
        super().__init__()
        if settings.semantic_cache and "intra_op_spinning" not in settings.model_fields_set:
            # Two ONNX Runtime sessions (model and cache encoder) share the cores: no busy-waiting.
            settings = settings.model_copy(update={"intra_op_spinning": False})
        self.settings = settings
        self.worker_id = settings.worker_id or f"{socket.gethostname()}-{os.getpid()}"
        on_fallback_topic = settings.role is Role.fallback and not takeover
        lanes = settings.lane_plan
        self.topics = lanes.topics(settings.model, fallback=on_fallback_topic)  # one per lane, the highest first
        # A primary forwards what its failed device could not compute to each lane's fallback topic.
        self._forward_topics = [] if on_fallback_topic else lanes.topics(settings.model, fallback=True)
        self.group = consumer_group(settings.model, "primary" if takeover else settings.role.value)
        self.metrics = metrics if metrics is not None else WorkerMetrics()
        self.processed = 0
        self.computed = 0
        self.expired = 0
        self._backend = backend
        self._load_version = load_version
        self._parts: WorkerParts | None = None
        self._collector: BatchCollector | None = None
        self._lanes: LaneGate
        self._redis = redis
        self._producer = producer
        self._reported_partitions: dict[TopicPartition, str] = {}
        self._activity = ModelActivity()
        self._unavailable: str | None = None

    async def _open(self) -> None:
        self.faults = FaultInjector.from_settings(self.settings)
        await verify_credentials(self.settings)  # before the model loads: a wrong password fails in seconds
        loader = ModelLoader(self.settings.runtime())
        if self._backend is None:
            started = time.perf_counter()
            try:
                self._backend = await asyncio.to_thread(loader.load)
            except DeviceUnavailable as exc:
                # The configured device is absent: report failed and serve nothing, never silently on CPU.
                await self._start_unavailable(str(exc))
                return
            self.metrics.observe_load(self.settings.model, self._backend, time.perf_counter() - started)
        inner = self._backend
        load_version = self._load_version or (lambda version: self.faults.wrap(loader.load_version(version)))
        models = serving_set(self.settings, self.faults.wrap(inner), load_version, loader, self.metrics)
        self._redis, self._producer = await open_clients(
            self.settings, self._exit, self._redis, self._producer, partitions=self.settings.partitions, linger_ms=1,
            topics=[*self.topics, *self._forward_topics, DLQ_TOPIC, DEFAULT_RESULTS_TOPIC, TRACE_TOPIC])
        probe_input = task_of(inner.manifest).probe(inner.manifest)
        who = WorkerIdentity(self.worker_id, labels=lambda: self._labels,
                             backlog=lambda: sum(self._collector_backlog().values()))
        self._parts = await assemble(self.settings, who, models=models, loader=loader, redis=self._redis,
                                     producer=self._producer,
                                     probe=self.faults.wrap_probe(lambda: inner.infer([probe_input])),
                                     metrics=self.metrics, group=self.group, consumer=self._require_consumer,
                                     exit_stack=self._exit)
        self._health = self.metrics.healthy.labels(model=self.settings.model, role=self.settings.role.value,
                                                   device=self.backend.device, worker=self.worker_id)
        self._exit.callback(self._health.set, 0)
        self.supervisor.health.add_listener(self._export_health)
        self.supervisor.health.watch_batches(lambda: self._activity.busy_since, self.settings.health_batch_timeout_s)
        self._export_health(self.supervisor.health.state, self.supervisor.health.state, "start")
        await self._join()
        log.info("worker %s serving %s version %s on %s", self.worker_id, ", ".join(self.topics), self.backend.manifest.id,
                 self.backend.device)

    async def _start_unavailable(self, reason: str) -> None:
        """Heartbeat `failed` with the reason, so operators and the gateway see it; take no records."""
        self._unavailable = reason
        if self._redis is None:
            self._redis = redis_client(self.settings)
            self._exit.push_async_callback(self._redis.aclose)
        self._exit.push_async_callback(await beat_failed(self._redis, self.settings, self.worker_id, reason))
        log.error("worker %s failed at start: %s", self.worker_id, reason)

    async def _join(self) -> None:
        """Become a member of the consumer group and start taking records."""
        self._consumer = await started_consumer(self.settings, "worker", lambda: group_consumer(
            self.settings, self.topics, group=self.group, client_id=self.worker_id,
            max_poll_records=self.settings.max_batch_size, fetch_max_wait_ms=100,
            session_timeout_ms=self.settings.session_timeout_ms,
            # Static membership: a restarted worker gets its partitions back without a rebalance.
            group_instance_id=self.worker_id if self.settings.static_membership else None,
            listener=self.parts.transactions.listener() if self.parts.transactions.enabled else None))
        self._collector = BatchCollector(self._consumer, self.parts.policy, stopping=self._leaving,
                                         model_has_room=self._activity.has_room,
                                         model_working=lambda: self._activity.pending > 0)
        self._lanes = LaneGate(self._consumer, self.settings.lane_plan, self.settings.model,
                               min_share=self.settings.bulk_min_share, lower_batch_ms=self.settings.bulk_batch_ms,
                               enabled=self.settings.lanes_enabled, counted=self._count_lane)

    async def run(self, *, burst: bool = False) -> int:
        """Serve until asked to stop; with burst=True, return once the backlog is drained.

        While the device is failed or an operator drained this worker, it hands its records
        over, leaves the group so its partitions move to healthy members, and rejoins when it
        may serve again.
        """
        if self._unavailable is not None:
            await self._stop_requested.wait()
            return 0
        self.supervisor.start(probing=not burst)
        try:
            while not self._stop_requested.is_set():
                if self._consumer is None:
                    if burst:
                        break
                    await self.supervisor.wait_until_may_serve(self._stop_requested)
                    if self._stop_requested.is_set():
                        break
                    if not await self._unless_stopped(self._join()):
                        break  # a group that does not settle must not hold up a stop
                    log.info("worker %s rejoined group %s", self.worker_id, self.group)
                try:
                    drained = await self._serve_session(burst)
                except Fenced as fenced:
                    # A zombie's partitions moved while it slept: what it holds is the new owner's to answer.
                    log.warning("worker %s: %s; leaving group %s to start again from the committed offsets",
                                self.worker_id, fenced, self.group)
                    await self._leave()
                    continue
                if drained or self._stop_requested.is_set():
                    break
                self.metrics.failovers.labels(**self._labels).inc()
                log.warning("worker %s hands over and leaves group %s (%s)", self.worker_id, self.group,
                            "drained" if self.supervisor.drained else self.supervisor.health.reason)
                await self._leave()
        finally:
            await self.supervisor.stop()
        return self.processed

    async def _leave(self) -> None:
        await super()._leave()
        if self._parts is not None:
            await self._parts.transactions.release()  # a rejoin starts them again, fencing as it does

    def _leaving(self) -> bool:
        return self._stop_requested.is_set() or not self.supervisor.may_serve

    async def _serve_session(self, burst: bool) -> bool:
        """One membership of the group; True when burst mode found the backlog drained."""
        self._health.set(1)
        depth = batches_in_flight(self.backend.device, self.settings.model_batches_in_flight)
        threads = stage_threads(PREPARE_DEPTH, depth)  # this session's prepare and compute threads
        self._activity.resize(depth)
        collector = self._collector
        assert collector is not None, "a session starts after joining"
        pipeline = Pipeline(self.settings, self.parts, worker_id=self.worker_id, consumer=self._require_consumer,
                            collector=collector, lanes=self._lanes, activity=self._activity, threads=threads, depth=depth,
                            metrics=self.metrics, labels=lambda: self._labels, leaving=self._leaving,
                            collected=self._observe_backlog, settled=self._count)
        try:
            return await pipeline.run(burst, self._stage_ended)
        finally:
            self._health.set(0)
            # Not waited for: a thread stuck in a hung device must not hold up leaving the group.
            threads.shutdown(wait=False, cancel_futures=True)

    def _stage_ended(self, task: "asyncio.Task[Any]") -> None:
        """A failed stage is said at once, and health drops at once: the session's TaskGroup passes the
        failure on only after every other stage has stopped, which a stuck stage could put off for good."""
        if not task.cancelled() and (failure := task.exception()) is not None:
            self._health.set(0)
            log.error("worker %s: %s failed, ending the session: %s: %s", self.worker_id, task.get_name(),
                      type(failure).__name__, failure)

    def _export_health(self, _old: HealthState, new: HealthState, _reason: str) -> None:
        for state in HealthState:
            self.metrics.health_state.labels(model=self.settings.model, role=self.settings.role.value,
                                             device=self.backend.device, worker=self.worker_id,
                                             state=state.value).set(1 if state is new else 0)

    def _collector_backlog(self) -> dict[TopicPartition, int]:
        return self._collector.last_backlog if self._consumer is not None and self._collector is not None else {}

    def _observe_backlog(self) -> None:
        owned = self._collector_backlog()
        self._reported_partitions = self.metrics.observe_backlog(
            self.settings.model, self.settings.role.value, owned, self._reported_partitions,
            lambda topic: self._lanes.lane_of(topic).name)

    @property
    def _labels(self) -> dict[str, str]:
        return dict(model=self.settings.model, version=self.backend.manifest.id, role=self.settings.role.value,
                    device=self.backend.device)

    def _count_lane(self, choice: LaneChoice) -> None:
        self.metrics.lane_batches.labels(model=self.settings.model, role=self.settings.role.value,
                                         lane=choice.lane.name, turn="share" if choice.share_turn else "first").inc()

    def _count(self, batch: Computed) -> None:
        self.processed += len(batch.records)
        self.computed += batch.computed
        self.expired += batch.expired
        self.metrics.observe_batch(self._labels, batch)

    # What a started worker is made of, as tests and the fallback reach it; "not started" before start().
    @property
    def parts(self) -> WorkerParts:
        if self._parts is None:
            raise RuntimeError("worker not started")
        return self._parts

    @property
    def backend(self) -> Backend:
        """The stable version: what unpinned traffic gets outside a rollout."""
        if self._parts is not None:
            return self._parts.models.serving.stable
        if self._backend is None:
            raise RuntimeError("worker not started")
        return self._backend

    @property
    def models(self) -> ModelSet:
        """The resident versions and which of them serve (see workers/serving/model_set.py)."""
        return self.parts.models

    @property
    def caches(self) -> BatchCaches:
        return self.parts.caches

    @property
    def tracer(self) -> DebugTracer:
        return self.parts.tracer

    @property
    def supervisor(self) -> Supervisor:
        return self.parts.supervisor

    @property
    def sizing(self) -> BatchSizing:
        return self.parts.sizing

    @property
    def unavailable(self) -> str | None:
        """Why the worker could not load its model on its device, or None."""
        return self._unavailable

    @property
    def redis(self) -> AnyRedis:
        if self._redis is None:
            raise RuntimeError("worker not started")
        return self._redis

    @property
    def producer(self) -> AIOKafkaProducer:
        if self._producer is None:
            raise RuntimeError("worker not started")
        return self._producer
