"""The shadow worker: runs the candidate version beside the live one on real traffic, compares, reports.

A member of its own consumer group (`<model>.shadow`) on the model's primary request topic,
so it reads every request the live group reads without taking any from it. It is its own
process, so the live path does not slow down: the two groups fetch independently, and
`intra_op_threads` caps the CPU the shadow's models take on a shared host. It never
delivers (see workers/shadow/engine.py); comparisons go to `fleet.shadow.<model>`, the
stats hash `fleet:shadow:<model>:<candidate>` and its metrics.

Which candidate: `shadow_candidate` when set, else the `candidate` pointer in
`fleet:versions:<model>`, re-read about every second. With no candidate the worker keeps
consuming and commits without comparing, so it never builds lag that a later candidate
would have to wade through; it starts comparing with the first batch after a candidate
appears.

Life cycle as the live worker: `start()`, idempotent `stop()`, `async with`; `run()` until
`request_stop()` (finish the batch, commit, leave) or, with burst=True, until the assigned
partitions are drained. Offsets are committed after a batch's comparisons are published
and its stats written; a redelivered batch is compared again (at-least-once, like results).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time

from aiokafka import AIOKafkaProducer, ConsumerRecord

from common.process import wait_for_dependencies
from common.redis_cluster import AnyRedis
from schemas.names import consumer_group
from workers.delivery.offsets import backlog_drained, commit_records
from workers.health.endpoints import health_endpoints
from workers.health.probes import ProcessProbes
from workers.membership import group_consumer, started_consumer
from workers.shadow.member import ShadowMember
from workers.shadow.engine import BackendLoader, ShadowMetrics, yield_cpu_to_live_workers
from workers.shadow.settings import ShadowSettings

__all__ = ["ShadowWorker", "serve_shadow"]

log = logging.getLogger(__name__)
POLL_MS = 200


class ShadowWorker(ShadowMember):
    what = "shadow worker"

    def __init__(self, settings: ShadowSettings, *, redis: AnyRedis | None = None,
                 producer: AIOKafkaProducer | None = None, backends: BackendLoader | None = None,
                 metrics: ShadowMetrics | None = None) -> None:
        super().__init__(settings, redis=redis, producer=producer, backends=backends, metrics=metrics)
        self.worker_id = settings.worker_id or f"{socket.gethostname()}-{os.getpid()}-shadow"
        self.group = settings.shadow_group or consumer_group(settings.model, "shadow")

    async def _open(self) -> None:
        await (await self._open_engine()).refresh_versions(force=True)
        if self._engine.candidate is not None:
            try:  # load before joining, so no batch waits for it; a failure is counted per batch instead
                await self.backends.get(self._engine.candidate)
            except Exception:
                log.exception("shadow could not load candidate %s", self._engine.candidate)
        self._consumer = await started_consumer(self.settings, "shadow", lambda: group_consumer(
            self.settings, self.topics, group=self.group, client_id=self.worker_id,
            max_poll_records=self.settings.max_batch_size, session_timeout_ms=self.settings.session_timeout_ms,
            auto_offset_reset=self.settings.shadow_start))
        log.info("shadow %s on %s (group %s): candidate %s vs stable %s", self.worker_id, ", ".join(self.topics), self.group,
                 self._engine.candidate or "none yet", self._engine.stable)

    async def run(self, burst: bool = False) -> int:
        """Compare until asked to stop (or, in burst mode, until the backlog is drained); returns records read."""
        consumer = self._require_consumer()
        engine = self.engine
        while not self._stop_requested.is_set():
            fetched = await consumer.getmany(timeout_ms=POLL_MS, max_records=self.settings.max_batch_size)
            records = [record for part in fetched.values() for record in part]
            if records:
                await self._let_live_go_first(records)
                await engine.process(records)
                await commit_records(consumer, records)
            elif burst and await backlog_drained(consumer):
                break
        return engine.totals.records

    async def _let_live_go_first(self, records: list[ConsumerRecord]) -> None:
        """Hold a batch until its newest record is `shadow_min_age_ms` old: the live workers have
        answered by then (so their result is there to compare with) and the shadow's compute no
        longer lands on the same moment as theirs."""
        newest_ms = max(record.timestamp for record in records)
        wait_s = (newest_ms + self.settings.shadow_min_age_ms) / 1000 - time.time()
        if wait_s > 0:
            await asyncio.sleep(wait_s)


async def serve_shadow(settings: ShadowSettings, *, burst: bool = False) -> int:
    """Run one shadow process until SIGTERM (or, in burst mode, a drained backlog): the entry
    point behind `FLEET_ROLE=shadow fleet-worker` and `fleet shadow run`. Returns records read."""
    yield_cpu_to_live_workers(settings)
    await wait_for_dependencies(settings, "shadow")
    worker = ShadowWorker(settings)
    probes = ProcessProbes(worker.worker_id)
    async with health_endpoints(probes, worker.metrics.registry, host=settings.metrics_host,
                                port=settings.metrics_port), worker:
        probes.stop_on_signals(worker.request_stop)
        engine = worker.engine
        print(f"shadow {worker.worker_id} ready: model {settings.model}, candidate "
              f"{engine.candidate or 'none (idle until a candidate pointer appears)'}, stable {engine.stable}",
              flush=True)
        await probes.watch(worker.run(burst=burst))
    totals = engine.totals
    print(f"shadow stopped: {totals.records} records, {totals.compared} compared, {totals.agreed} agreed, "
          f"skipped {dict(totals.skipped)}", flush=True)
    return totals.records
