"""Sources behind fsspec URLs: which are read as local paths, and what a missing fsspec says."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from models.importing.errors import ImportRefused
from models.registry import RegistryError
from models.remote_files import local_path_of, url_filesystem


def test_paths_are_local_and_urls_go_through_fsspec(tmp_path: Path) -> None:
    assert local_path_of(str(tmp_path / "model.onnx")) == tmp_path / "model.onnx"
    assert local_path_of("~/model.onnx") == Path.home() / "model.onnx"
    assert local_path_of(f"file://{tmp_path}") is None  # fsspec is installed: it reads file:// too
    assert local_path_of("s3://bucket/model") is None


def test_a_file_url_is_a_path_without_fsspec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "fsspec", None)  # as if it were not installed
    assert local_path_of(f"file://{tmp_path}") == tmp_path
    assert local_path_of("s3://bucket/model") is None
    with pytest.raises(ImportRefused, match=r"s3://bucket/model is a URL: importing from it needs fsspec"):
        url_filesystem("s3://bucket/model", "importing from it", ImportRefused)
    with pytest.raises(RegistryError, match="registering from it needs fsspec"):
        url_filesystem("s3://bucket/model", "registering from it")


def test_a_url_gives_its_filesystem_and_root() -> None:
    fs, root = url_filesystem("memory://byom-remote/model/", "importing from it")
    assert root == "/byom-remote/model" and "memory" in fs.protocol
