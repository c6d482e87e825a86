"""A booster in its framework's own file: XGBoost `save_model` (.json, .ubj; the legacy binary where
the installed xgboost still reads it) or LightGBM `save_model` (.txt).

Loaded with xgboost / lightgbm themselves (the team has them: they saved the file), converted by
onnxmltools as a pickled estimator is, and checked against the booster's own `predict`. Only the
objectives whose conversion reproduces that predict are taken; any other is refused up front,
named (a ranking objective's graph gives each row its score, as the booster does).
"""

from __future__ import annotations

import importlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from models.importing.converted import ONNX_FILE, Converted, ImportRequest
from models.importing.detect import BoosterFramework
from models.importing.errors import ImportRefused
from models.importing.samples import Arrays
from models.importing.tabular import (FRAMEWORK_NAMES, a_framework, refuse_int8, to_onnx, tree_samples,
                                     unfix_batch_axis)

# Objectives with class probabilities (label + probabilities outputs) and with one value a row.
CLASSIFIER_OBJECTIVES = {"xgboost": ("binary:logistic", "multi:softprob"), "lightgbm": ("binary", "multiclass")}
VALUE_OBJECTIVES = {
    "xgboost": ("reg:squarederror", "reg:squaredlogerror", "reg:absoluteerror", "reg:pseudohubererror",
                "reg:quantileerror", "reg:gamma", "reg:tweedie", "count:poisson", "rank:pairwise", "rank:ndcg",
                "rank:map"),
    "lightgbm": ("regression", "regression_l1", "huber", "quantile", "poisson", "gamma", "tweedie", "lambdarank",
                 "rank_xendcg"),
}
HINTS = {
    "multi:softmax": "save it with objective multi:softprob (the same trees, with probabilities)",
    "binary:logitraw": "save it with objective binary:logistic (the same trees, with probabilities)",
    "multiclassova": "onnxmltools combines its per-class sigmoids as a softmax, so the probabilities would differ",
}
TREE_BOOSTERS = ("gbtree",)  # XGBoost: dart and gblinear do not convert
LOG_PREFIX = re.compile(r"^\s*\[[\d:]+\] [^:]+:\d+: ")  # "[13:12:00] /src/c_api/c_api.cc:1530: "
# Feature names recorded in the manifest's recipe, up to this many characters.
MAX_FEATURE_NAMES_CHARS = 2000


@dataclass(frozen=True)
class Booster:
    framework: BoosterFramework
    model: Any  # xgboost.Booster or lightgbm.Booster
    objective: str
    features: int
    classes: int  # 0: one value a row (regression, ranking score)
    feature_names: tuple[str, ...] = ()


def _framework_module(framework: BoosterFramework) -> Any:
    try:
        return importlib.import_module(framework)
    except ImportError as exc:
        raise ImportRefused(f"this is {a_framework(framework)} booster file: importing it needs {framework} "
                            "itself to load it "
                            f"(pip install {framework}) and the converters (pip install "
                            "'kafka-inference-fleet[import]')") from exc


def _load_error(path: Path, framework: str, exc: Exception) -> ImportRefused:
    message = str(exc).split("Stack trace:")[0]  # XGBoost appends its C++ stack, and starts with time and place
    message = " ".join(LOG_PREFIX.sub("", message).split())
    return ImportRefused(f"{path} does not load as {a_framework(framework)} booster: {message}")


def load_booster(path: Path, framework: BoosterFramework) -> Booster:
    module = _framework_module(framework)
    try:
        model = module.Booster(model_file=str(path))
    except Exception as exc:  # each library raises its own error type for a file it cannot read
        raise _load_error(path, framework, exc) from exc
    return _xgboost_booster(model) if framework == "xgboost" else _lightgbm_booster(model)


def _xgboost_booster(model: Any) -> Booster:
    learner = json.loads(model.save_config())["learner"]
    params = learner["learner_model_param"]
    objective = str(learner["objective"]["name"])
    kind = learner["gradient_booster"]["name"]
    if kind not in TREE_BOOSTERS:
        raise ImportRefused(f"an XGBoost {kind!r} booster (objective {objective}) does not convert to ONNX: "
                            "onnxmltools converts tree boosters (booster gbtree) only")
    if int(params.get("num_target", "1")) > 1:
        raise ImportRefused(f"an XGBoost booster with {params['num_target']} targets (objective {objective}) does not "
                            "convert to ONNX: onnxmltools converts one target a model")
    if "c" in (model.feature_types or ()):
        raise ImportRefused(f"an XGBoost booster with categorical features (objective {objective}) does not convert "
                            "to ONNX: onnxmltools does not convert categorical splits")
    classes = max(int(params.get("num_class", "0")), 2) if objective in CLASSIFIER_OBJECTIVES["xgboost"] else 0
    return Booster("xgboost", model, objective, int(model.num_features()), classes,
                   tuple(model.feature_names or ()))


def _lightgbm_booster(model: Any) -> Booster:
    dump = model.dump_model(num_iteration=1)
    objective = str(dump.get("objective", "")).split(" ")[0] or "custom"
    if str(model.params.get("linear_tree", "0")).lower() in ("1", "true"):
        raise ImportRefused(f"a LightGBM booster with linear_tree (objective {objective}) does not convert to ONNX: "
                            "onnxmltools drops the linear models in its leaves")
    classes = max(int(dump.get("num_class", 1)), 2) if objective in CLASSIFIER_OBJECTIVES["lightgbm"] else 0
    return Booster("lightgbm", model, objective, int(model.num_feature()), classes, tuple(model.feature_name()))


def check_objective(booster: Booster) -> None:
    supported = (*CLASSIFIER_OBJECTIVES[booster.framework], *VALUE_OBJECTIVES[booster.framework])
    if booster.objective in supported:
        return
    hint = HINTS.get(booster.objective)
    raise ImportRefused(f"{a_framework(booster.framework)} booster with objective {booster.objective!r} cannot "
                        "be imported: "
                        + (f"{hint}. " if hint else "onnxmltools does not convert it to a graph that predicts what "
                           "the booster predicts. ")
                        + f"Supported {FRAMEWORK_NAMES[booster.framework]} objectives: {', '.join(supported)}")


def _convertible(booster: Booster) -> Any:
    """What onnxmltools converts: XGBoost's scikit-learn wrapper around the booster (feature names
    dropped: the converter reads splits as f0, f1, ...), LightGBM's booster as it is."""
    if booster.framework == "lightgbm":
        return booster.model
    import xgboost

    plain = booster.model.copy()
    plain.feature_names = None
    wrapper = xgboost.XGBClassifier() if booster.classes else xgboost.XGBRegressor()
    wrapper.load_model(bytearray(plain.save_raw("ubj")))
    return wrapper


def predict(booster: Booster, rows: np.ndarray, outputs: list[str]) -> Arrays:
    """The booster's own predict, named like the graph's outputs: label + probabilities, or the values."""
    if booster.framework == "xgboost":
        import xgboost

        answers = np.asarray(booster.model.predict(xgboost.DMatrix(rows, feature_names=booster.model.feature_names)))
    else:
        answers = np.asarray(booster.model.predict(rows))
    if not booster.classes:
        return {outputs[0]: answers.reshape(len(rows), -1)}
    probabilities = np.stack([1 - answers, answers], axis=1) if answers.ndim == 1 else answers
    return {outputs[0]: probabilities.argmax(axis=1).astype(np.int64), outputs[1]: probabilities}


def _recipe(booster: Booster, path: Path) -> dict[str, str]:
    recipe = {"graph": f"{booster.framework} booster {path.name} (objective {booster.objective}) converted by "
                       "onnxmltools, no ZipMap"}
    names = ",".join(booster.feature_names)
    unnamed = booster.feature_names == tuple(f"Column_{index}" for index in range(booster.features))  # LightGBM's
    if not unnamed and names and len(names) <= MAX_FEATURE_NAMES_CHARS:
        recipe["features"] = names  # the column order of the input tensor
    return recipe


def convert_booster(path: Path, framework: BoosterFramework, request: ImportRequest, into: Path) -> Converted:
    if request.task not in (None, "tensor"):
        raise ImportRefused(f"{a_framework(framework)} booster is served by the tensor task, not {request.task}")
    if request.int8:
        refuse_int8(framework)
    booster = load_booster(path, framework)
    check_objective(booster)
    model: onnx.ModelProto = to_onnx(_convertible(booster), framework, booster.features)
    unfix_batch_axis(model)
    onnx.save(model, str(into / ONNX_FILE))
    input_name = model.graph.input[0].name
    outputs = [value.name for value in model.graph.output]
    hyperparameters: dict[str, float | int | str] = {"n_features": booster.features, "objective": booster.objective}
    if booster.classes:
        hyperparameters["n_classes"] = booster.classes
    return Converted(format=framework, task="tensor", samples=tree_samples(input_name, booster.features),
                     reference=lambda feeds: predict(booster, feeds[input_name], outputs),
                     recipe=_recipe(booster, path), hyperparameters=hyperparameters, inputs_allow_nan=True)
