"""Pairs the cache verifier learns from: should-hit pairs (paraphrase forms of one template,
synonyms, near repeats) and traps (negation, antonym, entity, number, date, unit, scope,
topic: another question of the same domain).

Everything is generated from the templates and word lists, deterministically from a seed,
and per split: `generate_pairs("train")` uses only training templates and training entries
of every word list; `generate_pairs("calibration")` only the held-out ones. The threshold
calibrated on the second is therefore measured on templates and words the model never saw.
"""

from __future__ import annotations

import functools
import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from models.build import verifier_lexicon as lex
from models.build.verifier_templates import TEMPLATES, TOPIC_NEIGHBOURS

SHOULD_HIT_KINDS = ("paraphrase", "synonym", "near_repeat")
TRAP_KINDS = ("negation", "antonym", "entity", "number", "date", "unit", "scope", "topic")


@dataclass(frozen=True)
class PairExample:
    a: str
    b: str
    kind: str
    split: str

    @property
    def should_hit(self) -> bool:
        return self.kind in SHOULD_HIT_KINDS


@dataclass(frozen=True)
class Vocabulary:
    """The word lists of one split."""

    antonyms: tuple[tuple[str, str], ...]
    synonyms: tuple[tuple[str, ...], ...]
    entities: dict[str, tuple[str, ...]]
    units: tuple[tuple[str, ...], ...]
    scope_swaps: tuple[tuple[str, str], ...]
    morph_negations: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, split: str) -> Vocabulary:
        # Entities and units keep every entry: a swap needs two of a class, and a name seen in
        # training teaches nothing about the next name beyond "a name changed".
        return cls(lex.in_split(tuple(dict.fromkeys(lex.ANTONYMS)), split), lex.in_split(lex.SYNONYMS, split),
                   dict(lex.ENTITY_CLASSES), lex.UNITS, lex.in_split(lex.SCOPE_SWAPS, split),
                   lex.in_split(lex.MORPH_NEGATIONS, split))


_AUX_NEGATIONS = {
    "is": "isn't", "are": "aren't", "was": "wasn't", "can": "can't", "could": "couldn't", "should": "shouldn't",
    "will": "won't", "would": "wouldn't", "does": "doesn't", "do": "don't", "did": "didn't", "has": "hasn't",
    "have": "haven't", "must": "mustn't", "am": "am not",
}
_WORD = re.compile(r"[A-Za-z][A-Za-z'/-]*")


@functools.lru_cache(maxsize=None)
def _word_pattern(word: str) -> re.Pattern[str]:
    # Compiled once per word: the lists hold more words than re's own cache keeps.
    return re.compile(rf"(?<![A-Za-z]){re.escape(word)}(?![A-Za-z])", flags=re.IGNORECASE)


def _sub_word(text: str, old: str, new: str) -> str | None:
    """`text` with the first whole-word, case-insensitive `old` replaced by `new` (its capital kept); None if absent."""
    match = _word_pattern(old).search(text)
    if match is None:
        return None
    found = match.group(0)
    replacement = new[:1].upper() + new[1:] if found[:1].isupper() else new
    return text[:match.start()] + replacement + text[match.end():]


def negate(text: str, rng: random.Random, vocab: Vocabulary | None = None) -> str | None:
    """Half of the time a negation inside a word where the text has one of the list (unable, not
    included...); else add a spelt-out negation at the first auxiliary, or remove the one the text has."""
    if vocab is not None and rng.random() < 0.5:
        inside = _swap_from(text, vocab.morph_negations, rng)
        if inside is not None:
            return inside
    for negative in ("n't", " not", " never"):
        if negative in text:
            plain = text.replace("can't", "can").replace("won't", "will").replace("n't", "").replace(" not", "")
            return plain.replace(" never", " always") if plain != text else None
    for position, word in enumerate(_WORD.findall(text)):
        negative = _AUX_NEGATIONS.get(word.lower())
        if negative is not None:
            # "Isn't it", but "it is not": a spelt-out "not" goes after the subject in a question.
            if position > 0 and rng.random() < 0.5 and " " not in negative:
                negative = negative.replace("n't", " not").replace("can not", "cannot").replace("wo not", "will not")
            return _sub_word(text, word, negative)
    return None


def _swap_from(text: str, groups: tuple[tuple[str, ...], ...], rng: random.Random) -> str | None:
    """Replace a word of one group found in `text` by another of the same group."""
    lowered = text.lower()
    options = [(word, group) for group in groups for word in group
               if word.lower() in lowered and _word_pattern(word).search(text)]
    if not options:
        return None
    word, group = rng.choice(options)
    return _sub_word(text, word, rng.choice([other for other in group if other.lower() != word.lower()]))


def change_number(text: str, rng: random.Random) -> str | None:
    numbers = re.findall(r"\d+", text)
    if not numbers:
        return None
    old = rng.choice(numbers)
    new = str(max(1, int(old) + rng.choice((-2, -1, 1, 1, 2, 5, 10)) * max(1, int(old) // 5)))
    return re.sub(rf"\b{old}\b", new, text, count=1) if new != old else None


def change_date(text: str, rng: random.Random) -> str | None:
    return _swap_from(text, (lex.WEEKDAYS, lex.MONTHS, lex.RELATIVE_DAYS), rng)


def change_entity(text: str, rng: random.Random, vocab: Vocabulary) -> str | None:
    present = [(name, cls) for cls, names in vocab.entities.items() for name in names if name in text]
    if len(present) >= 2 and rng.random() < 0.5:  # swap the order of two entities
        (first, _), (second, _) = present[:2]
        return text.replace(first, "\0").replace(second, first).replace("\0", second)
    return _swap_from(text, tuple(vocab.entities.values()), rng)


def change_scope(text: str, rng: random.Random, vocab: Vocabulary) -> str | None:
    """Swap a scope word (all/some, before/after...), or narrow the question with 'only' before a name,
    a day or a number."""
    swapped = _swap_from(text, tuple(vocab.scope_swaps), rng)
    if swapped is not None and rng.random() < 0.6:
        return swapped
    names = [*lex.WEEKDAYS, *lex.MONTHS, *(n for names in vocab.entities.values() for n in names)]
    marks = [m.start() for m in re.finditer(r"\b\d+\b", text)] + [text.find(n) for n in names if n in text]
    if not marks:
        return None
    at = rng.choice(marks)
    return text[:at] + rng.choice(("only ", "just ", "all ", "except ")) + text[at:]


def paraphrase_by_synonym(text: str, rng: random.Random, vocab: Vocabulary) -> str | None:
    return _swap_from(text, vocab.synonyms, rng)


def near_repeat(text: str, rng: random.Random) -> str:
    """The same question typed differently: filler words, case, punctuation or one typo."""
    choice = rng.randrange(5)
    if choice == 0:
        return f"{rng.choice(lex.FILLERS_BEFORE)} {text[:1].lower()}{text[1:]}"
    if choice == 1:
        return f"{text.rstrip('?')}? {rng.choice(lex.FILLERS_AFTER)}"
    if choice == 2:
        return text.lower().rstrip("?")
    if choice == 3:
        words = text.split()
        i = rng.randrange(len(words))
        word = words[i]
        if len(word) > 4 and word.isalpha():
            j = rng.randrange(1, len(word) - 2)
            words[i] = word[:j] + word[j + 1] + word[j] + word[j + 2:]
        return " ".join(words)
    return text.replace("?", " ?") if rng.random() < 0.5 else text.upper() if len(text) < 40 else text + "??"


Trap = Callable[[str, random.Random, Vocabulary], "str | None"]
TRAPS: dict[str, Trap] = {
    "negation": negate,
    "antonym": lambda t, r, v: _swap_from(t, v.antonyms, r),
    "entity": change_entity,
    "number": lambda t, r, v: change_number(t, r),
    "date": lambda t, r, v: change_date(t, r),
    "unit": lambda t, r, v: _swap_from(t, v.units, r),
    "scope": change_scope,
}


def fill(form: str, rng: random.Random, vocab: Vocabulary) -> tuple[str, dict[str, str]]:
    """A form with its slots filled; the fillers are returned to fill the template's other forms alike."""
    cities = rng.sample(vocab.entities["city"], 2)
    people = rng.sample(vocab.entities["person"], 2)
    slots = {"city": cities[0], "city2": cities[1], "person": people[0], "person2": people[1],
             "product": rng.choice(vocab.entities["product"]), "language": rng.choice(vocab.entities["language"]),
             "company": rng.choice(vocab.entities["company"]), "day": rng.choice(lex.WEEKDAYS),
             "month": rng.choice(lex.MONTHS), "n": str(rng.choice((2, 3, 4, 5, 7, 10, 12, 14, 20, 30, 50, 100, 200))),
             "s": ""}
    return form.format(**slots), slots


def _scope_insert(form: str, slots: dict[str, str], rng: random.Random) -> str | None:
    if "{s}" not in form:
        return None
    return form.format(**(slots | {"s": rng.choice(lex.SCOPE_INSERTS[:3]) + " "}))


def _template_pairs(index: int, forms: tuple[str, ...], rng: random.Random, vocab: Vocabulary,
                    split: str) -> Iterator[PairExample]:
    base_form = rng.choice(forms)
    base, slots = fill(base_form, rng, vocab)
    for other in forms:
        if other != base_form and rng.random() < 0.6:
            yield PairExample(base, other.format(**slots), "paraphrase", split)
    synonym = paraphrase_by_synonym(base, rng, vocab)
    if synonym is not None:
        yield PairExample(base, synonym, "synonym", split)
    yield PairExample(base, near_repeat(base, rng), "near_repeat", split)
    for kind, trap in TRAPS.items():
        # A trap applied to a paraphrase of the base, half of the time: the verifier must see
        # the changed meaning through a changed wording too.
        source = rng.choice(forms).format(**slots) if rng.random() < 0.5 else base
        changed = trap(source, rng, vocab)
        if kind == "scope" and changed is None:
            changed = _scope_insert(base_form, slots, rng)
        if changed is not None and changed.lower() != source.lower():
            yield PairExample(base, changed, kind, split)


def generate_pairs(split: str, *, rounds: int = 16, per_kind: int = 300, seed: int = 0) -> list[PairExample]:
    """Pairs of one split ('train' or 'calibration'), `rounds` fillings of each of its templates, at
    most `per_kind` of each kind (the first ones: a balance, not a loss of variety)."""
    rng = random.Random(f"{seed}-{split}")
    vocab = Vocabulary.of(split)
    chosen = [i for i, forms in enumerate(TEMPLATES) if lex.split_of(forms) == split]
    pairs: list[PairExample] = []
    for _ in range(rounds):
        for index in chosen:
            pairs.extend(_template_pairs(index, TEMPLATES[index], rng, vocab, split))
        for left, right in TOPIC_NEIGHBOURS:
            if left in chosen and right in chosen:
                a, slots = fill(rng.choice(TEMPLATES[left]), rng, vocab)
                pairs.append(PairExample(a, rng.choice(TEMPLATES[right]).format(**slots), "topic", split))
    rng.shuffle(pairs)
    kept: list[PairExample] = []
    counts: dict[str, int] = {}
    for pair in pairs:
        if pair.a != pair.b and counts.get(pair.kind, 0) < per_kind:
            counts[pair.kind] = counts.get(pair.kind, 0) + 1
            kept.append(pair if rng.random() < 0.5 else PairExample(pair.b, pair.a, pair.kind, split))
    return kept
