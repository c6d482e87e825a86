"""What each computed batch tells the worker: device health, out-of-memory back-off, and how
many records the next batch should take."""

import logging
from collections.abc import Callable

from workers.batching.sizing import BatchSizeCap, CachedShare
from workers.batching.policy import BatchPolicy
from workers.health.monitor import HealthMonitor
from workers.observability.metrics import WorkerMetrics
from workers.compute.stages import Computed

log = logging.getLogger(__name__)


class BatchFeedback:
    def __init__(self, policy: BatchPolicy, cap: BatchSizeCap, metrics: WorkerMetrics,
                 labels: Callable[[], dict[str, str]]) -> None:
        self._policy = policy
        self.cap = cap
        self._cached_share = CachedShare()
        self._metrics = metrics
        self._labels = labels

    def after_compute(self, computed: Computed, health: HealthMonitor) -> None:
        self._adjust_sizes(computed)
        run = computed.run
        if run is None:
            return
        if run.device_error is not None:
            health.record_error(run.device_error)
        elif run.largest_oom:
            health.record_oom(f"batch of {run.largest_oom}")
        else:
            health.record_success()

    def _adjust_sizes(self, computed: Computed) -> None:
        self._cached_share.observe(len(computed.records), computed.computed)
        run = computed.run
        if run is not None and run.largest_oom:
            self.cap.on_oom(run.largest_oom)
            self._metrics.oom_splits.labels(**self._labels()).inc(run.oom_splits)
            log.warning("out of memory on a batch of %d; effective max batch now %d", run.largest_oom,
                        self.cap.current)
        elif run is not None and run.clean:
            self.cap.on_clean_batch()
        # The cap bounds model rows; records the caches answer come on top of it.
        self._policy.max_batch_size = self._cached_share.records_for(self.cap.current)
        if run is not None:
            self._metrics.effective_max_batch.labels(**self._labels()).set(self.cap.current)
