"""Word lists the verifier's pair generator draws on (models/build/verifier_pairs.py).

The words are data, in the English file the semantic cache's guards read too
(workers/cache/data/guard-words/en.json, key "pair_generator"): one file per language for the
guard and the build. Each list is split by a stable hash of its entry into a training part and a
calibration part (`split_of`), so the threshold is calibrated on antonyms, entities and templates
the model never saw while training: a measure of how it does on words outside these lists.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

WORDS_FILE = Path(__file__).resolve().parents[2] / "workers" / "cache" / "data" / "guard-words" / "en.json"
_WORDS: dict[str, Any] = json.loads(WORDS_FILE.read_text(encoding="utf-8"))["pair_generator"]


def _groups(key: str) -> tuple[tuple[str, ...], ...]:
    return tuple(tuple(group) for group in _WORDS[key])


ANTONYMS = _groups("antonyms")  # pairs whose swap changes the answer
MORPH_NEGATIONS = _groups("morph_negations")  # negation inside a word (un-, in-, dis-, non-) or spelt out next to it
SYNONYMS = _groups("synonyms")  # words that may replace each other without changing the answer
ENTITY_CLASSES: dict[str, tuple[str, ...]] = {kind: tuple(names) for kind, names in _WORDS["entity_classes"].items()}
WEEKDAYS: tuple[str, ...] = tuple(_WORDS["weekdays"])
MONTHS: tuple[str, ...] = tuple(_WORDS["months"])
RELATIVE_DAYS: tuple[str, ...] = tuple(_WORDS["relative_days"])
UNITS = _groups("units")  # units of one quantity: swapping one for another changes the answer
SCOPE_SWAPS = _groups("scope_swaps")  # a word that narrows or widens what the question covers, swapped
SCOPE_INSERTS: tuple[str, ...] = tuple(_WORDS["scope_inserts"])  # ... or inserted
FILLERS_BEFORE: tuple[str, ...] = tuple(_WORDS["fillers_before"])
FILLERS_AFTER: tuple[str, ...] = tuple(_WORDS["fillers_after"])


def split_of(entry: object, calibration_share: float = 0.25) -> str:
    """'train' or 'calibration', stable across runs and machines (a hash, not Python's seeded hash())."""
    digest = hashlib.sha256(repr(entry).encode("utf-8")).digest()
    return "calibration" if digest[0] / 256 < calibration_share else "train"


def in_split(entries: tuple[T, ...], split: str) -> tuple[T, ...]:
    """The entries of one split; 'all' keeps every entry."""
    return entries if split == "all" else tuple(entry for entry in entries if split_of(entry) == split)
