"""What kind of model a source is, from its files alone (nothing is loaded or executed here).

    a file *.pkl / *.pickle / *.joblib          a fitted scikit-learn, XGBoost or LightGBM estimator
    a file XGBoost's save_model wrote           an XGBoost booster (JSON or UBJSON: its first bytes name
                                                the "learner"; *.bst / *.deprecated: the legacy binary)
    a file LightGBM's save_model wrote          a LightGBM booster (text, starting "tree" + "version=")
    any other file                              an ONNX graph (checked by parsing it)
    a folder with modules.json                  a sentence-transformers model
    a folder with config.json + weights          a Hugging Face transformers model
    a folder with one *.onnx file               an ONNX graph with its tokenizer beside it
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from models.importing.errors import ImportRefused

SourceKind = Literal["onnx", "transformers", "sentence-transformers", "estimator", "booster"]
BoosterFramework = Literal["xgboost", "lightgbm"]

ESTIMATOR_SUFFIXES = (".pkl", ".pickle", ".joblib")
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
ST_MODULES_FILE = "modules.json"
HF_CONFIG_FILE = "config.json"
PREFERRED_ONNX_FILE = "model.onnx"
# XGBoost's legacy binary format opens with "binf" only in some versions; these suffixes are what it was saved as.
XGBOOST_BINARY_SUFFIXES = (".bst", ".deprecated")
# XGBoost's JSON and UBJSON models open with their "learner" key (UBJSON: a length type and 1-8 length bytes first).
XGBOOST_JSON = re.compile(rb'\{\s*"learner"')
XGBOOST_UBJSON = re.compile(rb"\{(?:[iU].|I..|l....|L........)learner", re.DOTALL)
SNIFF_BYTES = 64

SUPPORTED = ("an ONNX file (+ tokenizer.json for text tasks), a transformers folder (config.json + "
             "model.safetensors), a sentence-transformers folder (modules.json), or a pickled "
             "scikit-learn / XGBoost / LightGBM estimator (.pkl, .joblib), or an XGBoost / LightGBM booster "
             "saved with save_model (.json, .ubj, .txt)")


@dataclass(frozen=True)
class DetectedSource:
    kind: SourceKind
    path: Path  # the file or folder the converter reads
    onnx_file: Path | None = None  # kind "onnx": the graph itself
    framework: BoosterFramework | None = None  # kind "booster": whose save_model wrote it


def booster_framework(path: Path) -> BoosterFramework | None:
    """Whose booster file this is, from its first bytes (or XGBoost's legacy binary suffixes); None: not one."""
    with path.open("rb") as file:
        head = file.read(SNIFF_BYTES)
    if XGBOOST_JSON.match(head) or XGBOOST_UBJSON.match(head):
        return "xgboost"
    if head.startswith(b"binf") or path.suffix.lower() in XGBOOST_BINARY_SUFFIXES:
        return "xgboost"
    if head.startswith((b"tree\n", b"tree\r\n")) and b"version=" in head:
        return "lightgbm"
    return None


def detect(path: Path) -> DetectedSource:
    if path.is_file():
        if path.suffix.lower() in ESTIMATOR_SUFFIXES:
            return DetectedSource("estimator", path)
        framework = booster_framework(path)
        if framework is not None:
            return DetectedSource("booster", path, framework=framework)
        return DetectedSource("onnx", path, onnx_file=path)
    if not path.is_dir():
        raise ImportRefused(f"{path} is neither a file nor a folder")
    if (path / ST_MODULES_FILE).is_file():
        return DetectedSource("sentence-transformers", path)
    if (path / HF_CONFIG_FILE).is_file() and any((path / name).is_file() for name in WEIGHT_FILES):
        return DetectedSource("transformers", path)
    graphs = sorted(path.glob("*.onnx"))
    if (path / PREFERRED_ONNX_FILE).is_file():
        return DetectedSource("onnx", path, onnx_file=path / PREFERRED_ONNX_FILE)
    if len(graphs) == 1:
        return DetectedSource("onnx", path, onnx_file=graphs[0])
    if len(graphs) > 1:
        names = ", ".join(graph.name for graph in graphs)
        raise ImportRefused(f"{path} holds several ONNX files ({names}): name the one to import")
    if (path / HF_CONFIG_FILE).is_file():
        raise ImportRefused(f"{path} has {HF_CONFIG_FILE} but no weights ({' or '.join(WEIGHT_FILES)})")
    raise ImportRefused(f"{path}: no model found; expected {SUPPORTED}")
