"""The words the semantic cache's guards read, one data file per language.

The guards' rules (guards.py, related_entities.py, role_swap.py) hold in every language; the
words each rule reads do not ("not", "enable"/"disable", "fridge"/"freezer", 三 = 3). Those live
in `data/guard-words/<language>.json`, and every file there is read once at import and merged
into one `GuardWords`: a text is checked against every language's words, so a language is added
by adding a file, with no code and no setting. Each key is optional; an unknown key is refused,
so a misspelt key fails loudly instead of silently dropping a rule. The English file also holds
the verifier's pair generator's words (key "pair_generator"), which the guards do not read.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any

DIRECTORY = Path(__file__).resolve().parent / "data" / "guard-words"
# Keys of a language file the guards do not read: its note, and the words the verifier's pair
# generator draws on (models/build/verifier_lexicon.py), kept beside the guards' so that a
# language's words are in one file.
NOT_THE_GUARDS = frozenset({"about", "pair_generator"})

Side = frozenset[str]


@dataclass(frozen=True)
class GuardWords:
    """Every language's guard words, merged: sets joined, ordered lists concatenated (in file name
    order, where the first match names the reason), tables merged."""

    negations: frozenset[str] = frozenset()
    negating_suffixes: tuple[str, ...] = ()  # "n't"
    negating_prefixes: tuple[str, ...] = ()  # "un" + "authorized"
    phrases: tuple[tuple[str, str], ...] = ()  # (regex, the token it folds into) before tokenising
    opposites: tuple[tuple[Side, Side], ...] = ()
    critical: Mapping[str, frozenset[str]] = field(default_factory=lambda: MappingProxyType({}))
    exclusive: Mapping[str, frozenset[str]] = field(default_factory=lambda: MappingProxyType({}))
    currency_words: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    number_words: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    number_scales: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    number_joiners: frozenset[str] = frozenset()  # "twenty AND five"
    not_a_count_alone: frozenset[str] = frozenset()  # a lone "one" (一) is a pronoun far more often than a count
    numeral_digits: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))  # 三 = 3
    numeral_units: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))  # 百 = 100
    times_of_day: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))  # noon = 12:00pm
    not_proper_nouns: frozenset[str] = frozenset()  # capitalised, yet no name ("I", "OK")
    related_entities: tuple[tuple[str, ...], ...] = ()  # groups of siblings; "a|b" spells one member two ways
    related_place_words: frozenset[str] = frozenset()  # "Chrome bookmarks IN Firefox"
    direction_words: frozenset[str] = frozenset()  # "from", "to", "into"
    role_stop_words: frozenset[str] = frozenset()  # words too common to be a role

    def merged(self, other: GuardWords) -> GuardWords:
        return GuardWords(**{f.name: _join(getattr(self, f.name), getattr(other, f.name)) for f in fields(GuardWords)})


def load_guard_words(directory: Path = DIRECTORY) -> GuardWords:
    """Every `*.json` language file of `directory`, merged in file name order."""
    words = GuardWords()
    for path in sorted(directory.glob("*.json")):
        words = words.merged(parse_language(path))
    return words


def parse_language(path: Path) -> GuardWords:
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a guard-words file holds one JSON object, not {type(data).__name__}")
    unknown = sorted(set(data) - set(_PARSE) - NOT_THE_GUARDS)
    if unknown:
        raise ValueError(f"{path}: unknown guard-words key(s) {unknown}; known keys: {sorted(_PARSE)}")
    try:
        return GuardWords(**{key: _PARSE[key](value) for key, value in data.items() if key not in NOT_THE_GUARDS})
    except (TypeError, ValueError, KeyError, AttributeError) as error:
        raise ValueError(f"{path}: malformed guard words: {error}") from error


def inflections(*bases: str) -> frozenset[str]:
    """Crude inflections of each base (enable -> enables, enabled, enabling); over-generation is harmless."""
    out: set[str] = set()
    for base in bases:
        stem = base[:-1] if base.endswith("e") else base
        out |= {base, base + "s", base + "es", base + "d", base + "ed", stem + "ed", stem + "ing",
                base + base[-1] + "ed", base + base[-1] + "ing", base[:-1] + "ies" if base.endswith("y") else base,
                base[:-1] + "ied" if base.endswith("y") else base}
    return frozenset(out)


def _side(value: Mapping[str, list[str]]) -> Side:
    unknown = set(value) - {"inflect", "words"}
    if unknown:
        raise ValueError(f"an opposite's side takes 'inflect' and 'words', not {sorted(unknown)}")
    return inflections(*value.get("inflect", ())) | frozenset(value.get("words", ()))


def _opposites(value: list[Mapping[str, Any]]) -> tuple[tuple[Side, Side], ...]:
    for pair in value:
        if set(pair) - {"one", "other", "why"}:
            raise ValueError(f"an opposite takes 'one', 'other' and 'why', not {sorted(set(pair))}")
    return tuple((_side(pair["one"]), _side(pair["other"])) for pair in value)


def _groups(value: Mapping[str, list[list[str]]]) -> tuple[tuple[str, ...], ...]:
    # Sections ("home and appliances", "money") only help a reader; the rule reads the groups.
    return tuple(tuple(group) for section in value.values() for group in section)


def _words(value: list[str]) -> frozenset[str]:
    return frozenset(_strings(value))


def _strings(value: list[str]) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise TypeError(f"expected a list of strings, got {value!r:.80}")
    return tuple(value)


def _vocabularies(value: Mapping[str, list[str]]) -> Mapping[str, frozenset[str]]:
    return MappingProxyType({kind: _words(words) for kind, words in value.items()})


def _table(value: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(value))


_PARSE: dict[str, Callable[[Any], Any]] = {
    "negations": _words, "negating_suffixes": _strings, "negating_prefixes": _strings,
    "phrases": lambda value: tuple((pattern, token) for pattern, token in value),
    "opposites": _opposites, "critical": _vocabularies, "exclusive": _vocabularies,
    "currency_words": _table, "number_words": _table, "number_scales": _table, "number_joiners": _words,
    "not_a_count_alone": _words, "numeral_digits": _table, "numeral_units": _table, "times_of_day": _table,
    "not_proper_nouns": _words, "related_entities": _groups, "related_place_words": _words,
    "direction_words": _words, "role_stop_words": _words,
}


def _join(a: Any, b: Any) -> Any:
    if isinstance(a, frozenset):
        return a | b
    if isinstance(a, tuple):
        return a + tuple(item for item in b if item not in a)
    return _merge_tables(a, b)


def _merge_tables(a: Mapping[str, Any], b: Mapping[str, Any]) -> Mapping[str, Any]:
    # A kind both languages name (critical "month") holds both languages' words.
    out = dict(a)
    for key, value in b.items():
        out[key] = out[key] | value if key in out and isinstance(value, frozenset) else value
    return MappingProxyType(out)


# Read once at import and never changed: the packaged files are the only source.
WORDS = load_guard_words()
