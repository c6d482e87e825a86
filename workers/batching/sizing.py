"""How many records the next micro-batch takes: one owner, `BatchSizing`, told after every batch.

Two things move it:
- out-of-memory errors (seed §4.3): an OOM halves the cap on model rows (never below 1); after
  a clean period without OOM it grows back one step at a time toward the configured maximum, so
  a transient memory squeeze does not pin the worker to tiny batches and a real one does not
  make it thrash;
- the share the caches answer: records a cache answers cost a fraction of a model row, so the
  batch takes more records to keep the model's rows near the cap.
"""

import logging
import time
from collections.abc import Callable
from workers.batching.policy import BatchPolicy
from workers.compute.run_batch import BatchRun
from workers.observability.metrics import WorkerMetrics

log = logging.getLogger(__name__)


class BatchSizeCap:
    def __init__(self, configured: int, *, clean_period_s: float = 30.0, growth: float = 1.25,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.configured = configured
        self.current = configured
        self._clean_period_s = clean_period_s
        self._growth = growth
        self._clock = clock
        self._last_change = clock()

    def on_oom(self, batch_size: int) -> int:
        self.current = max(1, min(self.current, batch_size) // 2)
        self._last_change = self._clock()
        return self.current

    def on_clean_batch(self) -> int:
        """Call after a batch ran without OOM; grows the cap once per clean period."""
        if self.current < self.configured and self._clock() - self._last_change >= self._clean_period_s:
            self.current = min(self.configured, max(self.current + 1, int(self.current * self._growth)))
            self._last_change = self._clock()
        return self.current


class CachedShare:
    """Records to take per batch so that the model still gets about `cap` rows when the caches
    answer a share of them: a hit costs a fraction of a model row, and a model batch left half
    empty by hits costs nearly as much as a full one."""

    def __init__(self, *, alpha: float = 0.2, max_factor: float = 4.0) -> None:
        self.share = 0.0
        self._alpha = alpha
        self._max_factor = max_factor

    def observe(self, records: int, computed: int) -> None:
        if records:
            self.share += self._alpha * ((1 - computed / records) - self.share)

    def records_for(self, cap: int) -> int:
        factor = min(1 / max(1 - self.share, 1e-9), self._max_factor)
        return max(cap, round(cap * factor))


class BatchSizing:
    """The one owner of the effective max batch size: it alone resizes the batch policy."""

    def __init__(self, policy: BatchPolicy, *, clean_period_s: float, metrics: WorkerMetrics,
                 labels: Callable[[], dict[str, str]]) -> None:
        self._policy = policy
        self.cap = BatchSizeCap(policy.max_batch_size, clean_period_s=clean_period_s)
        self._cached_share = CachedShare()
        self._metrics = metrics
        self._labels = labels
        self.last_batch = 0  # records in the last batch, for the heartbeat

    def after_batch(self, records: int, computed: int, run: BatchRun | None) -> None:
        """`run`: the batch's model runs as one, None when the caches answered it whole."""
        self._cached_share.observe(records, computed)
        self.last_batch = records
        if run is not None and run.largest_oom:
            self.cap.on_oom(run.largest_oom)
            self._metrics.oom_splits.labels(**self._labels()).inc(run.oom_splits)
            log.warning("out of memory on a batch of %d; effective max batch now %d", run.largest_oom,
                        self.cap.current)
        elif run is not None and run.clean:
            self.cap.on_clean_batch()
        # The cap bounds model rows; records the caches answer come on top of it.
        self._policy.resize(self._cached_share.records_for(self.cap.current))
        if run is not None:
            self._metrics.effective_max_batch.labels(**self._labels()).set(self.cap.current)
