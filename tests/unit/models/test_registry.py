"""The model registry's logic on tiny fake artifacts: ids, resolution, integrity, registration."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from pathlib import Path

import pytest

from models.registry import (
    MANIFEST_FILE,
    AccuracyCheck,
    CheckNotPassed,
    ModelIntegrityError,
    ModelManifest,
    ModelNotFound,
    ModelRegistry,
    ModelSource,
    OutputSpec,
    Precision,
    RegistryError,
    TensorSpec,
    hash_files,
)

NAME = "tiny-embed"
DAY = date(2025, 3, 14)


def _check(passed: bool = True) -> AccuracyCheck:
    return AccuracyCheck.evaluate(
        name="fake-check",
        metric="mean_cosine",
        value=0.99 if passed else 0.5,
        threshold=0.98,
        comparison=">=",
        figures={"min_cosine": 0.97 if passed else 0.1},
    )


def _stage_and_register(
    registry: ModelRegistry,
    *,
    precision: Precision = "fp32",
    day: date = DAY,
    parent: str | None = None,
    passed: bool = True,
    register: bool = True,
) -> ModelManifest:
    """Write tiny artifacts into the next version folder and (optionally) register them."""
    version_id = registry.next_version_id(NAME, day)
    folder = registry.version_dir(NAME, version_id)
    folder.mkdir(parents=True)
    (folder / "model.onnx").write_bytes(b"not really onnx " + version_id.encode())
    (folder / "tokenizer.json").write_text('{"fake": true}')
    manifest = ModelManifest(
        id=version_id,
        name=NAME,
        created=datetime(day.year, day.month, day.day, 12, tzinfo=UTC),
        precision=precision,
        parent=parent,
        source=ModelSource(package="fake-package", package_version="0.0.1", base_model="fake/base"),
        files=hash_files(folder, ["model.onnx", "tokenizer.json"]),
        onnx_file="model.onnx",
        tokenizer_file="tokenizer.json",
        max_length=16,
        inputs=(TensorSpec(name="input_ids", dtype="int64", shape=("batch", "sequence")),),
        outputs=(OutputSpec(name="embedding", dtype="float32", shape=("batch", 4), normalized=True),),
        check=_check(passed),
    )
    if register:
        registry.register(manifest)
    return manifest


@pytest.fixture
def registry(tmp_path: Path) -> ModelRegistry:
    return ModelRegistry(tmp_path / "models")


def test_version_ids_count_up_per_name_per_day(registry: ModelRegistry) -> None:
    assert registry.next_version_id(NAME, DAY) == "tiny-embed-20250314-001"
    first = _stage_and_register(registry)
    second = _stage_and_register(registry)
    assert (first.id, second.id) == ("tiny-embed-20250314-001", "tiny-embed-20250314-002")
    # A new day starts again at 001; another name has its own sequence.
    assert registry.next_version_id(NAME, date(2025, 3, 15)) == "tiny-embed-20250315-001"
    assert registry.next_version_id("other-model", DAY) == "other-model-20250314-001"


def test_a_staged_but_unregistered_folder_still_takes_its_number(registry: ModelRegistry) -> None:
    _stage_and_register(registry, register=False)
    assert registry.next_version_id(NAME, DAY) == "tiny-embed-20250314-002"
    assert registry.versions(NAME) == []


def test_versions_are_listed_oldest_first_and_round_trip(registry: ModelRegistry) -> None:
    later = _stage_and_register(registry, day=date(2025, 4, 1))
    earlier = _stage_and_register(registry, day=DAY)
    assert registry.versions(NAME) == [earlier, later]


def test_resolve_pinned_version(registry: ModelRegistry) -> None:
    pinned = _stage_and_register(registry)
    _stage_and_register(registry)
    assert registry.resolve(NAME, version=pinned.id) == pinned


def test_resolve_newest_of_a_precision(registry: ModelRegistry) -> None:
    old_fp32 = _stage_and_register(registry, precision="fp32")
    int8 = _stage_and_register(registry, precision="int8", parent=old_fp32.id)
    new_fp32 = _stage_and_register(registry, precision="fp32")
    assert registry.resolve(NAME, precision="fp32") == new_fp32
    assert registry.resolve(NAME, precision="int8") == int8
    assert registry.resolve(NAME) == new_fp32


def test_resolve_not_found_names_what_exists(registry: ModelRegistry) -> None:
    fp32 = _stage_and_register(registry)
    with pytest.raises(ModelNotFound, match=r"no int8 version of 'tiny-embed'.*tiny-embed-20250314-001 \(fp32\)"):
        registry.resolve(NAME, precision="int8")
    with pytest.raises(ModelNotFound, match=rf"no version 'tiny-embed-20990101-001'.*{fp32.id}"):
        registry.resolve(NAME, version="tiny-embed-20990101-001")
    with pytest.raises(ModelNotFound, match=r"is fp32, not int8"):
        registry.resolve(NAME, version=fp32.id, precision="int8")
    with pytest.raises(ModelNotFound, match=r"nothing of that name is registered.*scripts/build-models"):
        registry.resolve("missing-model")


def test_verify_detects_a_tampered_artifact(registry: ModelRegistry) -> None:
    manifest = _stage_and_register(registry)
    registry.verify(manifest)
    model_file = registry.path_of(manifest, "model.onnx")
    data = bytearray(model_file.read_bytes())
    data[3] ^= 0x01
    model_file.write_bytes(bytes(data))
    with pytest.raises(ModelIntegrityError, match=r"model\.onnx has sha256"):
        registry.verify(manifest)


def test_verify_detects_a_missing_artifact(registry: ModelRegistry) -> None:
    manifest = _stage_and_register(registry)
    registry.path_of(manifest, "tokenizer.json").unlink()
    with pytest.raises(ModelIntegrityError, match=r"tokenizer\.json is missing"):
        registry.verify(manifest)


def test_register_refuses_a_failed_check(registry: ModelRegistry) -> None:
    manifest = _stage_and_register(registry, passed=False, register=False)
    with pytest.raises(CheckNotPassed, match=r"mean_cosine = 0\.5, needs >= 0\.98, min_cosine = 0\.1"):
        registry.register(manifest)
    assert not (registry.version_dir(NAME, manifest.id) / MANIFEST_FILE).exists()
    assert registry.versions(NAME) == []


def test_register_refuses_artifacts_that_do_not_match_the_manifest(registry: ModelRegistry) -> None:
    manifest = _stage_and_register(registry, register=False)
    registry.path_of(manifest, "model.onnx").write_bytes(b"changed after hashing")
    with pytest.raises(ModelIntegrityError):
        registry.register(manifest)
    assert registry.versions(NAME) == []


def test_register_never_overwrites_a_version(registry: ModelRegistry) -> None:
    manifest = _stage_and_register(registry)
    with pytest.raises(RegistryError, match="immutable"):
        registry.register(manifest)


def test_register_leaves_no_temporary_files(registry: ModelRegistry) -> None:
    manifest = _stage_and_register(registry)
    folder = registry.version_dir(NAME, manifest.id)
    assert sorted(path.name for path in folder.iterdir()) == [MANIFEST_FILE, "model.onnx", "tokenizer.json"]


def test_manifest_rejects_paths_outside_its_folder() -> None:
    with pytest.raises(ValueError, match="inside the version folder"):
        ModelManifest(
            id="tiny-embed-20250314-001",
            name=NAME,
            created=datetime(2025, 3, 14, tzinfo=UTC),
            precision="fp32",
            parent=None,
            source=ModelSource(package="p", package_version="1", base_model="b"),
            files={"../../etc/passwd": "0" * 64, "tokenizer.json": "0" * 64},
            onnx_file="../../etc/passwd",
            tokenizer_file="tokenizer.json",
            max_length=16,
            inputs=(),
            outputs=(OutputSpec(name="embedding", dtype="float32", shape=("batch", 4), normalized=True),),
            check=_check(),
        )


def _classifier(**overrides: object) -> ModelManifest:
    """A classification manifest with 3 output columns; `overrides` replace any field."""
    fields: dict[str, object] = {
        "id": "tiny-embed-20250314-001",
        "name": NAME,
        "created": datetime(2025, 3, 14, tzinfo=UTC),
        "precision": "fp32",
        "parent": None,
        "source": ModelSource(package="p", package_version="1", base_model="b"),
        "files": {"model.onnx": "0" * 64, "tokenizer.json": "0" * 64},
        "onnx_file": "model.onnx",
        "tokenizer_file": "tokenizer.json",
        "max_length": 16,
        "inputs": (TensorSpec(name="input_ids", dtype="int64", shape=("batch", "sequence")),),
        "outputs": (OutputSpec(name="probabilities", dtype="float32", shape=("batch", 3), normalized=False),),
        "check": _check(),
        "task": "classification",
        "labels": ("a", "b", "c"),
    }
    fields.update(overrides)
    return ModelManifest.model_validate(fields)


def test_a_manifest_written_before_the_provenance_fields_loads_as_an_embedding_model(
    registry: ModelRegistry,
) -> None:
    manifest = _stage_and_register(registry)
    path = registry.version_dir(NAME, manifest.id) / MANIFEST_FILE
    raw = json.loads(path.read_text(encoding="utf-8"))
    for field in ("task", "labels", "training_data", "code_commit", "hyperparameters"):
        del raw[field]
    path.write_text(json.dumps(raw), encoding="utf-8")
    (loaded,) = registry.versions(NAME)
    assert (loaded.task, loaded.labels, loaded.training_data, loaded.code_commit, loaded.hyperparameters) == (
        "embedding", (), None, None, {}
    )


def test_provenance_fields_round_trip_with_their_types(registry: ModelRegistry) -> None:
    classifier = _classifier(
        training_data="faq-intents-v1 sha256:0123456789ab",
        code_commit="f" * 40 + "-dirty",
        hyperparameters={"lr": 1.0, "epochs": 200, "optimizer": "sgd"},
    )
    loaded = ModelManifest.model_validate_json(classifier.model_dump_json())
    assert loaded == classifier
    assert isinstance(loaded.hyperparameters["epochs"], int) and isinstance(loaded.hyperparameters["lr"], float)
    assert loaded.embedding_dim == len(loaded.labels) == 3


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"labels": ("a", "b")}, r"2 labels for an output of width 3"),
        ({"labels": ()}, r"needs its labels"),
        ({"labels": ("a", "b", "a")}, r"labels must be distinct"),
        ({"task": "embedding"}, r"an embedding model has no labels"),
        ({"task": "regression"}, r"task"),
    ],
)
def test_manifest_rejects_inconsistent_labels(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _classifier(**overrides)
