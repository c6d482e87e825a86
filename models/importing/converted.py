"""What every converter hands to the pipeline: a graph written into the staged folder, and
everything the checks and the manifest need to know about it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from models.importing.samples import Arrays, Samples
from models.manifest import ImportFormat
from schemas.tasks import Task

ImportTask = Task
# The source framework's outputs for one batch of feeds, by ONNX output name (a subset is fine).
Reference = Callable[[Arrays], Arrays]

ONNX_FILE = "model.onnx"


@dataclass(frozen=True)
class ImportRequest:
    """What the operator asked for, beyond the source itself."""

    name: str
    task: ImportTask | None = None
    int8: bool = False
    labels: tuple[str, ...] | None = None
    max_length: int | None = None


@dataclass(frozen=True)
class Converted:
    format: ImportFormat
    task: ImportTask
    samples: Samples
    labels: tuple[str, ...] = ()
    tokenizer_file: Path | None = None  # inside the staged folder
    max_length: int | None = None
    # None: the source is the ONNX graph itself; there is nothing else to compare against.
    reference: Reference | None = None
    recipe: dict[str, str] = field(default_factory=dict)
    hyperparameters: dict[str, float | int | str] = field(default_factory=dict)
    # Tree ensembles (XGBoost, LightGBM) read NaN as a missing value: their float inputs take it.
    inputs_allow_nan: bool = False
