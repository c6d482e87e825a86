"""Running one batch through a backend without losing or failing the wrong requests.

- Out of memory: split the batch in halves and retry each, down to single rows; a single row
  that still does not fit gets an `out_of_memory` error. Nothing is dropped.
- Any other exception from a batch: retry row by row, so one bad input fails alone.
- A device error (driver crash, lost device): stop; the rows not computed are handed back
  unanswered so the worker can forward them to the CPU fallback topic.
"""

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from models.backends.base import Backend, Encoded
from models.backends.errors import DeviceError, DeviceOutOfMemory

log = logging.getLogger(__name__)

Answer = npt.NDArray[np.float32] | Exception | None  # None: not computed, device failed


@dataclass
class BatchRun:
    answers: list[Answer]
    oom_splits: int = 0
    largest_oom: int = 0
    device_error: DeviceError | None = None
    clean: bool = True
    errors: list[Exception] = field(default_factory=list)


class OutOfMemoryForOneRow(RuntimeError):
    pass


def run_batch(backend: Backend, encoded: Encoded | None, texts: Sequence[str]) -> BatchRun:
    run = BatchRun(answers=[None] * len(texts))
    if encoded is not None:
        try:
            run.answers = list(backend.run(encoded))
            return run
        except DeviceOutOfMemory:
            run.clean = False
            run.largest_oom = len(texts)
            _split(backend, list(range(len(texts))), texts, run)
            return run
        except DeviceError as exc:
            run.clean = False
            run.device_error = exc
            return run
        except Exception:
            log.exception("batch of %d failed; retrying one by one so one bad input fails alone", len(texts))
    run.clean = False
    _one_by_one(backend, list(range(len(texts))), texts, run)
    return run


def _split(backend: Backend, rows: list[int], texts: Sequence[str], run: BatchRun) -> None:
    halves = [rows[: len(rows) // 2], rows[len(rows) // 2 :]]
    run.oom_splits += 1
    for half in halves:
        if not half or run.device_error is not None:
            continue
        try:
            vectors = backend.run(backend.encode([texts[i] for i in half]))
            for i, vector in zip(half, vectors, strict=True):
                run.answers[i] = vector
        except DeviceOutOfMemory:
            run.largest_oom = max(run.largest_oom, len(half))
            if len(half) == 1:
                run.answers[half[0]] = OutOfMemoryForOneRow("out of memory for a single input; shorten it")
            else:
                _split(backend, half, texts, run)
        except DeviceError as exc:
            run.device_error = exc
        except Exception:
            _one_by_one(backend, half, texts, run)


def _one_by_one(backend: Backend, rows: list[int], texts: Sequence[str], run: BatchRun) -> None:
    for i in rows:
        if run.device_error is not None:
            return
        try:
            run.answers[i] = backend.run(backend.encode([texts[i]]))[0]
        except DeviceOutOfMemory:
            run.answers[i] = OutOfMemoryForOneRow("out of memory for a single input; shorten it")
        except DeviceError as exc:
            run.device_error = exc
        except Exception as exc:
            run.answers[i] = exc
