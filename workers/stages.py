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

from schemas.wire import DeadLetter, Result
from workers.backends.base import Backend, Encoded
from workers.batching import FetchedBatch
from workers.run_batch import BatchRun, OutOfMemoryForOneRow, run_batch
from workers.delivery import Outcome
from workers.triage import Provenance, Ready, Triage, triage

log = logging.getLogger(__name__)


@dataclass
class Prepared:
    records: list[ConsumerRecord]
    fetched_ms: dict[int, float]  # id(record) -> when it reached this worker
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
    input_tokens: tuple[int, ...] = ()
    unanswered: list[Ready] = field(default_factory=list)  # the device failed before computing these
    run: BatchRun | None = None
    stage_ms: dict[str, list[float]] = field(default_factory=dict)  # per request: queue, topic, batch_wait


def prepare(backend: Backend, batch: FetchedBatch, who: Provenance, start_ms: int, *,
            reject_overlong: bool = False) -> Prepared:
    records = batch.records
    triaged = triage(records, who, start_ms)
    # Close deadlines first: when the batch is cut into sub-batches, urgent rows lead ties.
    triaged.ready.sort(key=lambda item: item.request.deadline_ms)
    fetched_ms = {id(record): at for record, at in zip(records, batch.fetched_ms, strict=True)}
    prepared = Prepared(records=records, fetched_ms=fetched_ms, triaged=triaged, start_ms=start_ms)
    if triaged.ready:
        started = time.perf_counter()
        try:
            prepared.encoded = backend.encode([item.text for item in triaged.ready])
            if reject_overlong and any(prepared.encoded.truncated):
                prepared.encoded = _reject_overlong(backend, triaged, prepared.encoded, who)
        except Exception:
            log.exception("tokenising a batch of %d failed; its rows will be retried one by one", len(triaged.ready))
        prepared.tokenize_ms = (time.perf_counter() - started) * 1000
    return prepared


def _reject_overlong(backend: Backend, triaged: Triage, encoded: Encoded, who: Provenance) -> Encoded | None:
    """Answer inputs longer than the limit with an error and re-encode the rest."""
    keep = []
    for item, cut in zip(triaged.ready, encoded.truncated, strict=True):
        if cut:
            message = "input is longer than the worker's max_input_tokens; shorten it or split it"
            triaged.answered.append(Outcome(item.request, who.error(item.request.id, "input_too_long", message)))
        else:
            keep.append(item)
    triaged.ready[:] = keep
    return backend.encode([item.text for item in keep]) if keep else None


def compute(backend: Backend, prepared: Prepared, who: Provenance) -> Computed:
    ready = prepared.triaged.ready
    done = Computed(records=prepared.records, outcomes=list(prepared.triaged.answered),
                    dead_letters=prepared.triaged.dead_letters, expired=prepared.triaged.expired, computed=len(ready))
    if not ready:
        return done
    started = time.perf_counter()
    done.run = run_batch(backend, prepared.encoded, [item.text for item in ready])
    done.inference_ms = (time.perf_counter() - started) * 1000
    if prepared.encoded is not None:
        done.padding_efficiency = prepared.encoded.padding_efficiency
        done.input_tokens = prepared.encoded.lengths
    finished_ms = prepared.start_ms + prepared.tokenize_ms + done.inference_ms
    for stage in ("queue", "topic", "batch_wait"):
        done.stage_ms[stage] = []
    for item, vector in zip(ready, done.run.answers, strict=True):
        if vector is None:
            done.unanswered.append(item)
            continue
        timings = _timings(prepared, item, done.inference_ms, finished_ms)
        for stage in done.stage_ms:
            done.stage_ms[stage].append(timings[f"{stage}_ms"])
        done.outcomes.append(Outcome(item.request, _result(who, item, vector, len(ready), timings)))
    return done


def _timings(prepared: Prepared, item: Ready, inference_ms: float, finished_ms: float) -> dict[str, float]:
    """Where this request's time went, in ms; the gateway and client add their own stages."""
    fetched = prepared.fetched_ms.get(id(item.record), float(prepared.start_ms))
    return {
        "queue_ms": float(max(prepared.start_ms - item.record.timestamp, 0)),
        "topic_ms": max(fetched - item.record.timestamp, 0.0),
        "batch_wait_ms": max(prepared.start_ms - fetched, 0.0),
        "tokenize_ms": prepared.tokenize_ms,
        "inference_ms": inference_ms,
        "since_submit_ms": max(finished_ms - item.request.submitted_ms, 0.0),
    }


def _result(who: Provenance, item: Ready, vector: npt.NDArray[np.float32] | Exception, batch_size: int,
            timings: dict[str, float]) -> Result:
    if isinstance(vector, OutOfMemoryForOneRow):
        return who.error(item.request.id, "out_of_memory", str(vector), batch_size=batch_size, timings=timings)
    if isinstance(vector, Exception):
        return who.error(item.request.id, "inference_failed", f"{type(vector).__name__}: {vector}",
                         batch_size=batch_size, timings=timings)
    return who.result(item.request.id, who.served_status, outputs={"embedding": vector.tolist()}, batch_size=batch_size,
                      timings=timings)
