"""The verifier's data set: the project's pairs join the generator's trap kinds, so that the
calibration's mean over kinds weighs no kind of a handful of pairs."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from models.build.verifier_data import load_verifier_dataset, project_pairs
from models.build.verifier_pairs import SHOULD_HIT_KINDS, TRAP_KINDS


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


def test_every_held_out_kind_is_a_known_kind_with_enough_pairs() -> None:
    dataset = load_verifier_dataset()
    kinds = Counter(pair.kind for pair in dataset.heldout)
    assert set(kinds) <= set(SHOULD_HIT_KINDS) | set(TRAP_KINDS), kinds
    assert min(kinds.values()) >= 30, kinds  # one pair moves a kind's rate by at most 1/30
    assert dataset.version.startswith("verifier-pairs-v2 sha256:")


def test_the_third_outsider_set_covers_every_trap_kind_of_the_issue() -> None:
    from fleet.commands.cache_eval import load_pairs
    from tests.paths import REPO_ROOT

    pairs = load_pairs(REPO_ROOT / "tests" / "data" / "outsider_pairs_3.json")
    traps = Counter(pair.kind for pair in pairs if not pair.should_hit)
    assert sum(pair.should_hit for pair in pairs) >= 40 and sum(traps.values()) >= 60
    assert {"negation", "antonym", "entity", "number", "date", "scope"} <= set(traps), traps
    assert len({(pair.a, pair.b) for pair in pairs}) == len(pairs) and all(pair.a != pair.b for pair in pairs)
