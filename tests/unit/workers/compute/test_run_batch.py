from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from models.backends.base import Encoded
from models.backends.errors import DeviceError, DeviceOutOfMemory
from workers.compute.run_batch import OutOfMemoryForOneRow, run_batch


class FakeBackend:
    """Pure-logic stand-in: a row is its text's length; fails on rules the test sets."""

    def __init__(self, oom_above: int | None = None, bad_text: str | None = None, dead: bool = False) -> None:
        self.oom_above = oom_above
        self.bad_text = bad_text
        self.dead = dead
        self.batches: list[int] = []  # sizes of the batches that ran

    def encode(self, texts: Sequence[str]) -> Encoded:
        rows = [[len(t)] for t in texts]
        return Encoded.group(rows, 0, lambda r: {"input_ids": np.asarray(r, dtype=np.int64)})

    def run(self, encoded: Encoded) -> npt.NDArray[np.float32]:
        if self.dead:
            raise DeviceError("device lost")
        if self.oom_above is not None and encoded.count > self.oom_above:
            raise DeviceOutOfMemory("CUDA out of memory")
        ids = encoded.chunks[0].feeds["input_ids"]
        if self.bad_text is not None and (ids == len(self.bad_text)).any():
            raise ValueError("poisoned input")
        self.batches.append(encoded.count)
        return ids.astype(np.float32)


TEXTS = [f"text number {i:02d}" for i in range(20)]


def test_oom_splits_until_batches_fit_and_answers_everything_in_order() -> None:
    backend = FakeBackend(oom_above=4)
    run = run_batch(backend, backend.encode(TEXTS), TEXTS)
    assert all(isinstance(a, np.ndarray) and a[0] == len(t) for a, t in zip(run.answers, TEXTS, strict=True))
    assert run.oom_splits >= 3 and run.largest_oom == 20 and not run.clean
    assert max(backend.batches) <= 4 and sum(backend.batches) == 20


def test_a_row_that_never_fits_gets_an_error_and_the_rest_are_answered() -> None:
    backend = FakeBackend(oom_above=0)
    run = run_batch(backend, backend.encode(TEXTS[:3]), TEXTS[:3])
    assert all(isinstance(a, OutOfMemoryForOneRow) for a in run.answers)


def test_a_poisoned_input_fails_alone() -> None:
    texts = ["ok", "poison!", "fine"]
    backend = FakeBackend(bad_text="poison!")
    run = run_batch(backend, backend.encode(texts), texts)
    assert isinstance(run.answers[1], ValueError)
    assert isinstance(run.answers[0], np.ndarray) and isinstance(run.answers[2], np.ndarray)


def test_a_device_error_leaves_rows_unanswered_for_forwarding() -> None:
    backend = FakeBackend(dead=True)
    run = run_batch(backend, backend.encode(TEXTS), TEXTS)
    assert run.device_error is not None and run.answers == [None] * len(TEXTS)
