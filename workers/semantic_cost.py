"""Whether semantic lookups pay for themselves on this model.

A lookup costs an encoder pass over every row the exact cache missed; a hit saves one model
row. When the model is barely dearer than the encoder (faq-intent is the encoder plus a
small head), lookups cost more than the hits save, and the semantic tier slows the worker
down. So the tier measures both sides and, while `hit rate x model ms per row` stays below
`encoder ms per row`, looks up only one batch in `probe_every` to keep the figures fresh.
"""

import logging
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass
class Ewma:
    alpha: float
    value: float | None = None

    def add(self, sample: float) -> None:
        self.value = sample if self.value is None else self.value + self.alpha * (sample - self.value)


class LookupCost:
    def __init__(self, *, probe_every: int = 10, min_batches: int = 5, alpha: float = 0.1) -> None:
        self.probe_every = probe_every
        self._min_batches = min_batches
        self.encoder_ms_per_row = Ewma(alpha)
        self.model_ms_per_row = Ewma(alpha)
        self.hit_rate = Ewma(alpha)
        self._looked_up = 0
        self._skipped = 0
        self.paying = True

    def should_look_up(self) -> bool:
        if self.paying or self._looked_up < self._min_batches:
            return True
        self._skipped += 1
        return self._skipped % self.probe_every == 0

    def record_lookup(self, rows: int, hits: int, encoder_ms: float) -> None:
        if rows == 0:
            return
        self._looked_up += 1
        self.encoder_ms_per_row.add(encoder_ms / rows)
        self.hit_rate.add(hits / rows)
        self._judge()

    def record_model(self, rows: int, inference_ms: float) -> None:
        if rows:
            self.model_ms_per_row.add(inference_ms / rows)

    @property
    def saved_ms_per_row(self) -> float | None:
        if self.hit_rate.value is None or self.model_ms_per_row.value is None:
            return None
        return self.hit_rate.value * self.model_ms_per_row.value

    def _judge(self) -> None:
        saved, cost = self.saved_ms_per_row, self.encoder_ms_per_row.value
        if saved is None or cost is None or self._looked_up < self._min_batches:
            return
        paying = saved >= cost
        if paying != self.paying:
            self.paying = paying
            log.warning("semantic lookups %s: hits save %.3f ms of model time per row, the encoder costs %.3f ms "
                        "(hit rate %.1f%%)%s", "pay again" if paying else "do not pay", saved, cost,
                        100 * (self.hit_rate.value or 0.0),
                        "" if paying else f"; looking up 1 batch in {self.probe_every} until they do")
