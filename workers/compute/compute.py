"""Computing a prepared micro-batch, in a worker thread: the model runs each version group
(workers/compute/run_batch.py keeps one bad row or an out-of-memory from failing the others),
and every computed row becomes a result stamped with who made it and where its time went.
"""

import time
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
from aiokafka import ConsumerRecord

from schemas.wire import CacheTier, DeadLetter, Result, now_ms
from workers.cache.exact import pack_outputs
from models.tasks import task_of
from workers.compute.prepare import Prepared, VersionGroup, timings_of
from workers.compute.run_batch import BatchRun, OutOfMemoryForOneRow, run_batch
from workers.compute.triage import Ready
from workers.delivery.sink import Outcome, pack_payloads


# The per-request stages a batch's metrics observe, and their keys in a result's timings.
STAGE_KEYS = (("queue", "queue_ms"), ("topic", "topic_ms"), ("batch_wait", "batch_wait_ms"))
TEMPLATE_ID = "0" * 32  # the id of a group's result template, which no row's answer keeps


@dataclass(slots=True)
class Fresh:
    """A result the model just computed: what the caches learn from. One per computed row, so
    slotted and not frozen (as workers/delivery/sink.py's Outcome)."""

    group: VersionGroup
    row: int
    result: Result
    _packed: bytes | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def packed_outputs(self) -> bytes:
        """The outputs as both cache tiers store them, packed once for both."""
        if self._packed is None:
            self._packed = pack_outputs(self.result.outputs or {})
        return self._packed


@dataclass
class Computed:
    records: list[ConsumerRecord]
    outcomes: list[Outcome]
    dead_letters: list[DeadLetter]
    size_bytes: int = 0  # of the records' values
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
                    dead_letters=prepared.triaged.dead_letters, size_bytes=prepared.size_bytes,
                    expired=prepared.triaged.expired)
    real = padded = 0
    lengths: list[int] = []
    for group in prepared.groups:
        if not group.ready:
            continue
        started = time.perf_counter()
        run = run_batch(group.backend, group.encoded, [item.payload for item in group.ready])
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
    # Every row's result differs from the group's in id, outputs and timings alone: a copy of one
    # validated result costs a fraction of validating each.
    computed = group.who.result(TEMPLATE_ID, group.who.served_status, batch_size=len(group.ready),
                                cache=CacheTier.miss)
    queue, topic, batch_wait = (done.stage_ms[stage] for stage, _ in STAGE_KEYS)
    answered: dict[int, Result] = {}
    for row, (item, answer) in enumerate(zip(group.ready, run.answers, strict=True)):
        if answer is None:
            done.unanswered.append(item)
            continue
        timings = _timings(prepared, item, inference_ms, finished_ms)
        queue.append(timings["queue_ms"])
        topic.append(timings["topic_ms"])
        batch_wait.append(timings["batch_wait_ms"])
        result = _result(group, item, answer, computed, timings)
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


def _result(group: VersionGroup, item: Ready, answer: npt.NDArray[np.float32] | Exception, computed: Result,
            timings: dict[str, float]) -> Result:
    """`computed`: the group's result, of which a row's answer is a copy with the row's own fields."""
    who = group.who
    if isinstance(answer, OutOfMemoryForOneRow):
        return who.error(item.request.id, "out_of_memory", str(answer), batch_size=computed.batch_size,
                         timings=timings)
    if isinstance(answer, Exception):
        return who.error(item.request.id, "inference_failed", f"{type(answer).__name__}: {answer}",
                         batch_size=computed.batch_size, timings=timings)
    return computed.model_copy(update={"id": item.request.id, "outputs": task_of(group.backend.manifest).outputs(group.backend.manifest, answer),
                                       "timings": timings, "finished_ms": now_ms()})


def failed(prepared: Prepared, exc: BaseException) -> Computed:
    """The batch answered without the model: what triage and the caches answered stands, every row
    left for the model (and its followers) gets an error naming the failure."""
    done = Computed(records=prepared.records, outcomes=list(prepared.triaged.answered),
                    dead_letters=prepared.triaged.dead_letters, size_bytes=prepared.size_bytes,
                    expired=prepared.triaged.expired)
    message = f"the worker failed on this batch: {type(exc).__name__}: {str(exc)[:300]}"
    for group in prepared.groups:
        for item in [*group.ready, *(follower for _, follower in group.followers)]:
            done.outcomes.append(Outcome.of(item, group.who.error(item.request.id, "worker_error", message)))
    return done
