"""`scripts/bench tasks`: the reply-instant rate, the medians of rounds, and the tensor model it makes."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from fleet.bench.task_models import CLASSES, IMAGE_SHAPE, tensor_graph
from fleet.bench.tasks import TaskRow, rate_between_replies


def test_bursts_of_replies_give_their_true_rate_wherever_the_window_edges_fall() -> None:
    # A batch of 32 replies lands every 2 s (16 req/s); the windows' edges fall just after a burst,
    # just before one, and in between: counting inside the window would give 0, 16 or 32 a 2 s.
    bursts = [2.0 * k + 0.001 * i for k in range(1, 11) for i in range(32)]
    for start, end in ((2.1, 8.1), (3.99, 9.99), (3.0, 9.0)):
        assert rate_between_replies(bursts, start, end) == pytest.approx(16, rel=0.01)


def test_a_steady_stream_gives_its_rate_and_no_replies_give_zero() -> None:
    steady = [k / 100 for k in range(1, 1001)]  # 100 req/s for 10 s
    assert rate_between_replies(steady, 2.0, 8.0) == pytest.approx(100, rel=0.01)
    assert rate_between_replies([], 2.0, 8.0) == 0.0
    assert rate_between_replies([9.0], 2.0, 8.0) == 0.0


def test_without_a_reply_before_the_window_its_own_start_is_the_first_edge() -> None:
    assert rate_between_replies([5.0, 6.0, 7.0], 4.0, 8.0) == pytest.approx(3 / 3)


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
