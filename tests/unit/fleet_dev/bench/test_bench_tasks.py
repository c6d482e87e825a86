"""`scripts/bench tasks`: the closed-loop rate, the medians of rounds, and the tensor model it makes."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from fleet_dev.bench.task_models import CLASSES, IMAGE_SHAPE, tensor_graph
from fleet_dev.bench.tasks import TaskRow, closed_loop_rate


def test_the_closed_loop_rate_is_callers_over_the_mean_latency() -> None:
    # 96 callers, each reply after 4 s or 8 s (a batch that ran at once, or one that waited a turn).
    assert closed_loop_rate(96, [4000.0, 8000.0] * 50) == pytest.approx(96 / 6)
    assert closed_loop_rate(8, []) == 0.0


def _row(fleet: float, raw: float, errors: int = 0) -> TaskRow:
    return TaskRow("m", "tensor", 32, fleet, 10.0, 32.0, errors, raw, 9.0, 0.5, 0.5, 8.0)


def test_rows_of_rounds_become_medians_and_ratios_to_batch_1() -> None:
    row = TaskRow.median_of([_row(100, 200), _row(300, 100, errors=1), _row(200, 150, errors=2)])
    assert (row.fleet_per_s, row.raw_per_s, row.errors) == (200, 150, 3)
    assert row.efficiency == pytest.approx(200 / 150)
    assert row.cpu_efficiency == pytest.approx(8.0 / 10.0)
    against = row.against(_row(100, 100))
    assert (against.fleet_vs_batch_1, against.raw_vs_batch_1) == (2.0, 1.5)


def test_the_tensor_model_classifies_a_batch_of_images_row_by_row() -> None:
    # The bench's ResNet-18 but narrower (the same blocks and shortcuts): a tenth of a second, not seconds.
    session = ort.InferenceSession(tensor_graph(stages=(8, 16, 32, 64)).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    images = np.random.default_rng(1).normal(size=(3, *IMAGE_SHAPE)).astype(np.float32)
    (batch,) = session.run(["y"], {"x": images})
    (alone,) = session.run(["y"], {"x": images[1:2]})
    assert batch.shape == (3, CLASSES) and np.isfinite(batch).all()
    np.testing.assert_allclose(batch[1], alone[0], rtol=1e-4, atol=1e-4)
    assert np.abs(batch[0] - batch[2]).max() > 1e-3  # the images are told apart
