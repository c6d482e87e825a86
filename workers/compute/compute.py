"""Computing a prepared micro-batch, in a worker thread: the model runs each version group
(workers/compute/run_batch.py keeps one bad row or an out-of-memory from failing the others),
and every computed row becomes a result stamped with who made it and where its time went.
"""

import time
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import numpy.typing as npt
from aiokafka import ConsumerRecord

from schemas.wire import CacheTier, DeadLetter, Result
from workers.cache.exact import pack_outputs
from workers.compute.outputs import outputs_of
from workers.compute.prepare import Prepared, VersionGroup, timings_of
from workers.compute.run_batch import BatchRun, OutOfMemoryForOneRow, run_batch
from workers.compute.triage import Ready
from workers.delivery.sink import Outcome, pack_payloads


# The per-request stages a batch's metrics observe, and their keys in a result's timings.
STAGE_KEYS = (("queue", "queue_ms"), ("topic", "topic_ms"), ("batch_wait", "batch_wait_ms"))


@dataclass(frozen=True)
class Fresh:
    """A result the model just computed: what the caches learn from."""

    group: VersionGroup
    row: int
    result: Result

    @cached_property
    def packed_outputs(self) -> bytes:
        """The outputs as both cache tiers store them, packed once for both."""
        return pack_outputs(self.result.outputs or {})


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
    runs: list[BatchRun] = field(default_factory=list)
    fresh: list[Fresh] = field(default_factory=list)
    stage_ms: dict[str, list[float]] = field(default_factory=lambda: {stage: [] for stage, _ in STAGE_KEYS})

    @property
    def run(self) -> BatchRun | None:
        """The batch's model runs as one, for health and out-of-memory back-off."""
        if not self.runs:
            return None
        device_error = next((run.device_error for run in self.runs if run.device_error is not None), None)
        return BatchRun(answers=[], oom_splits=sum(r.oom_splits for r in self.runs),
                        largest_oom=max(r.largest_oom for r in self.runs), device_error=device_error,
                        clean=all(r.clean for r in self.runs))


def compute(prepared: Prepared) -> Computed:
    done = Computed(records=prepared.records, outcomes=list(prepared.triaged.answered),
                    dead_letters=prepared.triaged.dead_letters, expired=prepared.triaged.expired)
    real = padded = 0
    lengths: list[int] = []
    for group in prepared.groups:
        if not group.ready:
            continue
        started = time.perf_counter()
        run = run_batch(group.backend, group.encoded, [item.text for item in group.ready])
        elapsed_ms = (time.perf_counter() - started) * 1000
        done.runs.append(run)
        done.inference_ms += elapsed_ms
        done.computed += len(group.ready)
        if group.encoded is not None:
            real, padded = real + group.encoded.real_tokens, padded + group.encoded.padded_tokens
            lengths += group.encoded.lengths
        _answer_group(prepared, group, run, elapsed_ms, done)
    done.padding_efficiency = real / padded if padded else None
    done.input_tokens = tuple(lengths)
    pack_payloads(done.outcomes)
    return done


def _answer_group(prepared: Prepared, group: VersionGroup, run: BatchRun, inference_ms: float, done: Computed) -> None:
    finished_ms = prepared.start_ms + prepared.tokenize_ms + inference_ms
    answered: dict[int, Result] = {}
    for row, (item, answer) in enumerate(zip(group.ready, run.answers, strict=True)):
        if answer is None:
            done.unanswered.append(item)
            continue
        timings = _timings(prepared, item, inference_ms, finished_ms)
        for stage, key in STAGE_KEYS:
            done.stage_ms[stage].append(timings[key])
        result = _result(group, item, answer, len(group.ready), timings)
        answered[row] = result
        done.outcomes.append(Outcome.of(item, result))
        if not isinstance(answer, Exception):
            done.fresh.append(Fresh(group, row, result))
    for row, follower in group.followers:
        if row in answered:
            copy = answered[row].model_copy(update={"id": follower.request.id})
            done.outcomes.append(Outcome.of(follower, copy))
        else:
            done.unanswered.append(follower)


def _timings(prepared: Prepared, item: Ready, inference_ms: float, finished_ms: float) -> dict[str, float]:
    return timings_of(prepared, item, finished_ms, tokenize_ms=prepared.tokenize_ms, inference_ms=inference_ms)


def _result(group: VersionGroup, item: Ready, answer: npt.NDArray[np.float32] | Exception, batch_size: int,
            timings: dict[str, float]) -> Result:
    who = group.who
    if isinstance(answer, OutOfMemoryForOneRow):
        return who.error(item.request.id, "out_of_memory", str(answer), batch_size=batch_size, timings=timings)
    if isinstance(answer, Exception):
        return who.error(item.request.id, "inference_failed", f"{type(answer).__name__}: {answer}",
                         batch_size=batch_size, timings=timings)
    return who.result(item.request.id, who.served_status, outputs=outputs_of(group.backend.manifest, answer),
                      batch_size=batch_size, timings=timings, cache=CacheTier.miss)


def failed(prepared: Prepared, exc: BaseException) -> Computed:
    """The batch answered without the model: what triage and the caches answered stands, every row
    left for the model (and its followers) gets an error naming the failure."""
    done = Computed(records=prepared.records, outcomes=list(prepared.triaged.answered),
                    dead_letters=prepared.triaged.dead_letters, expired=prepared.triaged.expired)
    message = f"the worker failed on this batch: {type(exc).__name__}: {str(exc)[:300]}"
    for group in prepared.groups:
        for item in [*group.ready, *(follower for _, follower in group.followers)]:
            done.outcomes.append(Outcome.of(item, group.who.error(item.request.id, "worker_error", message)))
    return done
