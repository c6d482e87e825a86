"""Verifier pairs from the faq-intent data (models/build/data/faq-intents-v1.json): two
questions of one intent need the same answer, two of different intents do not.

The written sets' traps change a word or two ("cancel" / "track my order"). The FAQ's
neighbouring intents are worded apart and still need other answers ("turn on login
verification codes" / "I want to stop getting verification codes when I log in"): at recall
0.55 the verifier trained without them served 18% of a question's nearest other-intent
neighbours. Each training question is paired with its most alike question of its own intent
and its two most alike of other intents, alike by shared words, so the traps are the hard
ones. Only the `train` split is used; the `test` split stays for measuring.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from models.build.faq_data import Example, load_faq_dataset
from models.build.verifier_pairs import PairExample

_WORD = re.compile(r"\w+")
SAME_PER_QUESTION = 1
OTHER_PER_QUESTION = 2


def faq_pairs(split: str = "train") -> list[PairExample]:
    dataset = load_faq_dataset()
    examples = dataset.train if split == "train" else dataset.test
    return neighbour_pairs(examples, split)


def neighbour_pairs(examples: Sequence[Example], split: str) -> list[PairExample]:
    words = [frozenset(_WORD.findall(example.text.lower())) for example in examples]
    pairs: list[PairExample] = []
    for i, example in enumerate(examples):
        alike = sorted((j for j in range(len(examples)) if j != i),
                       key=lambda j: (-_jaccard(words[i], words[j]), j))
        same = [j for j in alike if examples[j].label == example.label][:SAME_PER_QUESTION]
        other = [j for j in alike if examples[j].label != example.label][:OTHER_PER_QUESTION]
        pairs += [PairExample(examples[j].text, example.text, "paraphrase", split) for j in same]
        pairs += [PairExample(examples[j].text, example.text, "topic", split) for j in other]
    return pairs


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 0.0
