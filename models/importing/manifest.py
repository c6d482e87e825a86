"""The manifest of an imported version, derived from the staged graph and files: the one place
that knows ModelManifest's fields for imports (so a change of the manifest is reconciled here).

Inputs and outputs are read from the graph (an embedding's rows are stated normalised only when
the import measured unit norms on them), labels and max length come from the converter
(the source's config and tokenizer), the source is recorded with the sha256 of each of its files.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from models.build.provenance import code_commit
from models.importing.converted import ONNX_FILE, Converted
from models.importing.fetch import short_digest
from models.importing.signature import read_signature
from models.registry import AccuracyCheck, ImportSource, ModelManifest, Precision, hash_files


def import_source(converted: Converted, uri: str, hashes: dict[str, str]) -> ImportSource:
    return ImportSource(format=converted.format, uri=uri, sha256=hashes)


def derive_manifest(converted: Converted, *, name: str, version_id: str, created: datetime, folder: Path,
                    source: ImportSource, check: AccuracyCheck, unit_rows: bool, precision: Precision = "fp32",
                    parent: str | None = None, extra_recipe: dict[str, str] | None = None,
                    extra_hyperparameters: dict[str, float | int | str] | None = None) -> ModelManifest:
    inputs, outputs = read_signature(folder / ONNX_FILE, converted.task, unit_rows=unit_rows)
    if converted.inputs_allow_nan:
        inputs = tuple(spec.model_copy(update={"allow_nan": spec.dtype.startswith("float")}) for spec in inputs)
    tokenizer = converted.tokenizer_file.name if converted.tokenizer_file is not None else None
    files = [ONNX_FILE] + ([tokenizer] if tokenizer is not None else [])
    return ModelManifest(
        id=version_id,
        name=name,
        created=created,
        precision=precision,
        parent=parent,
        source=source,
        files=hash_files(folder, files),
        onnx_file=ONNX_FILE,
        tokenizer_file=tokenizer,
        max_length=converted.max_length,
        inputs=inputs,
        outputs=outputs,
        recipe={**converted.recipe, "imported_from": f"{source.format} {source.uri}", **(extra_recipe or {})},
        check=check,
        task=converted.task,
        labels=converted.labels,
        training_data=f"unknown: imported {source.format} model, source sha256 {short_digest(source.sha256)}",
        code_commit=code_commit(),
        hyperparameters={**converted.hyperparameters, **(extra_hyperparameters or {})},
    )
