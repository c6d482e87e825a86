"""One import, start to finish: fetch, detect, convert into a staged version folder, check, register.

Both versions of an `--int8` import are staged and checked before either registers, and any
failure removes every staged folder (`models.build.version.staged_version`): the registry holds
the whole import or none of it. The registry writes each manifest last.
"""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path

import onnx
import onnxruntime as ort

from models.backends.onnx import open_session
from models.build.progress import Progress
from models.build.version import describe_check, staged_version
from models.importing.checks import check_against_source, check_int8, rows_have_unit_norm
from models.importing.converted import ONNX_FILE, Converted, ImportRequest
from models.importing.detect import DetectedSource, detect
from models.importing.errors import ImportRefused
from models.importing.fetch import local_source, source_hashes
from models.importing.manifest import derive_manifest, import_source
from models.importing.signature import check_fits_task, name_anonymous_axes, read_signature
from models.registry import CheckNotPassed, ModelManifest, ModelRegistry
from models.remote_files import is_url


def convert(detected: DetectedSource, request: ImportRequest, into: Path) -> Converted:
    """The converter for the source's kind; heavy frameworks load only when their kind is imported."""
    onnx_only = request.onnx_file_flags()
    if onnx_only and detected.kind != "onnx":
        raise ImportRefused(f"{', '.join(onnx_only)}: for ONNX files exported elsewhere, not for this "
                            f"{detected.kind} source: the import exports it itself, with the tokenizer, inputs, "
                            "output and pooling the source states")
    if detected.kind == "onnx":
        from models.importing.onnx_file import convert_onnx

        assert detected.onnx_file is not None
        folder = detected.path if detected.path.is_dir() else detected.path.parent
        return convert_onnx(detected.onnx_file, folder, request, into)
    if detected.kind == "transformers":
        from models.importing.transformers_export import convert_transformers

        return convert_transformers(detected.path, request, into)
    if detected.kind == "sentence-transformers":
        from models.importing.sentence_transformers_export import convert_sentence_transformers

        return convert_sentence_transformers(detected.path, request, into)
    if detected.kind == "booster":
        from models.importing.boosters import convert_booster

        assert detected.framework is not None
        return convert_booster(detected.path, detected.framework, request, into)
    from models.importing.tabular import convert_estimator

    return convert_estimator(detected.path, request, into)


def _session(path: Path) -> ort.InferenceSession:
    try:
        return open_session(path, device="cpu", intra_op_threads=0)
    except Exception as exc:  # ONNX Runtime raises its own types for graphs it cannot load
        raise ImportRefused(f"ONNX Runtime cannot load the graph: {exc}") from exc


def _refuse_failed(manifest: ModelManifest) -> None:
    if not manifest.check.passed:
        raise CheckNotPassed(f"refused: check {manifest.check.name} failed: {describe_check(manifest.check)}")


def import_model(registry: ModelRegistry, source: str, request: ImportRequest, progress: Progress) -> list[ModelManifest]:
    """Register the source as a new version of `request.name` (and its INT8 child); the manifests."""
    with local_source(source) as path:
        detected = detect(path)
        uri = source if is_url(source) else str(path.resolve())
        progress.step(f"{uri}: {detected.kind} model; hashing its files")
        provenance = source_hashes(path)
        created = datetime.now(UTC)
        with staged_version(registry, request.name, created) as (version_id, folder):
            progress.step(f"converting to ONNX in {folder}")
            converted = convert(detected, request, folder)
            name_anonymous_axes(folder / ONNX_FILE)
            inputs, outputs = read_signature(folder / ONNX_FILE, converted.task)
            check_fits_task(converted.task, inputs, outputs, converted.labels)
            progress.step(f"task {converted.task}; checking the graph against {converted.compared_with} and in "
                          "batches of 1, 3, 8")
            session = _session(folder / ONNX_FILE)
            check = check_against_source(session, converted.samples, converted.reference, converted.compared_with,
                                         {spec.name: spec.shape for spec in outputs}, converted.reference_max_abs_diff)
            progress.step(f"FP32 check: {describe_check(check)}")
            source_record = import_source(converted, uri, provenance)
            fp32 = derive_manifest(converted, name=request.name, version_id=version_id, created=created,
                                   folder=folder, source=source_record, check=check,
                                   unit_rows=_unit_rows(converted, session))
            _refuse_failed(fp32)
            if not request.int8:
                return [_register(registry, fp32, progress)]
            with staged_version(registry, request.name, created) as (int8_id, int8_folder):
                int8 = _stage_int8(converted, fp32, folder, int8_folder, int8_id, session, progress)
                _refuse_failed(int8)
                return [_register(registry, fp32, progress), _register(registry, int8, progress)]


def _unit_rows(converted: Converted, session: ort.InferenceSession) -> bool:
    """An embedding's manifest says its rows are normalised only where they are."""
    return converted.task == "embedding" and rows_have_unit_norm(session, converted.samples)


def _register(registry: ModelRegistry, manifest: ModelManifest, progress: Progress) -> ModelManifest:
    registry.register(manifest)
    progress.step(f"registered {manifest.id} ({manifest.precision}, task {manifest.task})")
    return manifest


def _stage_int8(converted: Converted, fp32: ModelManifest, fp32_folder: Path, folder: Path, version_id: str,
                fp32_session: ort.InferenceSession, progress: Progress) -> ModelManifest:
    from models.build import quantize

    _refuse_nothing_to_quantise(fp32_folder / ONNX_FILE, quantize.OP_TYPES)
    progress.step("quantising to INT8 with ONNX Runtime (dynamic, per-channel, MatMul/Gemm weights)")
    try:
        quantize.quantize_int8(fp32_folder / ONNX_FILE, folder / ONNX_FILE)
    except Exception as exc:  # the quantiser raises many types for graphs it cannot handle
        raise ImportRefused(f"--int8: ONNX Runtime cannot quantise this graph: {exc}") from exc
    if converted.tokenizer_file is not None:
        shutil.copyfile(converted.tokenizer_file, folder / converted.tokenizer_file.name)
    int8_session = _session(folder / ONNX_FILE)
    check = check_int8(int8_session, fp32_session, converted.samples)
    progress.step(f"INT8 check: {describe_check(check)}")
    return derive_manifest(converted, name=fp32.name, version_id=version_id, created=fp32.created, folder=folder,
                           source=fp32.source, check=check, unit_rows=_unit_rows(converted, int8_session),
                           precision="int8", parent=fp32.id,
                           extra_recipe=quantize.recipe(), extra_hyperparameters=quantize.hyperparameters())


def _refuse_nothing_to_quantise(onnx_path: Path, op_types: tuple[str, ...]) -> None:
    """An "INT8" version of a graph without the operators INT8 quantises would be the FP32 graph again."""
    operators = sorted({node.op_type for node in onnx.load(str(onnx_path)).graph.node})
    if not set(operators) & set(op_types):
        raise ImportRefused(f"--int8: the graph has no {' or '.join(op_types)} weights for INT8 to quantise (its "
                            f"operators: {', '.join(operators)}), so an INT8 version would be the FP32 graph. "
                            "Import it without --int8")
