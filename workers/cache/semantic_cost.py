"""Whether semantic lookups pay for themselves on this model.

A lookup costs an encoder pass over every row the exact cache missed, plus, where a verifier
decides, its run over each candidate the index proposes (`verifier ms per candidate x
candidates per row`); a hit saves one model row (what one more row adds to a model run).
Lookups pay while `hit rate x model ms per row` exceeds that cost per row. The tier
measures all three; the hit rate starts at an optimistic 100% and converges on what lookups
find, so a model several times dearer than the encoder is looked up (and its cache filled)
from the first batch, while one barely dearer than the encoder (faq-intent is the encoder
plus a small head) stops after a batch or two: even a 100% hit rate would not pay there.
While lookups do not pay, one batch in `probe_every` is still looked up to keep the figures
(and the cache) fresh.
"""

import logging
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass
class MarginalCost:
    """ms one more row adds to a model run: the slope of run time over rows, fitted over recent
    runs with exponential forgetting. A hit saves that, not the run's average per row, which
    is inflated by the fixed cost of a run when hits leave small batches."""

    alpha: float
    _n: float = 0.0
    _x: float = 0.0
    _y: float = 0.0
    _xx: float = 0.0
    _xy: float = 0.0

    def add(self, rows: int, ms: float) -> None:
        keep = 1 - self.alpha
        self._n, self._x, self._y = keep * self._n + 1, keep * self._x + rows, keep * self._y + ms
        self._xx, self._xy = keep * self._xx + rows * rows, keep * self._xy + rows * ms

    @property
    def value(self) -> float | None:
        spread = self._n * self._xx - self._x * self._x
        if self._n < 2 or spread <= 1e-9 * max(self._n * self._xx, 1.0):
            return self._y / self._x if self._x else None  # one batch size so far: the average
        return max((self._n * self._xy - self._x * self._y) / spread, 0.0)


@dataclass
class Ewma:
    alpha: float
    value: float | None = None

    def add(self, sample: float) -> None:
        self.value = sample if self.value is None else self.value + self.alpha * (sample - self.value)


class LookupCost:
    def __init__(self, *, probe_every: int = 50, alpha: float = 0.2) -> None:
        self.probe_every = probe_every
        self.encoder_ms_per_row = Ewma(alpha)
        self.model_ms_per_row = MarginalCost(alpha)
        self.hit_rate = Ewma(alpha, value=1.0)
        self.verifier_ms_per_candidate = Ewma(alpha)
        self.candidates_per_row = Ewma(alpha, value=0.0)
        self.paying = True
        self._batches = 0

    def should_look_up(self) -> bool:
        """Every batch while lookups pay; otherwise one in `probe_every`."""
        self._batches += 1
        return self.paying or self._batches % self.probe_every == 0

    def record_lookup(self, rows: int, hits: int, encoder_ms: float, *, candidates: int = 0,
                      verifier_ms: float = 0.0) -> None:
        if rows == 0:
            return
        self.encoder_ms_per_row.add(encoder_ms / rows)
        self.hit_rate.add(hits / rows)
        self.candidates_per_row.add(candidates / rows)
        if candidates:
            self.verifier_ms_per_candidate.add(verifier_ms / candidates)
        self._judge()

    @property
    def verifier_ms_per_row(self) -> float:
        """What the verifier adds to a lookup, per row looked up."""
        per_candidate = self.verifier_ms_per_candidate.value
        return 0.0 if per_candidate is None else per_candidate * (self.candidates_per_row.value or 0.0)

    @property
    def cost_ms_per_row(self) -> float | None:
        encoder = self.encoder_ms_per_row.value
        return None if encoder is None else encoder + self.verifier_ms_per_row

    def record_model(self, rows: int, inference_ms: float) -> None:
        if rows:
            self.model_ms_per_row.add(rows, inference_ms)

    @property
    def saved_ms_per_row(self) -> float | None:
        if self.hit_rate.value is None or self.model_ms_per_row.value is None:
            return None
        return self.hit_rate.value * self.model_ms_per_row.value

    def _judge(self) -> None:
        saved, cost = self.saved_ms_per_row, self.cost_ms_per_row
        if saved is None or cost is None:
            return
        paying = saved >= cost
        if paying != self.paying:
            self.paying = paying
            log.warning("semantic lookups %s: hits save %.3f ms of model time per row, the encoder and verifier cost %.3f ms "
                        "(hit rate %.1f%%)%s", "pay" if paying else "do not pay", saved, cost,
                        100 * (self.hit_rate.value or 0.0),
                        "" if paying else f"; looking up 1 batch in {self.probe_every} until they do")
