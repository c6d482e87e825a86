"""`fleet models import` from the command line: progress, exit codes, and list/show of the result."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet.commands.models import main as models_main
from fleet.exits import Exit
from tests.integration.models.importing.boosters import xgboost_booster
from tests.integration.models.importing.sources import Sources


@pytest.fixture
def registry_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FLEET_MODEL_DIR", str(tmp_path / "models"))
    return tmp_path / "models"


def test_import_then_list_and_show(registry_dir: Path, sources: Sources, capsys: pytest.CaptureFixture[str]) -> None:
    assert models_main(["import", str(sources.sklearn_pipeline), "--name", "churn"]) == Exit.OK
    out, err = capsys.readouterr()
    assert "checking the graph against sklearn and in batches of 1, 3, 8" in err  # progress on stderr
    assert "FP32 check: max_abs_diff" in err and "passed" in err
    (version,) = [line.split()[1] for line in out.splitlines() if line.startswith("registered ")]
    assert (registry_dir / "churn" / version / "manifest.json").is_file()

    assert models_main(["list", "churn"]) == Exit.OK
    listing = capsys.readouterr().out
    assert version in listing and "tensor" in listing and "import sklearn" in listing

    assert models_main(["show", version]) == Exit.OK
    shown = capsys.readouterr().out
    assert f"import sklearn {sources.sklearn_pipeline}" in shown and "max length" in shown


def test_a_refused_import_exits_failed_with_the_reason(registry_dir: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "notes.onnx").write_bytes(b"\x00\x01not a graph")
    assert models_main(["import", str(tmp_path / "notes.onnx"), "--name", "notes"]) == Exit.FAILED
    assert "fleet models import:" in (err := capsys.readouterr().err) and "is not a valid ONNX model" in err
    assert not (registry_dir / "notes").exists() or not any((registry_dir / "notes").iterdir())


def test_a_url_source_is_fetched_with_fsspec(registry_dir: Path, sources: Sources,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert models_main(["import", f"file://{sources.cnn}", "--name", "digits"]) == Exit.OK
    assert "task tensor" in capsys.readouterr().out


def test_a_booster_file_from_the_command_line(registry_dir: Path, sources: Sources, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("xgboost")
    path = xgboost_booster(sources.sklearn_rows, "multi:softprob", tmp_path / "churn.ubj")
    assert models_main(["import", str(path), "--name", "churn", "--int8"]) == Exit.FAILED
    assert "tree ensembles have no INT8 kernels worth it" in capsys.readouterr().err
    assert models_main(["import", str(path), "--name", "churn"]) == Exit.OK
    out, err = capsys.readouterr()
    assert f"{path}: booster model" in err and "checking the graph against xgboost" in err
    (version,) = [line.split()[1] for line in out.splitlines() if line.startswith("registered ")]
    assert version.startswith("churn-") and version.endswith("-001")  # the refused import kept no number
    assert models_main(["show", version]) == Exit.OK
    shown = capsys.readouterr().out
    assert f"import xgboost {path}" in shown and "n_classes=3, n_features=6, objective=multi:softprob" in shown
