"""The path a batch takes through a worker, in one place: the stages and the queues between them.

    Kafka --> collect --fetched--> prepare x4 --preparations--> hand over --prepared--> compute x depth
                                   (triage: decode, validate,                            (the model, off
                                    dead-letter; caches; tokenise)                        the event loop)
          --computed--> deliver x3 --delivered--> settle --> Kafka offsets committed
                        (Redis replies, results     (commit, teach the caches,
                         topics, DLQ, fallback)      traces, version stats)

One `Pipeline` serves one membership of the consumer group (workers/worker.py holds the life cycle:
start, stop, joining and leaving, health). Every queue is bounded, so a slow stage holds the ones
before it back instead of piling records up. The stages that work on several batches at once
(prepare, compute, deliver: `in_order`) still pass them on in the order they came, so delivery and
commits happen in batch order and a batch's offsets are committed only after its results are
delivered (at least once; a redelivered request is answered again under the same id).

What each step does lives beside it: the batching policy in workers/batching/, triage, tokenising
and running the model in workers/compute/, the caches in workers/cache/, delivery in
workers/delivery/.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, TypeVar

from aiokafka import AIOKafkaConsumer

from common.process import return_memory
from models.backends.base import Backend
from schemas.lanes import Lanes
from schemas.wire import Status, now_ms
from versions.stats import VersionStatsRecorder
from workers.assembly import WorkerParts
from workers.batching.collector import BatchCollector, FetchedBatch
from workers.batching.lanes import LaneGate
from workers.cache.batch import BatchCaches
from workers.compute.compute import Computed, compute, failed
from workers.compute.prepare import Prepared, encode_groups, off_the_loop, sort_batch, unreadable
from workers.compute.provenance import Provenance
from workers.compute.threads import in_thread
from workers.delivery.offsets import backlog_drained, commit_records, hand_on, owned_partitions
from workers.delivery.deliver import BatchDelivery
from workers.delivery.sink import Outcome
from workers.delivery.version_stats import record_versions
from workers.observability.metrics import WorkerMetrics
from workers.observability.tracing import DebugTracer
from workers.settings import OverlongInputs, Role, WorkerSettings

log = logging.getLogger(__name__)

# Batches prepared at once. A batch spends most of its preparation waiting for the GIL, not working:
# each of its two thread hops and each return from the tokenizer's Rust waits for a busy event
# loop to let go (measured at max batch 64: 0.8 ms triage and ~1.5 ms of tokenising took 15-19 ms).
# With two at once, the compute stage found no prepared batch three samples in four at max batch 64.
PREPARE_DEPTH = 4
# Computed batches that may wait for delivery: the model goes on while a delivery waits on its round trips.
COMPUTED_DEPTH = 2
# Deliveries under way at once: one batch's writes go out while the previous one's acknowledgements come back.
DELIVERIES_IN_FLIGHT = 3
# Delivered batches that may wait for their settlement before delivery itself waits.
SETTLE_DEPTH = 8
# After batches this large, glibc is asked to give freed memory back (a 5 MB record leaves ~400 MB behind).
OUTSIZED_BATCH_BYTES = 1 << 20

In = TypeVar("In")
Out = TypeVar("Out")


# --- the stages' plumbing: several items at once, passed on in order ------------------------------

async def in_order(inbox: "asyncio.Queue[In | None]", out: "asyncio.Queue[Out | None]",
                   work: Callable[[In], Awaitable[Out]], depth: int,
                   done: Callable[[Out], None] = lambda _: None) -> None:
    """`work` on up to `depth` items at once until the None that ends the inbox; each result is
    given to `done`, then put on `out`, in inbox order; None follows the last. A failing `work`
    fails the stage (the task group cancels the rest), as a failure of the stage itself would."""
    if depth < 1:
        raise ValueError(f"items in flight must be at least 1, got {depth}")
    slots = asyncio.Semaphore(depth)
    running: asyncio.Queue[asyncio.Task[Out] | None] = asyncio.Queue()  # bounded by the slots
    async with asyncio.TaskGroup() as tasks:
        tasks.create_task(_submit(inbox, running, slots, tasks, work))
        while (task := await running.get()) is not None:
            result = await task
            slots.release()
            done(result)
            await out.put(result)
    await out.put(None)


async def _submit(inbox: "asyncio.Queue[In | None]", running: "asyncio.Queue[asyncio.Task[Out] | None]",
                  slots: asyncio.Semaphore, tasks: asyncio.TaskGroup, work: Callable[[In], Awaitable[Out]]) -> None:
    while (item := await inbox.get()) is not None:
        await slots.acquire()
        running.put_nowait(tasks.create_task(work(item)))  # type: ignore[arg-type]
    running.put_nowait(None)


async def flatten(inbox: "asyncio.Queue[list[Out] | None]", out: "asyncio.Queue[Out | None]") -> None:
    """Each item of the lists arriving on `inbox` on to `out`, in order; None follows the last."""
    while (items := await inbox.get()) is not None:
        for item in items:
            await out.put(item)
    await out.put(None)


# --- compute: prepared batches through the model ---------------------------------------------------

class ModelActivity:
    """What the model holds: batches handed to it and not computed yet, whether it has room for
    another (fewer than `capacity` pending: the batching policy holds a part batch back while it
    has none), and since when the oldest running batch runs (the health watchdog's hung-device
    check). It outlives a session: the watchdog and the collector read it."""

    def __init__(self, capacity: int = 1) -> None:
        self.pending = 0
        self.capacity = capacity
        self.has_room = asyncio.Event()
        self.has_room.set()
        self._running: deque[float] = deque()

    @property
    def busy_since(self) -> float | None:
        return self._running[0] if self._running else None

    def resize(self, capacity: int) -> None:
        """The batches the model takes at once (the compute stage's depth)."""
        self.capacity = capacity
        self._note_room()

    def handed(self, batches: int = 1) -> None:
        self.pending += batches
        self._note_room()

    def started(self) -> float:
        at = time.monotonic()
        self._running.append(at)
        return at

    def finished(self, started: float | None) -> None:
        if started is not None:
            self._running.remove(started)
        self.pending -= 1
        self._note_room()

    def _note_room(self) -> None:
        if self.pending < self.capacity:
            self.has_room.set()
        else:
            self.has_room.clear()


class ComputeStage:
    """Up to `depth` batches in the model at once (workers/compute/parallelism.py says how many);
    they leave in the order they came however long each took."""

    def __init__(self, activity: ModelActivity, depth: int, computed: Callable[[Computed], None],
                 threads: Executor | None = None) -> None:
        """`depth` batches run at once at most, in `threads` (default: the loop's pool); `computed`
        sees each batch once it is done, in order."""
        if depth < 1:
            raise ValueError(f"batches in flight must be at least 1, got {depth}")
        self._activity = activity
        self._depth = depth
        self._computed = computed
        self._threads = threads

    async def run(self, inbox: "asyncio.Queue[Prepared | None]", out: "asyncio.Queue[Computed | None]") -> None:
        await in_order(inbox, out, self._one, self._depth, self._computed)

    async def _one(self, batch: Prepared) -> Computed:
        started = self._activity.started() if batch.needs_model else None
        try:
            # A batch the caches answered whole skips the thread hop: nothing to compute.
            return await in_thread(self._threads, compute, batch) if batch.needs_model else compute(batch)
        except Exception as exc:  # run_batch isolates rows; this is the net under a bug, not the plan
            log.exception("computing a batch of %d failed; its requests are answered with an error",
                          len(batch.records))
            return failed(batch, exc)
        finally:
            self._activity.finished(started)


# --- settle: what follows delivery and no caller waits for -----------------------------------------

@dataclass(frozen=True)
class Delivered:
    """A computed batch and the outcomes that were delivered for it (those of partitions still owned);
    `transacted` names the partitions whose offsets a transaction committed (or a fence refused)."""

    batch: Computed
    outcomes: list[Outcome]
    owned: frozenset[tuple[str, int]]  # at delivery: what the settler may commit (the rest was not answered here)
    transacted: frozenset[tuple[str, int]] = frozenset()


class Settler:
    """Commits the batch's offsets, teaches the caches, writes debug traces, counts version stats.
    Done inline, its round trips would hold up the next delivery; here they run beside it. Batches
    delivered while the previous settlement was in flight are settled together: one commit covers
    them all (commits are cumulative per partition). Only delivered batches get here."""

    def __init__(self, consumer: Callable[[], AIOKafkaConsumer], caches: BatchCaches, tracer: DebugTracer,
                 stats: VersionStatsRecorder, settled: Callable[[Computed], None]) -> None:
        """`consumer` gives the group member of the moment; `settled` is told of each batch once settled."""
        self._consumer = consumer
        self._caches = caches
        self._tracer = tracer
        self._stats = stats
        self._settled = settled

    async def run(self, inbox: "asyncio.Queue[Delivered | None]") -> None:
        """Settle what arrives until the None that ends the session, taking whatever queued up at once."""
        finished = False
        while not finished and (first := await inbox.get()) is not None:
            delivered = [first]
            while not inbox.empty():
                more = inbox.get_nowait()
                if more is None:
                    finished = True
                    break
                delivered.append(more)
            await self.settle(delivered)

    async def settle(self, delivered: list[Delivered]) -> None:
        outcomes = [outcome for item in delivered for outcome in item.outcomes]
        records = [record for item in delivered for record in item.batch.records
                   if (record.topic, record.partition) in item.owned - item.transacted]
        # None of these raises: a refused commit is redelivered, caches, traces and stats are best effort.
        await asyncio.gather(commit_records(self._consumer(), records),
                             *(self._caches.remember(item.batch) for item in delivered),
                             self._tracer.record(outcomes), record_versions(self._stats, outcomes))
        for item in delivered:
            self._settled(item.batch)
        if sum(item.batch.size_bytes for item in delivered) > OUTSIZED_BATCH_BYTES:
            await asyncio.to_thread(return_memory)


# --- one membership's pipeline ---------------------------------------------------------------------

class Pipeline:
    """The stages of one membership of the group, from the records Kafka hands over to the offsets
    committed for them. `run()` returns when the worker leaves (True: burst mode drained the backlog)."""

    def __init__(self, settings: WorkerSettings, parts: WorkerParts, *, worker_id: str,
                 consumer: Callable[[], AIOKafkaConsumer], collector: BatchCollector, lanes: LaneGate,
                 activity: ModelActivity,
                 threads: Executor, depth: int, metrics: WorkerMetrics, labels: Callable[[], dict[str, str]],
                 leaving: Callable[[], bool], collected: Callable[[], None],
                 settled: Callable[[Computed], None]) -> None:
        """`leaving` says when to stop collecting; `collected` follows each collection (backlog
        gauges); `settled` is told of each batch once committed (the worker's counters)."""
        self._settings = settings
        self._parts = parts
        self._worker_id = worker_id
        self._consumer = consumer
        self._collector = collector
        self._lanes = lanes
        self._activity = activity
        self._threads = threads
        self._depth = depth
        self._metrics = metrics
        self._labels = labels
        self._leaving = leaving
        self._collected = collected
        self._settled = settled
        self._reject_overlong = settings.overlong_inputs == OverlongInputs.reject
        self._triage_rules = settings.triage_rules  # one, so its verdicts on results topics are remembered
        self._who_by_version: dict[str, Provenance] = {}
        self._delivery = BatchDelivery(parts.sink, parts.transactions, parts.patience,
                                       forwarded=lambda count: metrics.forwarded.labels(**labels()).inc(count))

    async def run(self, burst: bool, stage_ended: Callable[["asyncio.Task[Any]"], None]) -> bool:
        """All stages at once; the first to fail ends the session and its error is raised as is.
        `stage_ended` hears of each stage as it ends (a failure is said before the others stop)."""
        # One batch waits at each hand-over at most: the batching policy sizes the next batch while the model is busy.
        fetched: asyncio.Queue[FetchedBatch | None] = asyncio.Queue(maxsize=1)
        preparations: asyncio.Queue[list[Prepared] | None] = asyncio.Queue(maxsize=1)
        prepared: asyncio.Queue[Prepared | None] = asyncio.Queue(maxsize=1)
        computed: asyncio.Queue[Computed | None] = asyncio.Queue(maxsize=COMPUTED_DEPTH)
        delivered: asyncio.Queue[Delivered | None] = asyncio.Queue(maxsize=SETTLE_DEPTH)
        parts = self._parts
        settler = Settler(self._consumer, parts.caches, parts.tracer, parts.stats, self._settled)
        try:
            async with asyncio.TaskGroup() as stages:
                running = {"collect": self._collect(fetched, burst),
                           "prepare": in_order(fetched, preparations, self._prepare, PREPARE_DEPTH),
                           "hand over": flatten(preparations, prepared),
                           "compute": ComputeStage(self._activity, self._depth, self._computed,
                                                   self._threads).run(prepared, computed),
                           "deliver": in_order(computed, delivered, self._deliver, DELIVERIES_IN_FLIGHT),
                           "settle": settler.run(delivered)}
                tasks = {name: stages.create_task(stage, name=f"stage {name}") for name, stage in running.items()}
                for task in tasks.values():
                    task.add_done_callback(stage_ended)
        except BaseExceptionGroup as group:
            cause: BaseException = group
            while isinstance(cause, BaseExceptionGroup):  # a stage's own task group (in_order) nests one more
                cause = cause.exceptions[0]
            raise cause from group  # the first stage failure is the cause; pass it on as is
        return bool(tasks["collect"].result())

    # intake
    async def _collect(self, out: "asyncio.Queue[FetchedBatch | None]", burst: bool) -> bool:
        consumer = self._consumer()
        drained = False
        while not self._leaving():
            choice = await self._lanes.choose(await self._collector.waiting())
            batch = await self._collector.next_batch(choice.max_records, choice.higher)
            self._collected()
            if batch.records:
                self._lanes.collected(choice)
                self._activity.handed()
                await hand_on(consumer, out, batch)
            elif burst and await backlog_drained(consumer):
                drained = True
                break
        await out.put(None)
        return drained

    # decode, caches, tokenise
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
                singles.append(unreadable(single, now_ms(), exc, self._worker_id))
        return singles

    async def _prepare_batch(self, batch: FetchedBatch) -> Prepared:
        models, caches = self._parts.models, self._parts.caches
        prepared = await off_the_loop(self._threads, batch, sort_batch, batch, models.serving, dict(models.resident),
                                      self.who_for, now_ms(), caches.digest, self._triage_rules, self._parts.cancelled.jobs)
        await caches.lookup(prepared)
        if prepared.needs_model:
            await off_the_loop(self._threads, batch, encode_groups, prepared, reject_overlong=self._reject_overlong)
        return prepared

    # compute (the stage above); what a computed batch tells the batch sizing and the health watch
    def _computed(self, computed: Computed) -> None:
        run = computed.run
        self._parts.sizing.after_batch(len(computed.records), computed.computed, run)
        self._lanes.observe_run(computed.computed, computed.inference_ms)
        if run is not None:
            self._parts.supervisor.health.record_batch(run.device_error, run.largest_oom)

    # deliver
    async def _deliver(self, batch: Computed) -> Delivered:
        turn = self._delivery.take_turn()  # before any await: transactions commit in the order batches came
        started = time.perf_counter()
        # Records of partitions a rebalance took away are the new owner's to answer.
        owned = owned_partitions(self._consumer())
        outcomes = [o for o in batch.outcomes if o.source is None or (o.source[0], o.source[1]) in owned]
        letters = [d for d in batch.dead_letters if (d.topic, d.partition) in owned]
        if batch.unanswered and self._settings.role is Role.fallback:
            # The device failed before computing these, and a fallback has nowhere to send them.
            reason = str(batch.run and batch.run.device_error)
            who = self.who_for(self._parts.models.serving.stable)
            unanswered = [Outcome.of(item, who.error(item.request.id, "device_failed", reason))
                          for item in batch.unanswered]
            outcomes += unanswered
            batch.outcomes += unanswered
        # A primary forwards them to their lane's CPU fallback topic, committed here only once they are there.
        forwards = [((item.record.topic, item.record.partition, item.record.offset),
                     (Lanes.fallback_of(item.record.topic), item.record.value or b"", item.record.key))
                    for item in batch.unanswered] if self._settings.role is not Role.fallback else []
        transacted = await self._delivery.deliver(turn, batch.records, owned, outcomes, letters, forwards)
        elapsed = time.perf_counter() - started
        labels = self._labels()
        self._metrics.delivery.labels(**labels).observe(elapsed)
        self._metrics.stage.labels(**labels, stage="delivery").observe(elapsed)
        return Delivered(batch, outcomes, owned, transacted)

    def who_for(self, backend: Backend) -> Provenance:
        """Who computes with `backend`: stamped on its results (fallback workers answer `degraded`)."""
        version = backend.manifest.id
        if version not in self._who_by_version:
            served = Status.degraded if self._settings.role is Role.fallback else Status.ok
            self._who_by_version[version] = Provenance(model=self._settings.model, version=version,
                                                       device=backend.device, worker=self._worker_id,
                                                       served_status=served)
        return self._who_by_version[version]
