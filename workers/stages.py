"""The CPU-heavy halves of a micro-batch, run in threads so the event loop keeps consuming:
`prepare` (triage + tokenise) and `compute` (the model + building results).

Tokenizers and ONNX Runtime release the GIL, so batch k+1 is tokenised while batch k runs
and batch k-1 is delivered.
"""

import logging
import time
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
from aiokafka import ConsumerRecord

from schemas.wire import DeadLetter, Result, Status
from workers.backends.base import Backend, Encoded
from workers.delivery import Outcome
from workers.triage import Provenance, Ready, Triage, triage

log = logging.getLogger(__name__)


@dataclass
class Prepared:
    records: list[ConsumerRecord]
    triaged: Triage
    start_ms: int
    encoded: Encoded | None = None
    tokenize_ms: float = 0.0


@dataclass
class Computed:
    records: list[ConsumerRecord]
    outcomes: list[Outcome]
    dead_letters: list[DeadLetter]
    expired: int = 0
    computed: int = 0
    inference_ms: float = 0.0
    padding_efficiency: float | None = None
    queue_ms: list[float] = field(default_factory=list)


def prepare(backend: Backend, records: list[ConsumerRecord], who: Provenance, start_ms: int) -> Prepared:
    triaged = triage(records, who, start_ms)
    # Close deadlines first: when the batch is cut into sub-batches, urgent rows lead ties.
    triaged.ready.sort(key=lambda item: item.request.deadline_ms)
    prepared = Prepared(records=records, triaged=triaged, start_ms=start_ms)
    if triaged.ready:
        started = time.perf_counter()
        try:
            prepared.encoded = backend.encode([item.text for item in triaged.ready])
        except Exception:
            log.exception("tokenising a batch of %d failed; its rows will be retried one by one", len(triaged.ready))
        prepared.tokenize_ms = (time.perf_counter() - started) * 1000
    return prepared


def compute(backend: Backend, prepared: Prepared, who: Provenance) -> Computed:
    ready = prepared.triaged.ready
    done = Computed(records=prepared.records, outcomes=list(prepared.triaged.answered),
                    dead_letters=prepared.triaged.dead_letters, expired=prepared.triaged.expired, computed=len(ready))
    if not ready:
        return done
    started = time.perf_counter()
    vectors = _run_batch(backend, prepared.encoded, [item.text for item in ready])
    done.inference_ms = (time.perf_counter() - started) * 1000
    done.padding_efficiency = prepared.encoded.padding_efficiency if prepared.encoded is not None else None
    finished_ms = prepared.start_ms + prepared.tokenize_ms + done.inference_ms
    for item, vector in zip(ready, vectors, strict=True):
        queue_ms = float(max(prepared.start_ms - item.record.timestamp, 0))
        done.queue_ms.append(queue_ms)
        timings = {"queue_ms": queue_ms, "tokenize_ms": prepared.tokenize_ms, "inference_ms": done.inference_ms,
                   "since_submit_ms": max(finished_ms - item.request.submitted_ms, 0.0)}
        done.outcomes.append(Outcome(item.request, _result(who, item, vector, len(ready), timings)))
    return done


def _result(who: Provenance, item: Ready, vector: npt.NDArray[np.float32] | Exception, batch_size: int,
            timings: dict[str, float]) -> Result:
    if isinstance(vector, Exception):
        return who.error(item.request.id, "inference_failed", f"{type(vector).__name__}: {vector}",
                         batch_size=batch_size, timings=timings)
    return who.result(item.request.id, Status.ok, outputs={"embedding": vector.tolist()}, batch_size=batch_size,
                      timings=timings)


def _run_batch(backend: Backend, encoded: Encoded | None,
               texts: list[str]) -> list[npt.NDArray[np.float32] | Exception]:
    if encoded is not None:
        try:
            return list(backend.run(encoded))
        except Exception:
            log.exception("batch of %d failed; retrying one by one so one bad input fails alone", len(texts))
    answers: list[npt.NDArray[np.float32] | Exception] = []
    for text in texts:
        try:
            answers.append(backend.run(backend.encode([text]))[0])
        except Exception as exc:
            answers.append(exc)
    return answers
