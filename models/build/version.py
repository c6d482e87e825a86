"""Building one version, whatever it holds: stage its files, check them, write and register its manifest.

A version is staged in its own registry folder and only becomes visible when
`ModelRegistry.register` writes its manifest, which it does only when the check passed.
Any failure removes the staged folder, so the registry never holds half a version.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from models.build.graph import describe_io
from models.build.progress import Progress
from models.build.provenance import code_commit
from models.build.source import TOKENIZER_FILE
from models.registry import (
    TORCH_CONFIG_FILE,
    TORCH_WEIGHTS_FILE,
    AccuracyCheck,
    HyperparameterValue,
    ModelManifest,
    ModelRegistry,
    ModelSource,
    Precision,
    Task,
    hash_files,
)

ONNX_FILE = "model.onnx"
TORCH_DIR = "torch"
TORCH_FILES = (f"{TORCH_DIR}/{TORCH_CONFIG_FILE}", f"{TORCH_DIR}/{TORCH_WEIGHTS_FILE}")

# Writes a version's artifacts into its staged folder.
Stage = Callable[[Path], None]
# Checks the staged artifacts; the version is registered only when the check passed.
Check = Callable[[Path], AccuracyCheck]


@dataclass(frozen=True)
class BuiltVersion:
    manifest: ModelManifest
    newly_built: bool


@dataclass(frozen=True)
class VersionPlan:
    """What a version's manifest says beyond its files, check and provenance."""

    name: str
    precision: Precision
    parent: str | None
    source: ModelSource
    max_length: int
    recipe: dict[str, str]
    training_data: str
    hyperparameters: dict[str, HyperparameterValue]
    torch_dir: str | None = None
    task: Task = "embedding"
    labels: tuple[str, ...] = field(default=())


def build_version(registry: ModelRegistry, plan: VersionPlan, stage: Stage, check: Check,
                  progress: Progress) -> BuiltVersion:
    """Stage a new version of `plan.name`, check it, and register it with its manifest."""
    created = datetime.now(UTC)
    with staged_version(registry, plan.name, created) as (version_id, folder):
        stage(folder)
        accuracy = check(folder)
        progress.step(f"{plan.precision.upper()} check: {describe_check(accuracy)}")
        manifest = assemble_manifest(plan, version_id=version_id, created=created, folder=folder, check=accuracy)
        registry.register(manifest)
    progress.step(f"registered as {manifest.id}")
    return BuiltVersion(manifest, newly_built=True)


@contextmanager
def staged_version(registry: ModelRegistry, name: str, created: datetime) -> Iterator[tuple[str, Path]]:
    version_id = registry.next_version_id(name, created.date())
    folder = registry.version_dir(name, version_id)
    folder.mkdir(parents=True, exist_ok=False)
    try:
        yield version_id, folder
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise


def quantized(registry: ModelRegistry, fp32: ModelManifest, progress: Progress) -> Stage:
    """Staging of an INT8 version of `fp32`: its graph quantised, its tokenizer copied."""
    from models.build import quantize

    registry.verify(fp32)

    def stage(folder: Path) -> None:
        progress.step(f"quantising {fp32.id} to INT8 (dynamic, per-channel, MatMul/Gemm weights only)")
        quantize.quantize_int8(registry.path_of(fp32, fp32.onnx_file), folder / ONNX_FILE)
        shutil.copyfile(registry.path_of(fp32, fp32.tokenizer_file), folder / TOKENIZER_FILE)

    return stage


def assemble_manifest(plan: VersionPlan, *, version_id: str, created: datetime, folder: Path,
                      check: AccuracyCheck) -> ModelManifest:
    """The manifest of a staged version, read from its graph and files; provenance filled in."""
    inputs, outputs = describe_io(folder / ONNX_FILE, normalized_outputs=plan.task == "embedding")
    torch_files = TORCH_FILES if plan.torch_dir is not None else ()
    return ModelManifest(
        id=version_id,
        name=plan.name,
        created=created,
        precision=plan.precision,
        parent=plan.parent,
        source=plan.source,
        files=hash_files(folder, [ONNX_FILE, TOKENIZER_FILE, *torch_files]),
        onnx_file=ONNX_FILE,
        tokenizer_file=TOKENIZER_FILE,
        torch_dir=plan.torch_dir,
        max_length=plan.max_length,
        inputs=inputs,
        outputs=outputs,
        recipe=plan.recipe,
        check=check,
        task=plan.task,
        labels=plan.labels,
        training_data=plan.training_data,
        code_commit=code_commit(),
        hyperparameters=plan.hyperparameters,
    )


def describe_check(check: AccuracyCheck) -> str:
    figures = "".join(f", {key} {value:.6g}" for key, value in sorted(check.figures.items()) if key != "sentences")
    verdict = "passed" if check.passed else "FAILED"
    return f"{check.metric} {check.value:.6g} {check.comparison} {check.threshold:g}{figures}: {verdict}"
