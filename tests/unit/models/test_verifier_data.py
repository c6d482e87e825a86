"""The verifier's data set: the project's pairs join the generator's trap kinds; the threshold is
calibrated on written sets kept out of training, and the honest sets are in neither."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from models.build.verifier_data import load_verifier_dataset, pairs_digest, project_pairs
from models.build.verifier_pairs import PairExample


def test_the_project_trap_kinds_are_the_generators(tmp_path: Path) -> None:
    pairs = tmp_path / "pairs.json"
    pairs.write_text(json.dumps({
        "paraphrases": [{"a": "Is it open?", "b": "Is it open now?", "split": "holdout"}],
        "near_misses": [{"a": "Is it open?", "b": "Is it closed?", "kind": "opposite", "split": "holdout"},
                        {"a": "Is it open?", "b": "Isn't it open?", "kind": "negation", "split": "holdout"},
                        {"a": "Open at 9?", "b": "Open at 10?", "kind": "number", "split": "dev"},
                        {"a": "Is it open?", "b": "Is it purple?", "kind": "colour", "split": "holdout"}]}))
    held = project_pairs(pairs, "holdout")
    assert [(p.kind, p.should_hit) for p in held] == [("paraphrase", True), ("antonym", False), ("negation", False),
                                                      ("colour", False)]
    assert [p.kind for p in project_pairs(pairs, "dev")] == ["number"]


def test_the_threshold_is_calibrated_on_written_sets_the_model_never_trains_on() -> None:
    dataset = load_verifier_dataset()
    traps = [pair for pair in dataset.heldout if not pair.should_hit]
    assert len(traps) >= 300 and sum(pair.should_hit for pair in dataset.heldout) >= 300
    # one trap served moves the calibrated false-hit rate by under 1/300
    trained = {(pair.a, pair.b) for pair in dataset.train}
    assert not any((pair.a, pair.b) in trained for pair in dataset.heldout)
    assert {"negation", "antonym", "entity", "number", "scope"} <= {pair.kind for pair in traps}
    assert dataset.version.startswith("verifier-pairs-v3 sha256:")


def test_no_written_text_is_one_of_the_honest_sets_texts() -> None:
    """The honest sets (tests/data/outsider_pairs_{5,6,7}.json) are in no training or calibration set:
    not even one of their questions written again (models/build/written_pairs.py removed those by
    embedding; this checks the exact repeats without one)."""
    from models.build.written_pairs import HONEST_SETS, pair_texts, written_sets
    from models.same_question import normal_form

    honest = {normal_form(text) for path in HONEST_SETS for text in pair_texts(json.loads(path.read_text()))}
    for path in (*written_sets("train"), *written_sets("calibration")):
        repeated = [text for text in pair_texts(json.loads(path.read_text())) if normal_form(text) in honest]
        assert not repeated, (path.name, repeated[:3])


def test_the_third_written_set_covers_every_trap_kind_of_the_issue() -> None:
    from fleet.commands.pair_eval import load_pairs
    from models.build.written_pairs import WRITTEN_DIR

    pairs = load_pairs(WRITTEN_DIR / "train" / "outsider_pairs_3.json")
    traps = Counter(pair.kind for pair in pairs if not pair.should_hit)
    assert sum(pair.should_hit for pair in pairs) >= 40 and sum(traps.values()) >= 60
    assert {"negation", "antonym", "entity", "number", "date", "scope"} <= set(traps), traps
    assert len({(pair.a, pair.b) for pair in pairs}) == len(pairs) and all(pair.a != pair.b for pair in pairs)


def test_the_data_version_names_the_pairs_not_the_code_that_made_them() -> None:
    pair, trap = PairExample("怎么退款", "如何退款", "paraphrase", "train"), PairExample("a", "b", "negation", "train")
    assert pairs_digest([pair, trap], []) == pairs_digest([PairExample("怎么退款", "如何退款", "paraphrase", "train"), trap], [])
    assert pairs_digest([pair, trap], []) != pairs_digest([trap, pair], [])
    assert pairs_digest([pair], [trap]) != pairs_digest([pair, trap], []), "a pair moved to the held-out side"
    assert pairs_digest([pair], []) != pairs_digest([PairExample("怎么退款", "如何退款", "negation", "train")], [])
    dataset = load_verifier_dataset()
    assert dataset.version.endswith(pairs_digest(dataset.train, dataset.heldout)), "the probe is not in it"
