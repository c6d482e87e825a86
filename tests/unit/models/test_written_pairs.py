"""Removing from a written pair set the pairs that come near a text of the honest sets."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

from models.build.written_pairs import GROUPS, HonestTexts, decontaminate, written_sets
from models.same_question import normal_form

TEXTS = ["How do I cancel my order?", "How can I cancel an order?", "Where is my parcel?", "Is the gym open today?",
         "Is the gym closed today?"]


def embed(texts: list[str]) -> npt.NDArray[np.float32]:
    """One direction per text of TEXTS; the first two nearly the same (cosine 0.995)."""
    rows = np.zeros((len(texts), len(TEXTS)), dtype=np.float32)
    for row, text in enumerate(texts):
        rows[row, TEXTS.index(text)] = 1.0
        if text == TEXTS[1]:
            rows[row] = [0.995, 0.0999, 0, 0, 0]
    return rows


def test_a_pair_with_either_text_near_an_honest_text_is_removed() -> None:
    data = {"about": "x", "paraphrases": [{"a": TEXTS[1], "b": TEXTS[2], "kind": "paraphrase"}],
            "near_misses": [{"a": TEXTS[3], "b": TEXTS[4], "kind": "antonym"}]}
    clean, removed = decontaminate(data, HonestTexts.of([TEXTS[0]], embed), embed)
    assert removed == 1
    assert clean["paraphrases"] == [] and clean["near_misses"] == data["near_misses"]
    assert "1 pairs" in clean["decontaminated"]


def test_a_text_equal_to_an_honest_text_once_hyphens_and_case_are_set_aside_is_removed() -> None:
    data = {"paraphrases": [{"a": "Can I get a late CHECKOUT", "b": TEXTS[2], "kind": "paraphrase"}], "near_misses": []}
    far = HonestTexts(np.zeros((0, len(TEXTS)), dtype=np.float32), frozenset())
    honest = HonestTexts(far.rows, frozenset({normal_form("Can I get a late check-out?")}))
    assert decontaminate(data, far, lambda texts: embed([TEXTS[2]] * len(texts)))[1] == 0
    assert decontaminate(data, honest, lambda texts: embed([TEXTS[2]] * len(texts)))[1] == 1


def test_nothing_is_removed_when_no_text_comes_near() -> None:
    data = {"paraphrases": [{"a": TEXTS[3], "b": TEXTS[4], "kind": "paraphrase"}], "near_misses": []}
    clean, removed = decontaminate(data, HonestTexts.of([TEXTS[2]], embed), embed)
    assert removed == 0 and clean["paraphrases"] == data["paraphrases"]


def test_the_groups_hold_the_shipped_sets_and_an_unknown_group_is_refused() -> None:
    assert len(written_sets("train")) == 20 and len(written_sets("calibration")) == 4
    assert GROUPS == ("train", "calibration")
    with pytest.raises(ValueError, match="unknown group"):
        written_sets("test")
