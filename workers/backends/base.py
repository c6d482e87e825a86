"""What a worker needs from a model backend, whatever runs it (ONNX Runtime, PyTorch, ...)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from workers.registry import ModelManifest


@runtime_checkable
class Backend(Protocol):
    """A loaded model version on one device.

    `infer` is synchronous and must be safe to call from several threads at once: the
    worker runs it through `asyncio.to_thread` so the event loop keeps consuming.
    """

    manifest: ModelManifest
    device: str

    def infer(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """One float32 row per input, in input order: shape (len(texts), dim).

        Raises ValueError when the model returns a different number of rows, so a batch
        can never be answered with another request's row.
        """
        ...


def check_rows(result: npt.NDArray[np.float32], expected_rows: int, what: str) -> npt.NDArray[np.float32]:
    """Return `result` if it has one row per input, else raise ValueError saying so."""
    if result.ndim != 2 or result.shape[0] != expected_rows:
        raise ValueError(f"{what} returned shape {result.shape} for {expected_rows} inputs")
    return result
