"""The guards' words are data, one file per language: every file is read and merged, an unknown
key is refused, and the packaged files ship and hold English and Chinese."""

from __future__ import annotations

import json
import tomllib
from dataclasses import fields
from fnmatch import fnmatch
from pathlib import Path

import pytest

from tests.paths import REPO_ROOT
from workers.cache.guard_words import DIRECTORY, NOT_THE_GUARDS, WORDS, GuardWords, inflections, load_guard_words


def write(directory: Path, name: str, words: dict[str, object]) -> None:
    directory.mkdir(exist_ok=True)
    (directory / name).write_text(json.dumps({"about": "test words", **words}, ensure_ascii=False), encoding="utf-8")


def test_two_language_files_are_merged(tmp_path: Path) -> None:
    write(tmp_path, "en.json", {
        "negations": ["not", "never"], "negating_prefixes": ["un", "in"],
        "opposites": [{"one": {"inflect": ["enable"]}, "other": {"words": ["off"]}}],
        "critical": {"month": ["june"]}, "number_words": {"two": 2},
        "related_entities": {"home": [["fridge|refrigerator", "freezer"]]}})
    write(tmp_path, "de.json", {
        "negations": ["nicht", "not"], "negating_prefixes": ["un", "miss"],
        "opposites": [{"one": {"words": ["ein"]}, "other": {"words": ["aus"]}}],
        "critical": {"month": ["juni"], "country": ["deutschland"]}, "number_words": {"zwei": 2},
        "related_entities": {"haus": [["Kühlschrank", "Gefrierschrank"]]}})
    words = load_guard_words(tmp_path)
    assert words.negations == {"not", "never", "nicht"}
    assert words.negating_prefixes == ("un", "miss", "in")  # file name order: de before en, no repeats
    assert words.opposites == ((frozenset({"ein"}), frozenset({"aus"})),
                               (inflections("enable"), frozenset({"off"})))
    assert "enabled" in words.opposites[1][0] and "enabling" in words.opposites[1][0]
    assert dict(words.critical) == {"month": {"june", "juni"}, "country": {"deutschland"}}
    assert dict(words.number_words) == {"two": 2, "zwei": 2}
    assert words.related_entities == (("Kühlschrank", "Gefrierschrank"), ("fridge|refrigerator", "freezer"))
    assert words.direction_words == frozenset(), "a key no file names is empty"


def test_a_language_file_with_an_unknown_key_is_refused(tmp_path: Path) -> None:
    write(tmp_path, "fr.json", {"negations": ["ne", "pas"], "negatoins": ["jamais"]})
    with pytest.raises(ValueError, match=r"fr\.json: unknown guard-words key\(s\) \['negatoins'\]; known keys:"):
        load_guard_words(tmp_path)


def test_a_malformed_value_is_refused_with_its_file(tmp_path: Path) -> None:
    write(tmp_path, "fr.json", {"negations": "pas"})
    with pytest.raises(ValueError, match=r"fr\.json: malformed guard words"):
        load_guard_words(tmp_path)


def test_every_field_has_a_key_in_the_packaged_files() -> None:
    """Each field is read from one key of the same name, and the packaged files use every key."""
    keys = {key for path in DIRECTORY.glob("*.json") for key in json.loads(path.read_text(encoding="utf-8"))}
    assert keys == {f.name for f in fields(GuardWords)} | NOT_THE_GUARDS


def test_the_packaged_files_hold_english_and_chinese() -> None:
    assert {path.name for path in DIRECTORY.glob("*.json")} >= {"en.json", "zh.json"}
    for path in DIRECTORY.glob("*.json"):
        assert json.loads(path.read_text(encoding="utf-8"))["about"], f"{path.name} says what it is"
    assert WORDS == load_guard_words()
    assert {"not", "without"} <= WORDS.negations and "disabled" in WORDS.opposites[0][1]
    assert WORDS.numeral_digits["三"] == 3 and WORDS.numeral_units["百"] == 100
    assert {"one", "一"} <= WORDS.not_a_count_alone
    assert any("fridge|refrigerator" in group for group in WORDS.related_entities)


def test_the_word_files_ship_in_the_wheel() -> None:
    package_data = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"][
        "package-data"]["workers.cache"]
    package = REPO_ROOT / "workers" / "cache"
    for path in DIRECTORY.glob("*.json"):
        relative = path.relative_to(package).as_posix()
        assert any(fnmatch(relative, pattern) for pattern in package_data), f"{relative} is not package data"


def test_the_verifiers_pair_generator_reads_its_words_from_the_same_file(tmp_path: Path) -> None:
    from models.build import verifier_lexicon

    assert verifier_lexicon.WORDS_FILE == DIRECTORY / "en.json"
    assert ("enable", "disable") in verifier_lexicon.ANTONYMS and "Tokyo" in verifier_lexicon.ENTITY_CLASSES["city"]
    write(tmp_path, "en.json", {"pair_generator": {"antonyms": [["up", "down"]]}, "negations": ["not"]})
    assert load_guard_words(tmp_path) == GuardWords(negations=frozenset({"not"})), "the guards do not read it"
    write(tmp_path, "en.json", {"pair_generatr": {}})
    with pytest.raises(ValueError, match="unknown guard-words key"):
        load_guard_words(tmp_path)
