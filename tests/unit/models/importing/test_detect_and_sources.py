"""Which converter a source goes to, and what is read from its files (labels, max length, hashes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from models.importing.detect import detect
from models.importing.errors import ImportRefused
from models.importing.fetch import local_source, source_hashes
from models.importing.labels import labels_from_config, parse_labels
from models.importing.text import find_max_length, install_tokenizer


def touch(path: Path, text: str = "{}") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.mark.parametrize(("files", "kind"), [
    (["modules.json", "config.json", "model.safetensors"], "sentence-transformers"),
    (["config.json", "model.safetensors", "tokenizer.json"], "transformers"),
    (["config.json", "pytorch_model.bin"], "transformers"),
    (["model.onnx", "other.onnx", "tokenizer.json"], "onnx"),
    (["graph.onnx", "tokenizer.json"], "onnx"),
])
def test_folders_are_told_apart_by_their_files(tmp_path: Path, files: list[str], kind: str) -> None:
    for name in files:
        touch(tmp_path / name)
    assert detect(tmp_path).kind == kind


def test_files_by_suffix(tmp_path: Path) -> None:
    assert detect(touch(tmp_path / "model.joblib")).kind == "estimator"
    found = detect(touch(tmp_path / "whatever.bin"))
    assert (found.kind, found.onnx_file) == ("onnx", tmp_path / "whatever.bin")


@pytest.mark.parametrize(("name", "head", "framework"), [
    ("model.json", b'{"learner":{"attributes":{},"feature_names":[]', "xgboost"),  # XGBoost save_model JSON
    ("model.ubj", b"{L\x00\x00\x00\x00\x00\x00\x00\x07learner{L", "xgboost"),  # ... and UBJSON
    ("anything", b"{i\x07learner{", "xgboost"),  # what it is, whatever the suffix
    ("model.bst", b"\x00\x00\x00?\x06\x00", "xgboost"),  # the legacy binary, by its suffix
    ("model.bin", b"binf\x00\x00\x00\x00", "xgboost"),  # ... or its header
    ("model.txt", b"tree\nversion=v4\nnum_class=1\n", "lightgbm"),  # LightGBM save_model
])
def test_booster_files_are_told_by_their_first_bytes(tmp_path: Path, name: str, head: bytes, framework: str) -> None:
    (tmp_path / name).write_bytes(head + b"rest of the model")
    found = detect(tmp_path / name)
    assert (found.kind, found.framework, found.path) == ("booster", framework, tmp_path / name)


@pytest.mark.parametrize("head", [b'{"version": 1, "model": {"learner": 1}}', b"tree\nnot a booster", b"\x08\x07\x12"])
def test_other_files_are_not_boosters(tmp_path: Path, head: bytes) -> None:
    (tmp_path / "model.json").write_bytes(head)
    assert detect(tmp_path / "model.json").kind == "onnx"  # and refused there unless it parses as ONNX


@pytest.mark.parametrize(("files", "message"), [
    (["a.onnx", "b.onnx"], "several ONNX files"),
    (["config.json"], "no weights"),
    (["README.md"], "no model found"),
])
def test_folders_that_are_no_model_are_refused(tmp_path: Path, files: list[str], message: str) -> None:
    for name in files:
        touch(tmp_path / name)
    with pytest.raises(ImportRefused, match=message):
        detect(tmp_path)


def test_labels_come_in_id_order_from_id2label(tmp_path: Path) -> None:
    config = touch(tmp_path / "config.json", json.dumps({"id2label": {"1": "spam", "0": "ham", "2": "eggs"}}))
    assert labels_from_config(config) == ("ham", "spam", "eggs")
    assert labels_from_config(tmp_path / "missing.json") == ()
    touch(config, json.dumps({"id2label": {"0": "a", "2": "c"}}))
    with pytest.raises(ImportRefused, match="not 0..1"):
        labels_from_config(config)


def test_labels_on_the_command_line(tmp_path: Path) -> None:
    assert parse_labels("a, b ,c") == ("a", "b", "c")
    listed = touch(tmp_path / "labels.txt", "x\ny\n\n")
    assert parse_labels(f"@{listed}") == ("x", "y")


def test_max_length_prefers_what_the_source_states_first(tmp_path: Path) -> None:
    tokenizer = touch(tmp_path / "tokenizer.json", json.dumps({"truncation": {"max_length": 128}}))
    touch(tmp_path / "config.json", json.dumps({"max_position_embeddings": 512}))
    assert find_max_length(tmp_path, tokenizer, None) == 128
    touch(tmp_path / "tokenizer_config.json", json.dumps({"model_max_length": 1e30}))  # "no limit": skipped
    assert find_max_length(tmp_path, tokenizer, None) == 128
    touch(tmp_path / "sentence_bert_config.json", json.dumps({"max_seq_length": 256}))
    assert find_max_length(tmp_path, tokenizer, None) == 256
    assert find_max_length(tmp_path, tokenizer, 64) == 64


def test_max_length_unknown_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ImportRefused, match="--max-length"):
        find_max_length(tmp_path, touch(tmp_path / "tokenizer.json"), None)


def test_no_tokenizer_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ImportRefused, match="needs a tokenizer"):
        install_tokenizer(tmp_path, tmp_path)


def test_sources_are_hashed_file_by_file(tmp_path: Path) -> None:
    touch(tmp_path / "src" / "a.txt", "a")
    touch(tmp_path / "src" / "sub" / "b.txt", "b")
    hashes = source_hashes(tmp_path / "src")
    assert sorted(hashes) == ["a.txt", "sub/b.txt"]
    assert hashes["a.txt"] == "ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb"
    assert list(source_hashes(tmp_path / "src" / "a.txt")) == ["a.txt"]


def test_a_missing_local_source_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ImportRefused, match="does not exist"), local_source(str(tmp_path / "nowhere")):
        pass


def test_a_url_folder_is_copied_whole_for_the_import() -> None:
    import fsspec

    fs = fsspec.filesystem("memory")
    fs.pipe({"/byom-test/model/config.json": b"{}", "/byom-test/model/sub/tokenizer.json": b"{\"t\": 1}"})
    try:
        with local_source("memory://byom-test/model") as path:
            assert path.is_dir() and path.name == "model"
            assert (path / "sub" / "tokenizer.json").read_bytes() == b"{\"t\": 1}"
            copied = path
        assert not copied.exists()  # the copy lives only as long as the import
    finally:
        fs.rm("/byom-test", recursive=True)
