"""A simulated device: the real tokenizer, a device that only takes time, outputs of the right shape.

For benchmarking and capacity planning only, never for serving: it answers with made-up rows.
It shows what the worker's own pipeline (Kafka, batching, tokenising, caches, delivery) costs
next to a device much faster than this machine's CPU, e.g. a GPU, without one. The worker
refuses it in production (see `WorkerSettings`).

A batch takes `a + b * rows + c * padded_tokens` milliseconds, spent in `time.sleep` in the
calling thread (the worker's device thread), which holds no CPU and releases the GIL. The device
runs one batch at a time, back to back, as a GPU's stream does (`DeviceTimeline`). The registered
version's tokenizer and length grouping run for real (`TokenizedBackend`), so tokenising costs what
it costs. Each row is float32, deterministic per token ids (a table row picked by a hash of them): an
embedding manifest gets unit-norm rows of its width, a classification manifest one probability
row (summing to 1) per text over its labels.

Presets (milliseconds):
- `h200-minilm`: a = 2, b = 0.05: roughly all-MiniLM-L6-v2 on a current GPU.
- `a10-bert-base`: a = 21.2, b = 1.06, c = 0: fitted to the seed's measured table (§2.2, BERT-base,
  inputs of 128 tokens, one A10): 45 QPS unbatched, 580 at batch 32, 720 at batch 64. Saturated
  throughput is rows / (a + b * rows): the fit gives 44.9, 580.6 and 718.8 QPS (residuals -0.2%,
  +0.1%, -0.2%). Every seed input had 128 tokens, so padded tokens were 128 per row and a per-token
  cost cannot be told apart from the per-row one: it is all in b (c = b / 128 = 0.0083 ms per
  padded token would be the per-token reading, for inputs of that length only). The seed's fourth
  row (batch 8 with a 10 ms delay: 210 QPS) is not fitted: the model gives 269 QPS for full
  batches of 8, so that run's batches were not full.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from models.backends.base import Chunk, Encoded
from models.backends.options import RuntimeOptions
from models.backends.tokenized import BatchTokenizer, TokenizedBackend
from models.registry import ModelManifest, ModelRegistry

DEVICE = "sim"
OUTPUT_TABLE_ROWS = 4096  # distinct output rows; two texts share one with odds 1 in 4096


@dataclass(frozen=True)
class SimDevice:
    """Milliseconds a batch takes: a per batch, b per row, c per padded token."""

    a_ms: float
    b_ms: float = 0.0
    c_ms: float = 0.0

    def __post_init__(self) -> None:
        if min(self.a_ms, self.b_ms, self.c_ms) < 0:
            raise ValueError(f"simulated device times must be >= 0, got {self}")

    def batch_ms(self, rows: int, padded_tokens: int = 0) -> float:
        return self.a_ms + self.b_ms * rows + self.c_ms * padded_tokens

    def ceiling_rows_per_s(self, rows: int, padded_tokens: int = 0) -> float:
        """Rows per second the device alone allows when every batch has `rows` rows."""
        return rows * 1000 / self.batch_ms(rows, padded_tokens)


PRESETS: dict[str, SimDevice] = {
    "h200-minilm": SimDevice(a_ms=2.0, b_ms=0.05),
    "a10-bert-base": SimDevice(a_ms=21.2, b_ms=1.06),
}


def sim_device(preset: str | None, a_ms: float | None = None, b_ms: float | None = None,
               c_ms: float | None = None) -> SimDevice:
    """A preset, with any of a, b, c given explicitly taking its place; no preset: a, b, c as given (0 if not)."""
    if preset is None and a_ms is None and b_ms is None and c_ms is None:
        raise ValueError(f"the simulated device needs a preset ({', '.join(sorted(PRESETS))}) or its times in ms "
                         "(sim_a_ms per batch, sim_b_ms per row, sim_c_ms per padded token)")
    if preset is not None and preset not in PRESETS:
        raise ValueError(f"unknown simulated device preset {preset!r}; expected one of {sorted(PRESETS)}")
    base = PRESETS[preset] if preset is not None else SimDevice(0.0)
    return SimDevice(a_ms=base.a_ms if a_ms is None else a_ms, b_ms=base.b_ms if b_ms is None else b_ms,
                     c_ms=base.c_ms if c_ms is None else c_ms)


class DeviceTimeline:
    """When each batch handed to a device that runs one at a time, back to back, is done.

    The device starts a batch when the one before it ends, not when that batch's thread next
    gets the GIL. A lock held across the sleep made the device idle between batches for as long
    as the finished batch's thread waited for the GIL (up to a switch interval, 5 ms, behind a
    busy event loop), which a GPU working through its queue never does."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._free_at = 0.0

    def queue(self, seconds: float, now: float) -> float:
        """The time at which a batch of `seconds`, handed over at `now`, is done."""
        with self._lock:
            self._free_at = max(now, self._free_at) + seconds
            return self._free_at


class SimBackend(TokenizedBackend):
    """A registered version's tokenizer in front of a simulated device (see the module's docstring)."""

    def __init__(self, manifest: ModelManifest, tokenizer: BatchTokenizer, device: SimDevice, *,
                 length_bucket_size: int = 16) -> None:
        super().__init__(manifest, tokenizer, DEVICE, length_bucket_size=length_bucket_size)
        self.sim = device
        self._timeline = DeviceTimeline()
        self._width = len(manifest.labels) if manifest.task == "classification" else manifest.embedding_dim
        self._table = self._output_table()
        # Token id x weight summed over positions fits int64 easily (ids < 2**17, weights < 2**20, <= 2**16 positions).
        self._position_weights = np.random.default_rng(OUTPUT_TABLE_ROWS).integers(
            1, 1 << 20, size=max(tokenizer.max_length, 1), dtype=np.int64)

    @classmethod
    def load(cls, registry: ModelRegistry, manifest: ModelManifest, device: SimDevice,
             options: RuntimeOptions = RuntimeOptions()) -> SimBackend:
        # Hashes first, like the real backends: the tokenizer read here is the version's own.
        registry.verify(manifest)
        tokenizer = BatchTokenizer.of(registry, manifest, options.max_input_tokens)
        return cls(manifest, tokenizer, device, length_bucket_size=options.length_bucket_size)

    def run(self, encoded: Encoded) -> npt.NDArray[np.float32]:
        self._occupy_device(self.sim.batch_ms(encoded.count, encoded.padded_tokens) / 1000)
        out = np.empty((encoded.count, self._width), dtype=np.float32)
        for chunk in encoded.chunks:
            out[chunk.rows] = self._rows(chunk)
        return out

    def _occupy_device(self, seconds: float) -> None:
        done_at = self._timeline.queue(seconds, time.perf_counter())
        while (left := done_at - time.perf_counter()) > 0:
            time.sleep(left)

    def _rows(self, chunk: Chunk) -> npt.NDArray[np.float32]:
        """Rows picked from a fixed table by a hash of each input's token ids: the same text gets the
        same row, and the CPU pays one matrix product a sub-batch (a device returns its rows at no
        CPU cost; a hash per row in Python, or a random draw per row, cost this machine a tenth of what
        the whole pipeline costs per request). Padding is masked out, so a row does not depend on
        the sub-batch it landed in; without an attention mask every position counts."""
        ids = chunk.feeds["input_ids"]
        mask = chunk.feeds.get("attention_mask")
        tokens = ids if mask is None else ids * mask
        picks = (tokens @ self._position_weights[:ids.shape[1]]) % OUTPUT_TABLE_ROWS
        return self._table[picks]

    def _output_table(self) -> npt.NDArray[np.float32]:
        rows = np.random.default_rng(self._width).standard_normal((OUTPUT_TABLE_ROWS, self._width), dtype=np.float32)
        if self.manifest.task == "classification":
            exp = np.exp(rows - rows.max(axis=1, keepdims=True))
            return np.asarray(exp / exp.sum(axis=1, keepdims=True), dtype=np.float32)
        return np.asarray(rows / np.linalg.norm(rows, axis=1, keepdims=True), dtype=np.float32)
