"""infer_in_chunks: any number of texts through a backend in bounded runs, rows in input order."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pytest

from models.backends.base import infer_in_chunks


class RecordingBackend:
    """Row i is [len(text)]; remembers the size of every run."""

    def __init__(self) -> None:
        self.runs: list[int] = []

    def infer(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.runs.append(len(texts))
        return np.array([[float(len(text))] for text in texts], dtype=np.float32)


def test_rows_come_back_in_input_order_from_bounded_runs() -> None:
    backend = RecordingBackend()
    texts = ["x" * n for n in range(1, 151)]
    rows = infer_in_chunks(backend, texts, chunk=64)  # type: ignore[arg-type]
    assert backend.runs == [64, 64, 22]
    assert rows[:, 0].tolist() == [float(n) for n in range(1, 151)]


def test_no_texts_is_an_error_not_an_empty_concatenate() -> None:
    with pytest.raises(ValueError, match="no texts"):
        infer_in_chunks(RecordingBackend(), [])  # type: ignore[arg-type]

