"""Boosters the import tests train on the spot and save in their framework's own format (no network,
milliseconds): XGBoost `save_model` (.json, .ubj) and LightGBM `save_model` (.txt)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

ROUNDS = 5
# A ranking objective's rows come in query groups.
GROUPS = 4


def targets(rows: np.ndarray, objective: str) -> np.ndarray:
    """Labels that fit the objective: three classes, two, or a real value."""
    classes = (rows[:, 0] > 0).astype(int) + (rows[:, 1] > 0.5).astype(int)
    if objective.startswith(("multi", "rank", "lambdarank")):
        return classes
    if objective.startswith("binary") or objective == "cross_entropy":
        return (classes > 0).astype(int)
    return (2 * rows[:, 0] + rows[:, 1]).astype(np.float32)


def xgboost_booster(rows: np.ndarray, objective: str, target: Path, **params: Any) -> Path:
    import xgboost

    data = xgboost.DMatrix(rows, label=targets(rows, objective), feature_names=params.pop("feature_names", None))
    if objective.startswith("rank"):
        data.set_group([len(rows) // GROUPS] * GROUPS)
    classes = {"num_class": 3} if objective.startswith("multi") else {}
    depth = {} if params.get("booster") == "gblinear" else {"max_depth": 3}
    booster = xgboost.train({"objective": objective, **depth, **classes, **params}, data, num_boost_round=ROUNDS)
    booster.save_model(str(target))
    return target


def lightgbm_booster(rows: np.ndarray, objective: str, target: Path, **params: Any) -> Path:
    import lightgbm

    data = lightgbm.Dataset(rows, label=targets(rows, objective))
    if objective in ("lambdarank", "rank_xendcg"):
        data.set_group([len(rows) // GROUPS] * GROUPS)
    classes = {"num_class": 3} if objective.startswith("multiclass") else {}
    booster = lightgbm.train({"objective": objective, "num_leaves": 7, "verbose": -1, **classes, **params}, data,
                             num_boost_round=ROUNDS)
    booster.save_model(str(target))
    return target


def booster_predict(path: Path, rows: np.ndarray) -> np.ndarray:
    """What the framework itself predicts from the saved file (probabilities, or one value a row)."""
    if path.suffix == ".txt":
        import lightgbm

        return np.asarray(lightgbm.Booster(model_file=str(path)).predict(rows))
    import xgboost

    booster = xgboost.Booster(model_file=str(path))
    return np.asarray(booster.predict(xgboost.DMatrix(rows, feature_names=booster.feature_names)))


def with_missing_values(rows: np.ndarray) -> np.ndarray:
    """The rows with a NaN (a missing value to a tree) in every third row."""
    holes = rows.copy()
    holes[::3, 2] = np.nan
    return holes
