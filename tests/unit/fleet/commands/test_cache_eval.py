"""`fleet cache-eval --pairs`: every near miss counts toward the false-hit rate, whatever its kind
name (issue 25, item 5), and the verifier's verdicts cut what the cosine threshold lets through."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from fleet.commands.pair_eval import evaluate, load_pairs
from tests.built_models import built_registry, resolve_or_skip

DIM = 8


def vectors_for(pairs_and_cosines: list[tuple[str, str, float]]) -> dict[str, npt.NDArray[np.float32]]:
    """Unit vectors whose a/b cosine is the given one (each pair in its own plane)."""
    out: dict[str, npt.NDArray[np.float32]] = {}
    for i, (a, b, cosine) in enumerate(pairs_and_cosines):
        x, y = np.zeros(DIM, dtype=np.float32), np.zeros(DIM, dtype=np.float32)
        x[i % DIM], y[(i + 1) % DIM] = 1.0, 1.0
        out[a] = x
        out[b] = (cosine * x + np.sqrt(1 - cosine**2) * y).astype(np.float32)
    return out


def write_pairs(tmp_path: Path) -> Path:
    path = tmp_path / "pairs.json"
    path.write_text(json.dumps({
        "paraphrases": [{"a": "How do I reset my password?", "b": "How can I reset my password?"}],
        "near_misses": [
            {"a": "Did Marco pay Giulia back?", "b": "Did Giulia pay Marco back?", "kind": "swapped_roles"},
            {"a": "Is the pool heated?", "b": "Is the pool unheated?", "kind": "my own kind"},
        ]}), encoding="utf-8")
    return path


def test_a_kind_the_tool_does_not_know_counts_toward_the_false_hit_rate(tmp_path: Path) -> None:
    pairs = load_pairs(write_pairs(tmp_path))
    assert [(p.kind, p.should_hit) for p in pairs] == [("paraphrase", True), ("swapped_roles", False),
                                                        ("my own kind", False)]
    vectors = vectors_for([(p.a, p.b, 0.97) for p in pairs])
    row = evaluate(pairs, vectors, 0.90, guards=False)
    assert row.should_hit == 1.0
    assert row.traps == 1.0, "both near misses of unknown kinds were served and must count"
    assert row.by_kind == {"my own kind": 1.0, "paraphrase": 1.0, "swapped_roles": 1.0}


def test_the_verifier_refuses_what_the_threshold_passes(tmp_path: Path) -> None:
    pairs = load_pairs(write_pairs(tmp_path))
    vectors = vectors_for([(p.a, p.b, 0.97) for p in pairs])
    verdicts = np.array([0.99, 0.10, 0.95], dtype=np.float32)
    row = evaluate(pairs, vectors, 0.90, False, verdicts, verifier_threshold=0.96)
    assert row.verifier and row.should_hit == 1.0 and row.traps == 0.0
    below = evaluate(pairs, vectors, 0.98, False, verdicts, verifier_threshold=0.5)  # cosine 0.97 < 0.98
    assert below.should_hit == 0.0 and below.traps == 0.0


@pytest.mark.models
def test_several_pairs_files_are_measured_as_one_set(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from fleet.commands.cache_eval import main

    resolve_or_skip(built_registry(), "int8")
    second = tmp_path / "second.json"
    second.write_text(json.dumps({"paraphrases": [{"a": "Where is my parcel?", "b": "Where's my parcel?"}],
                                  "near_misses": [{"a": "Is the gym open?", "b": "Is the gym closed?",
                                                   "kind": "opposite words"}]}), encoding="utf-8")
    main(["--pairs", str(write_pairs(tmp_path)), str(second), "--json"])
    shipped = json.loads(capsys.readouterr().out)["shipped"]
    assert set(shipped["by_kind"]) == {"paraphrase", "swapped_roles", "my own kind", "opposite words"}
    assert shipped["should_hit"] in (0.0, 0.5, 1.0) and shipped["traps"] in (0.0, 1 / 3, 2 / 3, 1.0)


def test_a_pair_with_a_text_the_encoder_cannot_read_is_never_served(tmp_path: Path) -> None:
    pairs = load_pairs(write_pairs(tmp_path))
    vectors = vectors_for([(p.a, p.b, 0.999) for p in pairs])
    row = evaluate(pairs, vectors, 0.90, guards=False, unreadable=frozenset({pairs[1].b}))
    assert row.should_hit == 1.0
    assert row.by_kind["swapped_roles"] == 0.0 and row.by_kind["my own kind"] == 1.0


def test_the_chinese_pair_set_has_both_splits_every_trap_kind_and_the_articles_own_pair() -> None:
    from fleet.commands.pair_eval import PAIRS_PATH

    pairs = load_pairs(PAIRS_PATH.with_name("semantic_pairs_zh.json"))
    kinds = {(p.kind, p.split) for p in pairs if not p.should_hit}
    assert kinds == {(kind, split) for kind in ("negation", "entity", "number", "time", "opposite")
                     for split in ("dev", "holdout")}
    assert sum(p.should_hit and p.split == "holdout" for p in pairs) >= 40
    assert any(p.should_hit and (p.a, p.b) == ("今天天气怎么样", "今天天气如何") for p in pairs)
    assert any(not p.should_hit and (p.a, p.b) == ("今天天气怎么样", "明天天气怎么样") for p in pairs)
    assert len({(p.a, p.b) for p in pairs}) == len(pairs)


@pytest.mark.models
def test_minilm_reads_no_chinese_pair_so_none_is_served(capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from fleet.commands.cache_eval import main
    from fleet.commands.pair_eval import PAIRS_PATH

    resolve_or_skip(built_registry(), "int8")
    monkeypatch.setenv("FLEET_SEMANTIC_ENCODER_MODEL", "minilm-embed")
    main(["--pairs", str(PAIRS_PATH.with_name("semantic_pairs_zh.json")), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert report["unreadable_pairs"] == 210 and report["encoder_why"] == ""
    assert report["shipped"]["traps"] == 0.0 and all(row["traps"] == 0.0 for row in report["rows"])


@pytest.mark.models
def test_unnamed_the_encoder_is_one_that_reads_the_pairs_and_the_chinese_targets_hold(
        capsys: pytest.CaptureFixture[str]) -> None:
    from fleet.commands.cache_eval import main
    from fleet.commands.pair_eval import PAIRS_PATH

    registry = built_registry()
    resolve_or_skip(registry, "int8")
    if not registry.versions("cache-verifier-multilingual") or not registry.versions("e5-embed"):
        pytest.skip("e5-embed or cache-verifier-multilingual not built; run scripts/build-models")
    status = main(["--pairs", str(PAIRS_PATH.with_name("semantic_pairs_zh.json")), "--holdout", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert report["encoder"].startswith("e5-embed") and "minilm-embed cannot read" in report["encoder_why"]
    assert report["verifier"].startswith("cache-verifier-multilingual") and report["unreadable_pairs"] == 0
    assert report["shipped"]["should_hit"] >= 0.40 and report["shipped"]["traps"] <= 0.01 and status == 0


@pytest.mark.models
def test_with_the_verifier_off_the_cosine_threshold_and_every_guard_check_decide(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from fleet.commands.cache_eval import main
    from workers import GUARD_CHECKS, SEMANTIC_THRESHOLD

    resolve_or_skip(built_registry(), "int8")
    monkeypatch.setenv("FLEET_SEMANTIC_VERIFIER", "false")
    main(["--by-guard", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert report["verifier"] is None and report["threshold"] == SEMANTIC_THRESHOLD
    assert report["running"] == [name for name, _ in GUARD_CHECKS]
