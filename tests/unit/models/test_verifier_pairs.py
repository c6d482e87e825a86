"""The verifier's generated pairs: every kind is produced, traps really change the text in the
way their kind says, should-hit pairs keep the question, and the splits share no template."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from models.build import verifier_lexicon as lex
from models.build.verifier_pairs import (
    SHOULD_HIT_KINDS,
    TRAP_KINDS,
    Vocabulary,
    change_date,
    change_entity,
    change_number,
    generate_pairs,
    negate,
    near_repeat,
)
from models.build.verifier_templates import TEMPLATES


@pytest.fixture(scope="module")
def train() -> list:
    return generate_pairs("train")


def test_every_kind_is_generated_in_both_splits(train: list) -> None:
    calibration = generate_pairs("calibration")
    for pairs in (train, calibration):
        kinds = Counter(pair.kind for pair in pairs)
        assert set(kinds) == set(SHOULD_HIT_KINDS) | set(TRAP_KINDS), kinds
        assert all(count >= 10 for count in kinds.values()), kinds
    hits = sum(pair.should_hit for pair in train)
    assert 0.3 < hits / len(train) < 0.6  # neither class swamps the other


def test_generation_is_deterministic() -> None:
    assert generate_pairs("calibration") == generate_pairs("calibration")


def test_no_pair_is_two_identical_texts(train: list) -> None:
    assert all(pair.a != pair.b for pair in train)


def test_the_splits_hold_out_whole_templates() -> None:
    splits = {lex.split_of(forms) for forms in TEMPLATES}
    assert splits == {"train", "calibration"}
    train_texts = {text for pair in generate_pairs("train") for text in (pair.a, pair.b)}
    held = [forms[0].split("{")[0] for forms in TEMPLATES if lex.split_of(forms) == "calibration"]
    assert not any(text.startswith(prefix) and len(prefix) > 12 for prefix in held for text in train_texts)


def test_antonyms_of_the_calibration_split_never_appear_in_training_traps(train: list) -> None:
    held = set(lex.in_split(tuple(dict.fromkeys(lex.ANTONYMS)), "calibration")) - \
        set(lex.in_split(tuple(dict.fromkeys(lex.ANTONYMS)), "train"))
    assert held
    trained = Vocabulary.of("train").antonyms
    assert not held & set(trained)


def test_negation_adds_or_removes_a_negation() -> None:
    rng = random.Random(0)
    assert negate("Is the pool open on Monday?", rng) in ("Isn't the pool open on Monday?",)
    assert "not" in (negate("Can we park here?", random.Random(3)) or "") or \
        "n't" in (negate("Can we park here?", random.Random(3)) or "")
    assert negate("Why can't I log in?", rng) == "Why can I log in?"
    assert negate("Hello world", rng) is None  # nothing to negate


def test_number_date_and_entity_traps_change_exactly_that() -> None:
    rng = random.Random(1)
    changed = change_number("Can I return it after 30 days?", rng)
    assert changed is not None and "30" not in changed and changed.startswith("Can I return it after ")
    day = change_date("Is it open on Sunday?", rng)
    assert day is not None and "Sunday" not in day and any(d in day for d in lex.WEEKDAYS)
    swapped = change_entity("When is the next flight from Paris to Rome?", random.Random(2), Vocabulary.of("train"))
    assert swapped is not None and swapped != "When is the next flight from Paris to Rome?"


def test_near_repeats_keep_the_words() -> None:
    rng = random.Random(4)
    for _ in range(50):
        repeat = near_repeat("How many books can I borrow at once?", rng)
        words = set(repeat.lower().replace("?", " ").split())
        assert len(words & {"books", "borrow", "once"}) >= 2, repeat
