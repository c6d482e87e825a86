"""The verifier's pairs from the faq-intent data: a question's most alike question of its own intent
should hit, its two most alike of other intents are traps."""

from __future__ import annotations

from models.build.faq_data import Example
from models.build.verifier_faq_pairs import faq_pairs, neighbour_pairs

EXAMPLES = [Example("turn on two step login", 0), Example("enable two step login please", 0),
            Example("turn off two step login", 1), Example("stop asking me for a login code", 1),
            Example("where is my parcel", 2)]


def test_each_question_gets_its_nearest_same_intent_question_and_two_hard_traps() -> None:
    pairs = [p for p in neighbour_pairs(EXAMPLES, "train") if p.b == "turn on two step login"]
    assert [(p.a, p.kind, p.should_hit) for p in pairs] == [
        ("enable two step login please", "paraphrase", True),
        ("turn off two step login", "topic", False),  # three words of five shared: the hardest trap first
        ("stop asking me for a login code", "topic", False)]


def test_only_the_requested_split_is_used_and_every_trap_crosses_intents() -> None:
    train, test = faq_pairs("train"), faq_pairs("test")
    assert {p.split for p in train} == {"train"} and {p.split for p in test} == {"test"}
    assert not {p.b for p in train} & {p.b for p in test}
    assert sum(p.should_hit for p in train) * 2 == sum(not p.should_hit for p in train)
