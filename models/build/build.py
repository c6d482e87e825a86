"""The build steps for one version each: FP32 from PyTorch, INT8 from a registered FP32.

The FP32 version also keeps the PyTorch weights and config its graph was exported from
(`torch/`, listed and hashed in the manifest as `torch_dir`), so the torch backend serves the
very same version; the INT8 version is ONNX-only.

A version is staged in its own registry folder and only becomes visible when
`ModelRegistry.register` writes its manifest, which it does only when the check passed.
Any failure removes the staged folder, so the registry never holds half a version.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from models.build.checks import (
    check_fp32_matches_reference,
    check_int8_close_to_fp32,
    onnx_embeddings,
    reference_embeddings,
    torch_embeddings,
)
from models.build.graph import describe_io
from models.build.progress import Progress
from models.build.provenance import code_commit
from models.build.sentences import CHECK_SENTENCES
from models.build.source import TOKENIZER_FILE, PackagedModel
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

MODEL_NAME = "minilm-embed"
ONNX_FILE = "model.onnx"
TORCH_DIR = "torch"
TORCH_FILES = (f"{TORCH_DIR}/{TORCH_CONFIG_FILE}", f"{TORCH_DIR}/{TORCH_WEIGHTS_FILE}")


@dataclass(frozen=True)
class BuiltVersion:
    manifest: ModelManifest
    newly_built: bool


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


@contextmanager
def staged_int8(registry: ModelRegistry, fp32: ModelManifest, progress: Progress) -> Iterator[tuple[str, Path, datetime]]:
    """A staged INT8 version of `fp32`: its graph quantised and its tokenizer copied into the new
    folder (removed again if the caller's check or registration fails). Yields (id, folder, created)."""
    from models.build import quantize

    registry.verify(fp32)
    created = datetime.now(UTC)
    with staged_version(registry, fp32.name, created) as (version_id, folder):
        progress.step(f"quantising {fp32.id} to INT8 (dynamic, per-channel, MatMul/Gemm weights only)")
        quantize.quantize_int8(registry.path_of(fp32, fp32.onnx_file), folder / ONNX_FILE)
        shutil.copyfile(registry.path_of(fp32, fp32.tokenizer_file), folder / TOKENIZER_FILE)
        yield version_id, folder, created


def assemble_manifest(
    *,
    name: str = MODEL_NAME,
    version_id: str,
    created: datetime,
    precision: Precision,
    parent: str | None,
    folder: Path,
    source: ModelSource,
    max_length: int,
    recipe: dict[str, str],
    check: AccuracyCheck,
    training_data: str,
    hyperparameters: dict[str, HyperparameterValue],
    torch_dir: str | None = None,
    task: Task = "embedding",
    labels: tuple[str, ...] = (),
) -> ModelManifest:
    """The manifest of a staged version, read from its graph and files; provenance filled in."""
    inputs, outputs = describe_io(folder / ONNX_FILE, normalized_outputs=task == "embedding")
    torch_files = TORCH_FILES if torch_dir is not None else ()
    return ModelManifest(
        id=version_id,
        name=name,
        created=created,
        precision=precision,
        parent=parent,
        source=source,
        files=hash_files(folder, [ONNX_FILE, TOKENIZER_FILE, *torch_files]),
        onnx_file=ONNX_FILE,
        tokenizer_file=TOKENIZER_FILE,
        torch_dir=torch_dir,
        max_length=max_length,
        inputs=inputs,
        outputs=outputs,
        recipe=recipe,
        check=check,
        task=task,
        labels=labels,
        training_data=training_data,
        code_commit=code_commit(),
        hyperparameters=hyperparameters,
    )


def upstream_training_data(source: ModelSource) -> str:
    """`training_data` of a model we did not train: the package (and model) its weights came from."""
    return f"{source.package} {source.package_version} ({source.base_model})"


def build_fp32(registry: ModelRegistry, packaged: PackagedModel, progress: Progress) -> BuiltVersion:
    progress.step(f"loading all-MiniLM-L6-v2 in PyTorch from {packaged.source.package} {packaged.package_version}")
    # torch and transformers load only here, so a run with nothing to build stays quick.
    from models.build import export

    encoder = export.load_encoder(packaged.model_dir)
    created = datetime.now(UTC)
    with staged_version(registry, MODEL_NAME, created) as (version_id, folder):
        progress.step(f"exporting FP32 ONNX (opset {export.OPSET}) to {folder / ONNX_FILE}")
        export.export_fp32(encoder, folder / ONNX_FILE)
        shutil.copyfile(packaged.tokenizer_file, folder / TOKENIZER_FILE)
        # The weights and config the graph was just exported from, byte for byte: what the
        # torch backend serves for this version.
        (folder / TORCH_DIR).mkdir()
        shutil.copyfile(packaged.config_file, folder / TORCH_DIR / TORCH_CONFIG_FILE)
        shutil.copyfile(packaged.weights_file, folder / TORCH_DIR / TORCH_WEIGHTS_FILE)

        progress.step(f"checking FP32 ONNX against PyTorch (sentence-transformers) on {len(CHECK_SENTENCES)} sentences")
        reference = reference_embeddings(packaged.model_dir, CHECK_SENTENCES)
        inputs, _ = describe_io(folder / ONNX_FILE, normalized_outputs=True)
        # One padded batch (every row padded to the longest) and one sentence at a time.
        runs = [
            onnx_embeddings(
                folder / ONNX_FILE,
                folder / TOKENIZER_FILE,
                max_length=packaged.max_seq_length,
                input_names=[spec.name for spec in inputs],
                sentences=CHECK_SENTENCES,
                batch_size=batch_size,
            )
            for batch_size in (len(CHECK_SENTENCES), 1)
        ]
        progress.step(f"checking the stored PyTorch artifacts ({TORCH_DIR}/) the way the torch backend runs them")
        torch_run = torch_embeddings(
            folder / TORCH_DIR / TORCH_CONFIG_FILE,
            folder / TORCH_DIR / TORCH_WEIGHTS_FILE,
            folder / TOKENIZER_FILE,
            max_length=packaged.max_seq_length,
            input_names=[spec.name for spec in inputs],
            sentences=CHECK_SENTENCES,
            batch_size=len(CHECK_SENTENCES),
        )
        check = check_fp32_matches_reference(runs, reference, torch_run)
        progress.step(f"FP32 check: {describe_check(check)}")
        manifest = assemble_manifest(
            version_id=version_id,
            created=created,
            precision="fp32",
            parent=None,
            folder=folder,
            source=packaged.source,
            max_length=packaged.max_seq_length,
            recipe={
                **export.recipe(),
                "torch_artifacts": f"{TORCH_DIR}/: {packaged.source.package}'s {TORCH_CONFIG_FILE} and "
                f"{TORCH_WEIGHTS_FILE}, copied unchanged (the weights the graph was exported from)",
            },
            check=check,
            training_data=upstream_training_data(packaged.source),
            hyperparameters=export.hyperparameters(packaged.max_seq_length),
            torch_dir=TORCH_DIR,
        )
        registry.register(manifest)
    progress.step(f"registered as {manifest.id}")
    return BuiltVersion(manifest, newly_built=True)


def build_int8(registry: ModelRegistry, fp32: ModelManifest, progress: Progress) -> BuiltVersion:
    from models.build import quantize

    fp32_onnx = registry.path_of(fp32, fp32.onnx_file)
    fp32_tokenizer = registry.path_of(fp32, fp32.tokenizer_file)
    with staged_int8(registry, fp32, progress) as (version_id, folder, created):

        progress.step(f"checking INT8 against FP32 ONNX on {len(CHECK_SENTENCES)} sentences")
        input_names = [spec.name for spec in fp32.inputs]
        rows = {
            precision: onnx_embeddings(
                onnx_path,
                fp32_tokenizer,
                max_length=fp32.max_length,
                input_names=input_names,
                sentences=CHECK_SENTENCES,
                batch_size=len(CHECK_SENTENCES),
            )
            for precision, onnx_path in (("fp32", fp32_onnx), ("int8", folder / ONNX_FILE))
        }
        check = check_int8_close_to_fp32(rows["int8"], rows["fp32"])
        progress.step(f"INT8 check: {describe_check(check)}")
        manifest = assemble_manifest(
            version_id=version_id,
            created=created,
            precision="int8",
            parent=fp32.id,
            folder=folder,
            source=fp32.source,
            max_length=fp32.max_length,
            recipe=quantize.recipe(),
            check=check,
            training_data=fp32.training_data or upstream_training_data(fp32.source),
            # Everything that shaped the INT8 weights: the parent's settings, then the quantiser's.
            hyperparameters={**fp32.hyperparameters, **quantize.hyperparameters()},
        )
        registry.register(manifest)
    progress.step(f"registered as {manifest.id}")
    return BuiltVersion(manifest, newly_built=True)


def describe_check(check: AccuracyCheck) -> str:
    figures = "".join(f", {key} {value:.6g}" for key, value in sorted(check.figures.items()) if key != "sentences")
    verdict = "passed" if check.passed else "FAILED"
    return f"{check.metric} {check.value:.6g} {check.comparison} {check.threshold:g}{figures}: {verdict}"
