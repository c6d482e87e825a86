"""`fleet models import`'s flags for ONNX files exported elsewhere reach the import as asked:
--input pairs, --output, --pooling, --normalize and --tokenizer, on a tiny messy export."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from common.settings import FleetSettings
from fleet.commands.model_import import add_import_parser, cmd_import
from fleet.exits import Exit
from models import ModelRegistry
from tests.unit.models.importing.onnx_exports import messy_export, vocabulary_size, write_tokenizer


def parsed(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="fleet models")
    add_import_parser(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["import", *argv])


def test_the_flags_import_a_messy_export_with_its_tokenizer_apart(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    tokenizer = write_tokenizer(tmp_path / "tokenizer")
    graph = messy_export(tmp_path / "export" / "model.onnx", vocabulary_size(tokenizer))
    registry = ModelRegistry(tmp_path / "models")
    args = parsed([str(graph), "--name", "paraphrase-minilm", "--input", "input_ids=ids", "--input",
                   "attention_mask=mask", "--output", "last_hidden_state", "--pooling", "mean", "--normalize",
                   "--tokenizer", str(tokenizer)])
    assert cmd_import(FleetSettings(), registry, args) == Exit.OK
    assert "registered paraphrase-minilm-" in capsys.readouterr().out
    (manifest,) = registry.versions("paraphrase-minilm")
    assert manifest.recipe["inputs"] == "input_ids=ids, attention_mask=mask"
    assert manifest.recipe["tokenizer"] == str(tokenizer)
    assert manifest.hyperparameters == {"pooling": "mean", "normalize": "l2"} and manifest.outputs[0].normalized


@pytest.mark.parametrize("argv", [["--input", "ids"], ["--input", "input_ids="], ["--pooling", "max"]])
def test_malformed_flags_are_usage_errors(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ended:
        parsed(["model.onnx", "--name", "m", *argv])
    assert ended.value.code == 2 and argv[0] in capsys.readouterr().err
