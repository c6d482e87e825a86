"""Whether semantic lookups pay: a lookup costs an encoder pass per row the exact cache missed plus
the verifier's run over each candidate; a hit saves one model row. Lookups run while
`hit rate x model ms per row` exceeds that cost, with a cold cache credited `cold_hit_rate` for
its first `warmup_rows` rows (a cache switched off cold would stay cold), and one batch in
`probe_every` looked up regardless. The reasoning and the figures behind each choice are in
docs/concepts/semantic-cache.md ("It pays or it stays off").
"""

import logging
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass
class MarginalCost:
    """ms one more row adds to a model run: the slope of run time over rows, fitted over recent
    runs with exponential forgetting. A hit saves that, not the run's average per row, which
    is inflated by the fixed cost of a run when hits leave small batches.

    The slope is capped at the average per row (a run's fixed cost is never negative). The fit
    alone goes wild where it matters most: with lookups on and most rows hits, runs are a few
    rows each and timed while the next batch's lookups take the same cores, so one slow small
    run made the slope (and what a hit seemed to save) many times the model's cost, and lookups
    that cost 40% of the throughput looked as if they paid."""

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
        if not self._x:
            return None
        average = self._y / self._x
        spread = self._n * self._xx - self._x * self._x
        if self._n < 2 or spread <= 1e-9 * max(self._n * self._xx, 1.0):
            return average  # one batch size so far
        slope = (self._n * self._xy - self._x * self._y) / spread
        # A slope at or below zero (a slow small run: the worker's first, or one beside a lookup)
        # is noise, not rows that cost nothing: it stopped lookups on a model 25x the encoder.
        return average if slope <= 0 else min(slope, average)


@dataclass
class Ewma:
    alpha: float
    value: float | None = None

    def add(self, sample: float) -> None:
        self.value = sample if self.value is None else self.value + self.alpha * (sample - self.value)


@dataclass
class HitRate:
    """Hits over rows looked up, both sums forgetting `alpha` per batch; at least `prior` until
    `warmup_rows` rows were looked up in all."""

    alpha: float
    warmup_rows: int
    prior: float
    rows_seen: int = 0
    _hits: float = 0.0
    _rows: float = 0.0

    def add(self, rows: int, hits: int) -> None:
        keep = 1 - self.alpha
        self._hits, self._rows = keep * self._hits + hits, keep * self._rows + rows
        self.rows_seen += rows

    @property
    def value(self) -> float:
        measured = self._hits / self._rows if self._rows > 0 else 0.0
        if self.rows_seen < self.warmup_rows:
            # A floor, not a cap: probes of a dear model that find 80% hits must switch lookups on,
            # and at a fixed 40% they never saw enough rows to leave the warm-up (the bench's dear
            # model stayed off at 0.97x while always-on ran at 1.20x).
            return max(self.prior, measured)
        return measured


class LookupCost:
    def __init__(self, *, probe_every: int = 50, alpha: float = 0.2, warmup_rows: int = 2000,
                 cold_hit_rate: float = 0.4) -> None:
        self.probe_every = probe_every
        self.encoder_ms_per_row = Ewma(alpha)
        self.model_ms_per_row = MarginalCost(alpha)
        self.hit_rate = HitRate(alpha, warmup_rows, cold_hit_rate)
        self.verifier_ms_per_candidate = Ewma(alpha)
        self.candidates_per_row = Ewma(alpha)  # from its first sample: starting at 0 hid the verifier's cost
        self.paying: bool | None = None  # None until both a lookup and a model run were measured
        self._batches = 0

    def should_look_up(self) -> bool:
        """Every batch while lookups pay; otherwise one in `probe_every`. Until the first verdict,
        only the first batch: it prices the lookup, and the model's first runs price a hit."""
        self._batches += 1
        first = self.paying is None and self._batches == 1
        return bool(self.paying) or first or self._batches % self.probe_every == 0

    def record_lookup(self, rows: int, hits: int, encoder_ms: float, *, candidates: int = 0,
                      verifier_ms: float = 0.0) -> None:
        if rows == 0:
            return
        self.encoder_ms_per_row.add(encoder_ms / rows)
        self.hit_rate.add(rows, hits)
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
            self._judge()

    @property
    def saved_ms_per_row(self) -> float | None:
        if self.model_ms_per_row.value is None:
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
                        100 * self.hit_rate.value,
                        "" if paying else f"; looking up 1 batch in {self.probe_every} until they do")
