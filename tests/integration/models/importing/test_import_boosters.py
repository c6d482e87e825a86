"""`fleet models import` of XGBoost and LightGBM boosters saved in their own format (save_model:
.json, .ubj, .txt): the stored graph predicts what the framework predicts from the same file,
missing values included; objectives and boosters the converters cannot reproduce are refused,
named, with nothing left behind; so is --int8 for any tree model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import joblib
import numpy as np
import pytest

from models.importing.converted import ImportRequest
from models.manifest import ImportSource
from models.registry import ModelRegistry, sha256_of
from tests.integration.models.importing.boosters import (booster_predict, lightgbm_booster, with_missing_values,
                                                         xgboost_booster)
from tests.integration.models.importing.sources import FEATURES, Sources
from tests.integration.models.importing.test_import_refusals import refused
from tests.integration.models.importing.test_import_sources import imported, session_of

pytest.importorskip("xgboost")
pytest.importorskip("lightgbm")

NAMED = {"feature_names": ["age", "tenure", "plan", "usage", "calls", "region"]}
CASES = [
    ("xgboost", "multi:softprob", "churn.json", NAMED),
    ("xgboost", "binary:logistic", "churn.ubj", {}),
    ("xgboost", "reg:squarederror", "spend.json", {}),
    ("xgboost", "rank:ndcg", "ranker.ubj", {}),
    ("lightgbm", "multiclass", "churn.txt", {}),
    ("lightgbm", "binary", "churn.txt", {}),
    ("lightgbm", "regression", "spend.txt", {}),
    ("lightgbm", "lambdarank", "ranker.txt", {}),
]


def booster(framework: str, objective: str, target: Path, rows: np.ndarray, **params: Any) -> Path:
    make = xgboost_booster if framework == "xgboost" else lightgbm_booster
    return make(rows, objective, target, **params)


@pytest.mark.parametrize(("framework", "objective", "filename", "params"), CASES)
def test_a_booster_file_predicts_what_its_framework_predicts(registry: ModelRegistry, sources: Sources, tmp_path: Path,
                                                             framework: str, objective: str, filename: str,
                                                             params: dict[str, Any]) -> None:
    path = booster(framework, objective, tmp_path / filename, sources.sklearn_rows, **params)
    (manifest,) = imported(registry, path, ImportRequest(name="trees"))
    assert isinstance(manifest.source, ImportSource) and manifest.source.format == framework
    assert manifest.source.sha256 == {filename: sha256_of(path)} and manifest.task == "tensor"
    assert manifest.check.passed and manifest.check.name == f"import-onnx-vs-{framework}"
    assert manifest.check.figures["label_agreement"] == 1.0 and manifest.check.value <= 1e-5
    (spec,) = manifest.inputs
    assert (spec.dtype, spec.shape, spec.allow_nan) == ("float32", ("batch", FEATURES), True)  # NaN: missing
    assert (manifest.hyperparameters["n_features"], manifest.hyperparameters["objective"]) == (FEATURES, objective)
    assert manifest.recipe.get("features") == (",".join(params["feature_names"]) if params else None)
    rows = with_missing_values(sources.sklearn_rows)
    expected = booster_predict(path, rows)
    answers = session_of(registry, manifest).run(None, {spec.name: rows})
    if objective.startswith(("multi", "binary")):
        classes = 3 if objective.startswith("multi") else 2
        assert manifest.hyperparameters["n_classes"] == classes
        assert [(out.name, out.shape) for out in manifest.outputs] == [("label", ("batch",)),
                                                                       ("probabilities", ("batch", classes))]
        probabilities = expected if expected.ndim == 2 else np.stack([1 - expected, expected], axis=1)
        np.testing.assert_allclose(answers[1], probabilities, atol=1e-5)
        np.testing.assert_array_equal(answers[0], probabilities.argmax(axis=1))
    else:
        assert "n_classes" not in manifest.hyperparameters
        assert [(out.name, out.shape) for out in manifest.outputs] == [("variable", ("batch", 1))]
        np.testing.assert_allclose(answers[0][:, 0], expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("framework", "objective", "params", "message"), [
    ("xgboost", "multi:softmax", {}, "objective 'multi:softmax' cannot be imported: save it with objective "
                                     "multi:softprob"),
    ("xgboost", "survival:cox", {}, "XGBoost booster with objective 'survival:cox' cannot be imported: onnxmltools "
                                    "does not convert it"),
    ("xgboost", "reg:squarederror", {"booster": "gblinear"}, "an XGBoost 'gblinear' booster"),
    ("lightgbm", "cross_entropy", {}, "LightGBM booster with objective 'cross_entropy' cannot be imported"),
    ("lightgbm", "multiclassova", {"num_class": 3}, "'multiclassova' cannot be imported: onnxmltools combines"),
    ("lightgbm", "regression", {"linear_tree": True}, "with linear_tree .* onnxmltools drops the linear models"),
])
def test_what_the_converters_cannot_reproduce_is_refused_by_name(registry: ModelRegistry, sources: Sources,
                                                                 tmp_path: Path, framework: str, objective: str,
                                                                 params: dict[str, Any], message: str) -> None:
    suffix = ".json" if framework == "xgboost" else ".txt"
    path = booster(framework, objective, tmp_path / f"model{suffix}", sources.sklearn_rows, **params)
    refused(registry, path, ImportRequest(name="unsupported"), match=message)


def test_a_file_xgboost_cannot_read_is_refused_with_its_reason(registry: ModelRegistry, tmp_path: Path) -> None:
    legacy = tmp_path / "model.bst"  # the legacy binary suffix; xgboost >= 3.1 reads no binary models at all
    legacy.write_bytes(b"binf" + bytes(64))
    refused(registry, legacy, ImportRequest(name="legacy"), match=r"model\.bst does not load as an XGBoost booster: .+")


def test_a_booster_serves_the_tensor_task_only(registry: ModelRegistry, sources: Sources, tmp_path: Path) -> None:
    path = booster("lightgbm", "multiclass", tmp_path / "churn.txt", sources.sklearn_rows)
    refused(registry, path, ImportRequest(name="churn", task="classification", labels=("a", "b", "c")),
            match="a LightGBM booster is served by the tensor task, not classification")


INT8_TREES = "tree ensembles have no INT8 kernels worth it"


@pytest.mark.parametrize("source", ["xgboost-booster", "lightgbm-booster", "lightgbm-pickle"])
def test_int8_is_refused_for_tree_models(registry: ModelRegistry, sources: Sources, tmp_path: Path,
                                         source: str) -> None:
    rows = sources.sklearn_rows
    if source == "lightgbm-pickle":
        import lightgbm

        path = tmp_path / "trees.joblib"
        joblib.dump(lightgbm.LGBMClassifier(n_estimators=5, num_leaves=7, verbose=-1).fit(rows, rows[:, 0] > 0), path)
    else:
        framework = source.split("-")[0]
        path = booster(framework, "binary:logistic" if framework == "xgboost" else "binary",
                       tmp_path / ("m.ubj" if framework == "xgboost" else "m.txt"), rows)
    refused(registry, path, ImportRequest(name="trees", int8=True), match=f"--int8: this .+ model is a tree ensemble, "
            f"and {INT8_TREES}: ONNX Runtime quantises the weights of MatMul/Gemm")


def test_int8_is_refused_for_a_graph_with_nothing_to_quantise(registry: ModelRegistry, sources: Sources) -> None:
    refused(registry, sources.sklearn_pipeline, ImportRequest(name="churn", int8=True),
            match=r"--int8: the graph has no MatMul or Gemm weights for INT8 to quantise \(its operators: "
                  r".*LinearClassifier.*\), so an INT8 version would be the FP32 graph")
