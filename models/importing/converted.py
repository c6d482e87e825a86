"""What every converter hands to the pipeline: a graph written into the staged folder, and
everything the checks and the manifest need to know about it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from models.importing.samples import Arrays, Samples
from models.manifest import ImportFormat
from schemas.tasks import Task

ImportTask = Task
Pooling = Literal["mean", "cls"]
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
    # ONNX files exported elsewhere: the output to serve, how its token vectors become one vector a
    # text, and what the graph calls the tokenizer's inputs ((tokenizer's name, graph's name) pairs).
    output: str | None = None
    pooling: Pooling | None = None
    normalize: bool = False
    inputs: tuple[tuple[str, str], ...] = ()
    tokenizer: Path | None = None  # a tokenizer.json, or a folder holding one, kept apart from the graph

    def onnx_file_flags(self) -> list[str]:
        """The flags given that only an ONNX file takes (the other converters make their own graph)."""
        given = {"--output": self.output is not None, "--pooling": self.pooling is not None,
                 "--normalize": self.normalize, "--input": bool(self.inputs), "--tokenizer": self.tokenizer is not None}
        return [flag for flag, present in given.items() if present]


@dataclass(frozen=True)
class Converted:
    format: ImportFormat
    task: ImportTask
    samples: Samples
    labels: tuple[str, ...] = ()
    tokenizer_file: Path | None = None  # inside the staged folder
    max_length: int | None = None
    # None: nothing else to compare against (an ONNX file staged as it was given).
    reference: Reference | None = None
    # What `reference` runs, for the check's name (None: the source format), and its largest
    # difference allowed for values up to 1 (None: the build's FP32 threshold).
    reference_label: str | None = None
    reference_max_abs_diff: float | None = None
    recipe: dict[str, str] = field(default_factory=dict)
    hyperparameters: dict[str, float | int | str] = field(default_factory=dict)
    # Tree ensembles (XGBoost, LightGBM) read NaN as a missing value: their float inputs take it.
    inputs_allow_nan: bool = False

    @property
    def compared_with(self) -> str:
        """What the graph's answers are checked against, for the check's name and the progress line."""
        return self.reference_label if self.reference is not None and self.reference_label else self.format
