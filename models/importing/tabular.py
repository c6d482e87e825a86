"""A fitted scikit-learn, XGBoost or LightGBM estimator (pickled), converted with skl2onnx / onnxmltools.

The converters come with the optional `import` extra. The graph takes one float32 tensor
[batch, n_features]; a classifier returns `label` and `probabilities` as plain tensors (no
ZipMap), a regressor its predictions. It is served by the tensor task. A pickle runs code when
it loads: import only estimators you would run yourself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx

from models.importing.converted import ONNX_FILE, Converted, ImportFormat, ImportRequest
from models.importing.errors import ImportRefused
from models.importing.samples import Arrays, TensorSamples, random_tensors

INPUT = "input"
TREE_FRAMEWORKS = ("xgboost", "lightgbm")
# Every this-many sample rows has a missing value (NaN), so the check covers the trees' default branches.
MISSING_EVERY = 4
FRAMEWORK_NAMES = {"sklearn": "scikit-learn", "xgboost": "XGBoost", "lightgbm": "LightGBM"}


def a_framework(framework: str) -> str:
    """"an XGBoost", "a LightGBM", "a scikit-learn": for messages."""
    name = FRAMEWORK_NAMES[framework]
    return f"{'an' if name[0] in 'AEIOUX' else 'a'} {name}"


def refuse_int8(framework: str) -> None:
    """--int8 is not for tree ensembles: nothing in their graph is what INT8 quantisation speeds up."""
    raise ImportRefused(f"--int8: this {FRAMEWORK_NAMES[framework]} model is a tree ensemble, and tree ensembles "
                        "have no INT8 kernels worth it: ONNX Runtime quantises the weights of MatMul/Gemm (neural "
                        "networks), while a tree graph is one TreeEnsemble operator comparing features with "
                        "thresholds, which would run unchanged. Import it without --int8")


def tree_samples(input_name: str, width: int) -> TensorSamples:
    """Seeded random rows, one in MISSING_EVERY with a NaN (trees read it as a missing value)."""
    samples = random_tensors({input_name: ("batch", width)}, {input_name: "float32"})
    rows = samples.arrays[input_name]
    for row in range(0, len(rows), MISSING_EVERY):
        rows[row, (row // MISSING_EVERY) % width] = np.nan
    return samples


def framework_of(estimator: Any) -> ImportFormat:
    final = estimator.steps[-1][1] if hasattr(estimator, "steps") else estimator
    root = type(final).__module__.split(".")[0]
    if root in ("xgboost", "lightgbm"):
        return root  # type: ignore[return-value]
    if root == "sklearn":
        return "sklearn"
    raise ImportRefused(f"{type(final).__module__}.{type(final).__name__} is not a scikit-learn, XGBoost or "
                        "LightGBM estimator")


def _load(path: Path) -> Any:
    try:
        import joblib
    except ImportError as exc:  # comes with scikit-learn
        raise ImportRefused("importing an estimator needs scikit-learn (pip install 'kafka-inference-fleet[import]')") \
            from exc
    try:
        return joblib.load(path)
    except Exception as exc:  # unpickling raises whatever the pickled classes raise
        raise ImportRefused(f"{path} does not load as a pickled estimator ({type(exc).__name__}: {exc})") from exc


def to_onnx(estimator: Any, framework: ImportFormat, width: int) -> onnx.ModelProto:
    try:
        if framework == "sklearn":
            from skl2onnx import to_onnx

            options = {"zipmap": False} if hasattr(estimator, "predict_proba") else None
            return to_onnx(estimator, np.zeros((1, width), dtype=np.float32), options=options,
                           target_opset={"": 17, "ai.onnx.ml": 3})
        import onnxmltools
        from onnxmltools.convert.common.data_types import FloatTensorType

        types = [(INPUT, FloatTensorType([None, width]))]
        if framework == "xgboost":
            return onnxmltools.convert_xgboost(estimator, initial_types=types)
        return onnxmltools.convert_lightgbm(estimator, initial_types=types, zipmap=False)
    except ImportError as exc:
        raise ImportRefused(f"converting a {framework} model needs the optional converters: "
                            f"pip install 'kafka-inference-fleet[import]' ({exc})") from exc
    except Exception as exc:  # the converters raise many types for an estimator they cannot convert
        raise ImportRefused(f"the {framework} converter cannot convert {type(estimator).__name__}: {exc}") from exc


def unfix_batch_axis(model: onnx.ModelProto) -> None:
    # onnxmltools declares LightGBM's label output as [1] although it has one row per input row;
    # the smoke batches check the real shapes.
    for output in model.graph.output:
        dims = output.type.tensor_type.shape.dim
        if len(dims) and dims[0].dim_value == 1:
            dims[0].Clear()


def convert_estimator(path: Path, request: ImportRequest, into: Path) -> Converted:
    if request.task not in (None, "tensor"):
        raise ImportRefused(f"a {path.suffix} estimator is served by the tensor task, not {request.task}")
    estimator = _load(path)
    framework = framework_of(estimator)
    if request.int8 and framework in TREE_FRAMEWORKS:
        refuse_int8(framework)
    width = getattr(estimator, "n_features_in_", None)
    if not isinstance(width, int | np.integer):
        raise ImportRefused(f"{type(estimator).__name__} does not say how many features it takes (n_features_in_): "
                            "is it fitted?")
    model = to_onnx(estimator, framework, int(width))
    if framework == "lightgbm":
        unfix_batch_axis(model)
    onnx.save(model, str(into / ONNX_FILE))
    input_name = model.graph.input[0].name
    samples = tree_samples(input_name, int(width)) if framework in TREE_FRAMEWORKS else \
        random_tensors({input_name: ("batch", int(width))}, {input_name: "float32"})
    outputs = [value.name for value in model.graph.output]
    return Converted(format=framework, task="tensor", samples=samples,
                     reference=lambda feeds: _predict(estimator, feeds[input_name], outputs),
                     recipe={"graph": f"{type(estimator).__name__} converted by "
                             f"{'skl2onnx' if framework == 'sklearn' else 'onnxmltools'}, no ZipMap"},
                     hyperparameters={"n_features": int(width), **_classes(estimator)},
                     inputs_allow_nan=framework in TREE_FRAMEWORKS)


def _classes(estimator: Any) -> dict[str, int]:
    classes = getattr(estimator, "classes_", None)
    return {"n_classes": len(classes)} if classes is not None else {}


def _predict(estimator: Any, rows: np.ndarray, outputs: list[str]) -> Arrays:
    """The estimator's own answers, named like the graph's outputs (label, probabilities / predictions)."""
    if hasattr(estimator, "predict_proba") and len(outputs) >= 2:
        return {outputs[0]: np.asarray(estimator.predict(rows)), outputs[1]: np.asarray(estimator.predict_proba(rows))}
    predictions = np.asarray(estimator.predict(rows))
    return {outputs[0]: predictions.reshape(len(rows), -1)}
