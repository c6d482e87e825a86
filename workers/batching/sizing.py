"""The worker's effective max batch size after out-of-memory errors (seed §4.3).

An OOM halves the cap (never below 1); after a clean period without OOM it grows back one
step at a time toward the configured maximum, so a transient memory squeeze does not pin
the worker to tiny batches and a real one does not make it thrash.
"""

import time
from collections.abc import Callable


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
