"""Does a graph fit its task, and do the checks catch what they are for (pure logic, tiny graphs)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from models.importing.checks import check_against_source, smoke_batches
from models.importing.errors import ImportRefused
from models.importing.samples import TensorSamples, random_tensors
from models.importing.scores import are_probabilities
from models.importing.signature import check_fits_task, name_anonymous_axes, read_signature
from models.registry import OutputSpec, TensorSpec

TOKENS = (TensorSpec(name="input_ids", dtype="int64", shape=("batch", "sequence")),
          TensorSpec(name="attention_mask", dtype="int64", shape=("batch", "sequence")))


def probabilities(*shape: int | str) -> tuple[OutputSpec, ...]:
    return (OutputSpec(name="probabilities", dtype="float32", shape=shape, normalized=False),)


def test_a_classifier_fits_with_one_label_per_column() -> None:
    check_fits_task("classification", TOKENS, probabilities("batch", 3), ("a", "b", "c"))
    with pytest.raises(ImportRefused, match="2 labels for output 'probabilities' of width 3"):
        check_fits_task("classification", TOKENS, probabilities("batch", 3), ("a", "b"))
    with pytest.raises(ImportRefused, match="needs labels"):
        check_fits_task("token-classification", TOKENS, probabilities("batch", "sequence", 3), ())


def test_text_inputs_must_be_what_a_tokenizer_makes() -> None:
    image = (TensorSpec(name="image", dtype="float32", shape=("batch", 1, 8, 8)),)
    with pytest.raises(ImportRefused, match=r"inputs \['image'\] are not what a tokenizer makes"):
        check_fits_task("embedding", image, probabilities("batch", 8), ())
    fixed_sequence = (TensorSpec(name="input_ids", dtype="int64", shape=("batch", 128)),)
    with pytest.raises(ImportRefused, match="dynamic sequence axis"):
        check_fits_task("embedding", fixed_sequence, probabilities("batch", 8), ())
    check_fits_task("tensor", image, probabilities("batch", 8), ())


def test_a_fixed_batch_axis_is_refused_for_every_task() -> None:
    with pytest.raises(ImportRefused, match="axis 0 must be a dynamic batch axis"):
        check_fits_task("tensor", (TensorSpec(name="x", dtype="float32", shape=(1, 4)),), probabilities("batch", 2), ())


def test_a_reranker_gives_one_score_per_pair() -> None:
    check_fits_task("rerank", TOKENS, probabilities("batch", 1), ())
    with pytest.raises(ImportRefused, match="scores each"):
        check_fits_task("rerank", TOKENS, probabilities("batch", 2), ())


def save(path: Path, nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto],
         outputs: list[onnx.ValueInfoProto]) -> Path:
    model = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs), opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # as the built models; onnx's default (14) is newer than the GPU flavour's ONNX Runtime reads
    onnx.save(model, str(path))
    return path


def test_unnamed_dynamic_axes_get_names(tmp_path: Path) -> None:
    path = save(tmp_path / "g.onnx", [helper.make_node("Relu", ["x"], ["y"])],
                [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 4])],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, None])])
    name_anonymous_axes(path)
    inputs, outputs = read_signature(path, "tensor")
    assert (inputs[0].shape, outputs[0].shape) == (("batch", 4), ("batch", "y_axis1"))


def session(path: Path) -> ort.InferenceSession:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def test_smoke_batches_catch_rows_that_depend_on_their_batch_mates(tmp_path: Path) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])
    honest = save(tmp_path / "honest.onnx", [helper.make_node("Relu", ["x"], ["y"])], [x], [y])
    mixing = save(tmp_path / "mixing.onnx", [helper.make_node("ReduceMean", ["x"], ["m"], axes=[0], keepdims=1),
                                             helper.make_node("Sub", ["x", "m"], ["y"])], [x], [y])
    samples = random_tensors({"x": ("batch", 4)}, {"x": "float32"})
    assert smoke_batches(session(honest), samples, compare_rows=True) == 0.0
    assert smoke_batches(session(mixing), samples, compare_rows=True) > 0.1


def test_a_graph_returning_other_shapes_than_declared_is_refused(tmp_path: Path) -> None:
    liar = save(tmp_path / "liar.onnx", [helper.make_node("Relu", ["x"], ["y"])],
                [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])])
    samples = random_tensors({"x": ("batch", 4)}, {"x": "float32"})
    with pytest.raises(ImportRefused, match=r"declared \['batch', 3\] but the graph returns shape \[1, 4\]"):
        declared = {"y": read_signature(liar, "tensor")[1][0].shape}
        smoke_batches(session(liar), samples, compare_rows=True, declared=declared)


def test_the_reference_check_fails_on_disagreeing_labels_and_differences(tmp_path: Path) -> None:
    path = save(tmp_path / "softmax.onnx", [helper.make_node("Softmax", ["x"], ["p"], axis=-1)],
                [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
                [helper.make_tensor_value_info("p", TensorProto.FLOAT, ["batch", 3])])
    rows = np.random.default_rng(0).standard_normal((8, 3)).astype(np.float32)
    samples = TensorSamples({"x": rows})

    def softmax(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        exp = np.exp(feeds["x"] - feeds["x"].max(axis=1, keepdims=True))
        return {"p": exp / exp.sum(axis=1, keepdims=True)}

    good = check_against_source(session(path), samples, softmax, "numpy")
    assert good.passed and good.figures["label_agreement"] == 1.0 and good.value < 1e-6
    reversed_labels = check_against_source(session(path), samples, lambda f: {"p": softmax(f)["p"][:, ::-1]}, "numpy")
    assert not reversed_labels.passed and reversed_labels.metric == "label_agreement"
    shifted = check_against_source(session(path), samples, lambda f: {"p": softmax(f)["p"] + 1e-3}, "numpy")
    assert not shifted.passed and shifted.metric == "max_abs_diff"


def test_probability_rows_are_told_from_logits() -> None:
    assert are_probabilities(np.array([[0.2, 0.8], [1.0, 0.0]]))
    assert not are_probabilities(np.array([[2.0, -1.0], [0.5, 0.5]]))
    assert not are_probabilities(np.array([[0.3, 0.3]]))
