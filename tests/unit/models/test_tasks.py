"""The task plug-ins on their own: batching tensors in shape groups, outputs, comparisons, cache keys."""

from __future__ import annotations

import numpy as np
import pytest

from models.backends.tensor import stack_groups
from models.tasks import task_named
from schemas.task_inputs import TensorInput
from schemas.tensors import encode_tensor


def _item(*shape: int, fill: float = 0.0) -> TensorInput:
    return TensorInput({"x": np.full(shape, fill, np.float32)}, shape[0])


def test_tensor_rows_stack_along_axis_0_in_groups_of_equal_other_axes() -> None:
    items = [_item(1, 3, fill=1), _item(2, 5, fill=2), _item(2, 3, fill=3), _item(1, 5, fill=4)]
    encoded = stack_groups(items)
    assert encoded.count == 4 and encoded.lengths == (1, 2, 2, 1)
    by_rows = {tuple(chunk.rows.tolist()): chunk.feeds["x"] for chunk in encoded.chunks}
    assert sorted(by_rows) == [(0, 2), (1, 3)]
    np.testing.assert_array_equal(by_rows[(0, 2)][:, 0], [1, 3, 3])
    assert by_rows[(1, 3)].shape == (3, 5)


def test_a_shape_group_is_cut_at_max_rows() -> None:
    encoded = stack_groups([_item(3, 2) for _ in range(5)], max_rows=7)
    assert [len(chunk.rows) for chunk in encoded.chunks] == [2, 2, 1]


def test_each_task_compares_two_versions_its_own_way() -> None:
    embedding = task_named("embedding").compare({"embedding": [1.0, 0.0]}, {"embedding": [1.0, 0.1]}, threshold=0.99)
    assert embedding.agreed and embedding.score == pytest.approx(0.995, abs=1e-3)
    labels = task_named("classification").compare({"label": "a"}, {"label": "b"}, threshold=0.5)
    assert (labels.agreed, labels.score, labels.live_label, labels.shadow_label) == (False, 0.0, "a", "b")
    live = {"tensors": {"y": encode_tensor(np.array([[1.0, 2.0]], np.float32))}}
    near = {"tensors": {"y": encode_tensor(np.array([[1.0, 2.001]], np.float32))}}
    tensor = task_named("tensor").compare(live, near, threshold=1e-2)
    assert tensor.agreed and tensor.score == pytest.approx(1e-3, rel=1e-2)
    assert not task_named("tensor").compare(live, near, threshold=1e-4).agreed
    with pytest.raises(ValueError, match="incomparable"):
        task_named("tensor").compare(live, {"embedding": [1.0]}, threshold=1.0)


def test_only_a_classifier_may_be_answered_from_a_near_input() -> None:
    assert [name for name in ("embedding", "classification", "tensor") if task_named(name).semantic_cache] == [
        "classification"]
    with pytest.raises(ValueError, match="not served"):
        task_named("speech")
