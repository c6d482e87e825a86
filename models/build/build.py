"""The build steps for one version each: FP32 from PyTorch, INT8 from a registered FP32.

The FP32 version also keeps the PyTorch weights and config its graph was exported from
(`torch/`, listed and hashed in the manifest as `torch_dir`), so the torch backend serves the
very same version; the INT8 version is ONNX-only.

Each is staged, checked and registered by `models.build.version.build_version`.
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

from models.build.checks import (
    TextBatches,
    check_fp32_matches_reference,
    check_int8_close_to_fp32,
    onnx_embeddings,
    reference_embeddings,
    torch_embeddings,
)
from models.build.graph import describe_io
from models.build.progress import Progress
from models.build.sentences import CHECK_SENTENCES
from models.build.source import TOKENIZER_FILE, PackagedModel
from models.build.version import ONNX_FILE, TORCH_DIR, BuiltVersion, VersionPlan, build_version, quantized
from models.registry import TORCH_CONFIG_FILE, TORCH_WEIGHTS_FILE, AccuracyCheck, ModelManifest, ModelRegistry, ModelSource

MODEL_NAME = "minilm-embed"


def upstream_training_data(source: ModelSource) -> str:
    """`training_data` of a model we did not train: the package (and model) its weights came from."""
    return f"{source.package} {source.package_version} ({source.base_model})"


def build_fp32(registry: ModelRegistry, packaged: PackagedModel, progress: Progress) -> BuiltVersion:
    progress.step(f"loading all-MiniLM-L6-v2 in PyTorch from {packaged.source.package} {packaged.package_version}")
    # torch and transformers load only here, so a run with nothing to build stays quick.
    from models.build import export

    encoder = export.load_encoder(packaged.model_dir)

    def stage(folder: Path) -> None:
        progress.step(f"exporting FP32 ONNX (opset {export.OPSET}) to {folder / ONNX_FILE}")
        export.export_fp32(encoder, folder / ONNX_FILE)
        shutil.copyfile(packaged.tokenizer_file, folder / TOKENIZER_FILE)
        # The weights and config the graph was just exported from, byte for byte: what the
        # torch backend serves for this version.
        (folder / TORCH_DIR).mkdir()
        shutil.copyfile(packaged.config_file, folder / TORCH_DIR / TORCH_CONFIG_FILE)
        shutil.copyfile(packaged.weights_file, folder / TORCH_DIR / TORCH_WEIGHTS_FILE)

    plan = VersionPlan(
        name=MODEL_NAME,
        precision="fp32",
        parent=None,
        source=packaged.source,
        max_length=packaged.max_seq_length,
        recipe={
            **export.recipe(),
            "torch_artifacts": f"{TORCH_DIR}/: {packaged.source.package}'s {TORCH_CONFIG_FILE} and "
            f"{TORCH_WEIGHTS_FILE}, copied unchanged (the weights the graph was exported from)",
        },
        training_data=upstream_training_data(packaged.source),
        hyperparameters=export.hyperparameters(packaged.max_seq_length),
        torch_dir=TORCH_DIR,
    )
    return build_version(registry, plan, stage, lambda folder: _check_fp32(folder, packaged, progress), progress)


def _check_fp32(folder: Path, packaged: PackagedModel, progress: Progress) -> AccuracyCheck:
    progress.step(f"checking FP32 ONNX against PyTorch (sentence-transformers) on {len(CHECK_SENTENCES)} sentences")
    reference = reference_embeddings(packaged.model_dir, CHECK_SENTENCES)
    inputs, _ = describe_io(folder / ONNX_FILE, normalized_outputs=True)
    texts = TextBatches(folder / TOKENIZER_FILE, max_length=packaged.max_seq_length,
                        input_names=[spec.name for spec in inputs], sentences=CHECK_SENTENCES,
                        batch_size=len(CHECK_SENTENCES))
    # One padded batch (every row padded to the longest) and one sentence at a time.
    runs = [onnx_embeddings(folder / ONNX_FILE, texts), onnx_embeddings(folder / ONNX_FILE, replace(texts, batch_size=1))]
    progress.step(f"checking the stored PyTorch artifacts ({TORCH_DIR}/) the way the torch backend runs them")
    torch_run = torch_embeddings(folder / TORCH_DIR / TORCH_CONFIG_FILE, folder / TORCH_DIR / TORCH_WEIGHTS_FILE, texts)
    return check_fp32_matches_reference(runs, reference, torch_run)


def build_int8(registry: ModelRegistry, fp32: ModelManifest, progress: Progress) -> BuiltVersion:
    from models.build import quantize

    stage = quantized(registry, fp32, progress)
    texts = TextBatches(registry.path_of(fp32, fp32.tokenizer_file), max_length=fp32.max_length,
                        input_names=[spec.name for spec in fp32.inputs], sentences=CHECK_SENTENCES,
                        batch_size=len(CHECK_SENTENCES))

    def check(folder: Path) -> AccuracyCheck:
        progress.step(f"checking INT8 against FP32 ONNX on {len(CHECK_SENTENCES)} sentences")
        return check_int8_close_to_fp32(onnx_embeddings(folder / ONNX_FILE, texts),
                                        onnx_embeddings(registry.path_of(fp32, fp32.onnx_file), texts))

    plan = VersionPlan(
        name=MODEL_NAME,
        precision="int8",
        parent=fp32.id,
        source=fp32.source,
        max_length=fp32.max_length,
        recipe=quantize.recipe(),
        training_data=fp32.training_data or upstream_training_data(fp32.source),
        # Everything that shaped the INT8 weights: the parent's settings, then the quantiser's.
        hyperparameters={**fp32.hyperparameters, **quantize.hyperparameters()},
    )
    return build_version(registry, plan, stage, check, progress)
