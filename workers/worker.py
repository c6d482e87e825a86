"""The worker: a consumer-group member that turns micro-batches of requests into results.

Life cycle as aiokafka's (workers/membership.py): `start()`, idempotent `stop()`, or
`async with`. `run()` serves until `request_stop()` (SIGTERM) or, in burst mode, until the
assigned partitions are drained. Five stages overlap, linked by bounded queues: collect the next
batch, prepare (triage, caches, tokenise) up to four together, run k on the model, deliver the
batches before it, settle (commit, caches, traces, version stats) what was delivered
(workers/delivery/settle.py). The stages that work on several batches at once
(workers/ordered.py) still pass them on in order. Delivery and commits happen
in batch order, and a batch's offsets are committed only after its results are delivered. The
parts the stages use are wired in workers/assembly.py.
"""

import asyncio
from concurrent.futures import ThreadPoolExecutor
import logging
import os
import socket
import time
from collections.abc import Callable
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from common.redis_cluster import AnyRedis
from common.clients import redis_client
from common.credentials import verify_credentials
from common.startup import open_clients
from common.heartbeats import HealthState
from models.backends.base import Backend
from models.backends.errors import DeviceUnavailable
from models.loading import ModelLoader
from models.tasks import task_of
from schemas.names import (DEFAULT_RESULTS_TOPIC, DLQ_TOPIC, TRACE_TOPIC, consumer_group, fallback_topic,
                           requests_topic)
from schemas.wire import Status, now_ms
from workers.assembly import WorkerIdentity, WorkerParts, assemble, serving_set
from workers.batching.collector import BatchCollector, FetchedBatch
from workers.compute.compute import Computed
from workers.compute.prepare import Prepared, encode_groups, off_the_loop, sort_batch, unreadable
from workers.compute.provenance import Provenance
from workers.compute.parallelism import batches_in_flight
from workers.compute.stage import ComputeStage, ModelActivity
from workers.compute.threads import stage_threads
from workers.delivery.offsets import backlog_drained, hand_on, owned_partitions
from workers.delivery.settle import SETTLE_DEPTH, Delivered, Settler
from workers.delivery.sink import Outcome
from workers.health.faults import FaultInjector
from workers.health.supervisor import beat_failed
from workers.membership import KafkaMember, group_consumer, started_consumer
from workers.observability.metrics import WorkerMetrics
from workers.ordered import flatten, in_order
from workers.settings import OverlongInputs, Role, WorkerSettings
from workers.started import StartedWorker

log = logging.getLogger(__name__)
# Computed batches that may wait for delivery: the model goes on while a delivery waits on its round trips.
COMPUTED_DEPTH = 2
# Deliveries under way at once: one batch's writes go out while the previous one's acknowledgements come back.
DELIVERIES_IN_FLIGHT = 3
# Batches prepared at once. A batch spends most of its preparation waiting for the GIL, not working:
# each of its two thread hops and each return from the tokenizer's Rust waits for a busy event
# loop to let go (measured at max batch 64: 0.8 ms triage and ~1.5 ms of tokenising took 15-19 ms).
# With two at once, the compute stage found no prepared batch three samples in four at max batch 64.
PREPARE_DEPTH = 4


class Worker(KafkaMember, StartedWorker):
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
        self.topic = fallback_topic(settings.model) if on_fallback_topic else requests_topic(settings.model)
        self.group = consumer_group(settings.model, "primary" if takeover else settings.role.value)
        self.metrics = metrics if metrics is not None else WorkerMetrics()
        self.processed = 0
        self.computed = 0
        self.expired = 0
        self._backend = backend
        self._load_version = load_version
        self._parts: WorkerParts | None = None
        self._stage_threads: ThreadPoolExecutor | None = None  # a session's prepare and compute threads
        self._who_by_version: dict[str, Provenance] = {}
        self._redis = redis
        self._producer = producer
        self._reported_partitions: set[TopicPartition] = set()
        self._activity = ModelActivity()
        self._unavailable: str | None = None
        self._reject_overlong = settings.overlong_inputs == OverlongInputs.reject
        self._triage_rules = settings.triage_rules  # one, so its verdicts on results topics are remembered

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
            topics=[self.topic, DLQ_TOPIC, DEFAULT_RESULTS_TOPIC, TRACE_TOPIC])
        probe_input = task_of(inner.manifest).probe(inner.manifest)
        who = WorkerIdentity(self.worker_id, labels=lambda: self._labels,
                             backlog=lambda: sum(self._collector_backlog().values()))
        self._parts = await assemble(self.settings, who, models=models, loader=loader, redis=self._redis,
                                     producer=self._producer,
                                     probe=self.faults.wrap_probe(lambda: inner.infer([probe_input])),
                                     metrics=self.metrics, exit_stack=self._exit)
        self._health = self.metrics.healthy.labels(model=self.settings.model, role=self.settings.role.value,
                                                   device=self.backend.device, worker=self.worker_id)
        self._exit.callback(self._health.set, 0)
        self.supervisor.health.add_listener(self._export_health)
        self.supervisor.health.watch_batches(lambda: self._activity.busy_since, self.settings.health_batch_timeout_s)
        self._export_health(self.supervisor.health.state, self.supervisor.health.state, "start")
        await self._join()
        log.info("worker %s serving %s version %s on %s", self.worker_id, self.topic, self.backend.manifest.id,
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
            self.settings, self.topic, group=self.group, client_id=self.worker_id,
            max_poll_records=self.settings.max_batch_size, fetch_max_wait_ms=100,
            session_timeout_ms=self.settings.session_timeout_ms,
            # Static membership: a restarted worker gets its partitions back without a rebalance.
            group_instance_id=self.worker_id if self.settings.static_membership else None))
        self._collector = BatchCollector(self._consumer, self.parts.policy, stopping=self._leaving,
                                         model_has_room=self._activity.has_room,
                                         model_working=lambda: self._activity.pending > 0)

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
                drained = await self._serve_session(self._require_consumer(), burst)
                if drained or self._stop_requested.is_set():
                    break
                self.metrics.failovers.labels(**self._labels).inc()
                log.warning("worker %s hands over and leaves group %s (%s)", self.worker_id, self.group,
                            "drained" if self.supervisor.drained else self.supervisor.health.reason)
                await self._leave()
        finally:
            await self.supervisor.stop()
        return self.processed

    def _leaving(self) -> bool:
        return self._stop_requested.is_set() or not self.supervisor.may_serve

    async def _serve_session(self, consumer: AIOKafkaConsumer, burst: bool) -> bool:
        """One membership of the group; True when burst mode found the backlog drained."""
        self._health.set(1)
        # One batch waits at each hand-over at most: the batching policy sizes the next batch while the model is busy.
        fetched: asyncio.Queue[FetchedBatch | None] = asyncio.Queue(maxsize=1)
        preparations: asyncio.Queue[list[Prepared] | None] = asyncio.Queue(maxsize=1)
        prepared: asyncio.Queue[Prepared | None] = asyncio.Queue(maxsize=1)
        computed: asyncio.Queue[Computed | None] = asyncio.Queue(maxsize=COMPUTED_DEPTH)
        delivered: asyncio.Queue[Delivered | None] = asyncio.Queue(maxsize=SETTLE_DEPTH)
        settler = Settler(self._require_consumer, self.caches, self.tracer, self.parts.stats, self._count)
        depth = batches_in_flight(self.backend.device, self.settings.model_batches_in_flight)
        self._stage_threads = stage_threads(PREPARE_DEPTH, depth)
        self._activity.resize(depth)
        try:
            async with asyncio.TaskGroup() as stages:
                compute_stage = ComputeStage(self._activity, depth, self._computed, self._stage_threads)
                running = {"collect": self._collect_stage(consumer, fetched, burst),
                           "prepare": in_order(fetched, preparations, self._prepare, PREPARE_DEPTH),
                           "hand over": flatten(preparations, prepared),
                           "compute": compute_stage.run(prepared, computed),
                           "deliver": self._deliver_stage(computed, delivered), "settle": settler.run(delivered)}
                tasks = {name: stages.create_task(stage, name=f"stage {name}") for name, stage in running.items()}
                for task in tasks.values():
                    task.add_done_callback(self._stage_ended)
                collecting = tasks["collect"]
        except BaseExceptionGroup as group:
            raise group.exceptions[0] from group  # the first stage failure is the cause; pass it on as is
        finally:
            self._health.set(0)
            # Not waited for: a thread stuck in a hung device must not hold up leaving the group.
            self._stage_threads.shutdown(wait=False, cancel_futures=True)
        return collecting.result()

    def _stage_ended(self, task: "asyncio.Task[Any]") -> None:
        """A failed stage is said at once, and health drops at once: the session's TaskGroup passes the
        failure on only after every other stage has stopped, which a stuck stage could put off for good."""
        if not task.cancelled() and (failure := task.exception()) is not None:
            self._health.set(0)
            log.error("worker %s: %s failed, ending the session: %s: %s", self.worker_id, task.get_name(),
                      type(failure).__name__, failure)

    async def _collect_stage(self, consumer: AIOKafkaConsumer, out: "asyncio.Queue[FetchedBatch | None]",
                             burst: bool) -> bool:
        drained = False
        while not self._leaving():
            batch = await self._collector.next_batch()
            self._observe_backlog()
            if batch.records:
                self._activity.handed()
                await hand_on(consumer, out, batch)
            elif burst and await backlog_drained(consumer):
                drained = True
                break
        await out.put(None)
        return drained

    async def _prepare(self, batch: FetchedBatch) -> list[Prepared]:
        """Triage, cache lookups and tokenising. Every step isolates its records already; should one
        still raise, the batch is prepared again one record at a time, so only that record is lost
        to the DLQ (with the reason) and its batch-mates are answered."""
        try:
            return [await self._prepare_batch(batch)]
        except Exception:
            log.exception("preparing a batch of %d failed; preparing its records one by one", len(batch.records))
        self._activity.handed(len(batch.records) - 1)
        singles = []
        for record, fetched in zip(batch.records, batch.fetched_ms, strict=True):
            single = FetchedBatch()
            single.add([record], fetched)
            try:
                singles.append(await self._prepare_batch(single))
            except Exception as exc:
                singles.append(unreadable(single, now_ms(), exc, self.worker_id))
        return singles

    async def _prepare_batch(self, batch: FetchedBatch) -> Prepared:
        models = self.models
        threads = self._stage_threads
        prepared = await off_the_loop(threads, batch, sort_batch, batch, models.serving, dict(models.resident),
                                      self._who_for, now_ms(), self.caches.digest, self._triage_rules)
        await self.caches.lookup(prepared)
        if prepared.needs_model:
            await off_the_loop(threads, batch, encode_groups, prepared, reject_overlong=self._reject_overlong)
        return prepared

    def _computed(self, computed: Computed) -> None:
        run = computed.run
        self.sizing.after_batch(len(computed.records), computed.computed, run)
        if run is not None:
            self.supervisor.health.record_batch(run.device_error, run.largest_oom)

    def _export_health(self, _old: HealthState, new: HealthState, _reason: str) -> None:
        for state in HealthState:
            self.metrics.health_state.labels(model=self.settings.model, role=self.settings.role.value,
                                             device=self.backend.device, worker=self.worker_id,
                                             state=state.value).set(1 if state is new else 0)

    async def _deliver_stage(self, inbox: "asyncio.Queue[Computed | None]",
                             out: "asyncio.Queue[Delivered | None]") -> None:
        """Deliveries overlap (DELIVERIES_IN_FLIGHT): a batch's writes go out while the previous
        batch's acknowledgements are on their way; the settler gets them in batch order."""
        await in_order(inbox, out, self._deliver, DELIVERIES_IN_FLIGHT)

    async def _deliver(self, batch: Computed) -> Delivered:
        started = time.perf_counter()
        # Records of partitions a rebalance took away are the new owner's to answer.
        owned = owned_partitions(self._require_consumer())
        outcomes = [o for o in batch.outcomes if o.source is None or (o.source[0], o.source[1]) in owned]
        letters = [d for d in batch.dead_letters if (d.topic, d.partition) in owned]
        await self.parts.sink.deliver(outcomes, letters)
        elapsed = time.perf_counter() - started
        self.metrics.delivery.labels(**self._labels).observe(elapsed)
        self.metrics.stage.labels(**self._labels, stage="delivery").observe(elapsed)
        if batch.unanswered:
            await self._hand_over(batch)  # before the settler commits them: they are on the fallback topic
        return Delivered(batch, outcomes)

    async def _hand_over(self, batch: Computed) -> None:
        """The device failed before computing these: a primary forwards them to the CPU fallback
        topic (committed here only once they are there); a fallback worker has nowhere to send
        them and answers with an error."""
        if self.settings.role is Role.fallback:
            reason = str(batch.run and batch.run.device_error)
            who = self._who_for(self.backend)
            outcomes = [Outcome.of(item, who.error(item.request.id, "device_failed", reason))
                        for item in batch.unanswered]
            await self.parts.sink.deliver(outcomes, [])
            batch.outcomes += outcomes
            return
        originals = [(item.record.key, item.record.value or b"") for item in batch.unanswered]
        await self.parts.sink.forward(fallback_topic(self.settings.model), originals)
        self.metrics.forwarded.labels(**self._labels).inc(len(originals))

    def _collector_backlog(self) -> dict[TopicPartition, int]:
        return self._collector.last_backlog if self._consumer is not None else {}

    def _observe_backlog(self) -> None:
        owned = self._collector_backlog()
        self.metrics.observe_backlog(self.settings.model, self.settings.role.value, owned, self._reported_partitions)
        self._reported_partitions = set(owned)

    @property
    def _labels(self) -> dict[str, str]:
        return dict(model=self.settings.model, version=self.backend.manifest.id, role=self.settings.role.value,
                    device=self.backend.device)

    def _who_for(self, backend: Backend) -> Provenance:
        """Who computes with `backend`: stamped on its results (fallback workers answer `degraded`)."""
        version = backend.manifest.id
        if version not in self._who_by_version:
            served = Status.degraded if self.settings.role is Role.fallback else Status.ok
            self._who_by_version[version] = Provenance(model=self.settings.model, version=version,
                                                       device=backend.device, worker=self.worker_id,
                                                       served_status=served)
        return self._who_by_version[version]

    def _count(self, batch: Computed) -> None:
        self.processed += len(batch.records)
        self.computed += batch.computed
        self.expired += batch.expired
        self.metrics.observe_batch(self._labels, batch)
