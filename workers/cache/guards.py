"""Guards of the semantic cache: pairs of texts that must never share an answer, however close
their embeddings are.

Sentence embeddings put "enable 2FA" next to "disable 2FA" and "7 am" next to "7 pm": the
words that flip the answer are a small part of the sentence. A threshold alone cannot tell
them apart without also refusing most real paraphrases, so a semantic hit must also pass
`meaning_conflict(query, cached_text) is None`. The checks, in order:

- identifiers: e-mail addresses, URLs and tokens mixing letters and digits (order ids,
  tracking numbers) must be the same sets;
- numbers: digits (``1,000`` = ``1000`` = ``1k``; ``10.00`` = ``10``), number words
  ("twenty five", "a hundred", "twice"), ordinals ("3rd", "third"), Chinese numerals
  (三 = 3, 两百 = 200, 二〇二四 = 2024: "3天" and "三天" agree, "两件" and "三件" do not) and
  times of day with am/pm ("7 am" = "7:00 a.m." but != "7 pm"; noon, midnight) must be the same sets;
- negation: a negation ("not", "n't", "never", "no", "without", "unable", ...) in one text
  and none in the other, or a word negated by its prefix ("authorized" vs "unauthorized",
  "eligible" vs "ineligible");
- opposites: one text uses one side of an opposite pair (enable/disable, add/remove,
  cancel/renew, in/out, before/after, safe/avoid, ...) that the other lacks while the other
  uses the other side ("turn on"/"turn off", "log in"/"log out" are folded into these first);
- proper nouns: a capitalised word that is not at the start of a sentence, or a word with
  inner capitals or an acronym (PayPal, iPhone, UK), whose lower-case form the other text
  does not contain at all;
- meaning-critical vocabulary: countries, currencies, payment brands, carriers, platforms,
  months, weekdays and relative days must be the same sets; account fields (password,
  e-mail, phone...), plans, shipping speeds and billing periods must be the same sets when
  both texts name one;
- related entities (`related_entities.py`): two siblings of one kind ("fridge" vs "freezer"),
  or the same two in the other order ("from savings to checking" vs "from checking to savings");
- swapped roles (`role_swap.py`): any two shared words on the other sides of a direction word
  ("merge develop into main" vs "merge main into develop").

Limits (what it cannot catch, by design cheap: regex and sets, no parser, no model):
- a meaning change carried by an ordinary word outside these lists ("reset my password"
  vs "reset my PIN" is caught; "return a shirt" vs "return a sofa" is not);
- negation scope: "I can log in but not pay" vs "I can pay but not log in" both negate;
  two negations that cancel count as a negation;
- paraphrases that swap a listed word for an unlisted synonym ("turn on 2FA" vs "set up
  two-step login" pass; "my order did not arrive" vs "my order is missing" is refused):
  the guard errs towards refusing, which costs a cache hit, never a wrong answer;
- the words are English (and Chinese numerals): a language without a file in
  data/guard-words/ gets only the rules that hold in every language (identifiers, digits,
  times, units, currency symbols, proper nouns by their capitals); lower-case proper nouns
  outside the lists ("paypal") are only caught through the lists.

The rules are here; the words each rule reads are data, one file per language
(data/guard-words/<language>.json, read by guard_words.py). `conflicts` names every check that
refuses a pair, which is what `fleet cache-eval --by-guard` weighs each check by.

Where a verifier decides, only the checks in BEFORE_VERIFIER run before it (`verified_conflict`):
on the held-out pair sets the others stopped no trap the verifier would have served, and cost
should-hits (`fleet cache-eval --by-guard`, 2026-12-07: honest sets 5-7 lost 26 of 160, set 40 14
of 90, negation, proper nouns and numbers first). Every check still runs where the cosine decides alone.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from workers.cache.guard_words import WORDS
from workers.cache.related_entities import Mentions, mentions, related_conflict
from workers.cache.role_swap import Link, links, roles_conflict

# What reads the same in every language stays here: symbols, digits, times, units. The words each
# rule reads are WORDS, one data file per language (guard_words.py).
CURRENCY_SYMBOLS = {"$": "usd", "€": "eur", "£": "gbp", "¥": "jpy"}
UNITS = {"": 1, "k": 1000, "m": 1_000_000, "bn": 1_000_000_000}
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_URL = re.compile(r"https?://\S+|www\.\S+")
_AMPM = re.compile(r"\b([ap])\.?\s?m\b\.?")
_TIME = re.compile(r"\b(\d{1,2})(?::(\d{2}))?\s*([ap])m\b|\b(\d{1,2}):(\d{2})\b")
_TOKEN = re.compile(r"[a-z0-9]+(?:[.,'][a-z0-9]+)*|[$€£¥]")
_NUMBER = re.compile(r"(\d+(?:,\d{3})*(?:\.\d+)?)(k|m|bn|st|nd|rd|th|x|gb|mb|tb|kb|h|hr|hrs|d|min|mins|pcs|)")
_WORD = re.compile(r"\b[A-Za-z][A-Za-z0-9&]*(?:'[A-Za-z]+)?")


@dataclass(frozen=True)
class Features:
    """What the guard compares, extracted once per text."""

    identifiers: frozenset[str]
    numbers: frozenset[str]
    negated: bool
    words: frozenset[str]  # lower-case words after folding phrases ("log in" -> "login")
    spelled: frozenset[str]  # lower-case words as written, for the proper-noun check
    proper: frozenset[str]
    related: Mentions
    roles: tuple[Link, ...]


def meaning_conflict(a: str, b: str) -> str | None:
    """A reason why `a` and `b` must not share an answer, or None when the guard finds none."""
    return conflict_between(features(a), features(b))


def conflict_between(fa: Features, fb: Features) -> str | None:
    """The first check's reason, in `CHECKS` order, or None."""
    return next((reason for _, reason in conflicts(fa, fb)), None)


def conflicts(fa: Features, fb: Features) -> Iterator[tuple[str, str]]:
    """(check name, reason) for every check that refuses the pair, in `CHECKS` order: which checks
    would still refuse a pair without any one of them (`fleet cache-eval --by-guard`)."""
    for name, check in CHECKS:
        reason = check(fa, fb)
        if reason:
            yield name, reason


Check = Callable[[Features, Features], str | None]


def _identifiers(fa: Features, fb: Features) -> str | None:
    return f"identifiers differ: {_diff(fa.identifiers, fb.identifiers)}" if fa.identifiers != fb.identifiers else None


def _numbers(fa: Features, fb: Features) -> str | None:
    return f"numbers differ: {_diff(fa.numbers, fb.numbers)}" if fa.numbers != fb.numbers else None


def _negation(fa: Features, fb: Features) -> str | None:
    return "negation in one text only" if fa.negated != fb.negated else None


def _negating_prefix(fa: Features, fb: Features) -> str | None:
    prefixed = _negated_by_prefix(fa.words - fb.words, fb.words - fa.words)
    return f"negating prefix: {prefixed}" if prefixed else None


def _opposites(fa: Features, fb: Features) -> str | None:
    # One side in one text and the other side in the other, each missing from the other text;
    # a text using both sides ("log in or log out") says nothing about which it means.
    for left, right in WORDS.opposites:
        a_left, a_right, b_left, b_right = fa.words & left, fa.words & right, fb.words & left, fb.words & right
        if (a_left - fb.words and b_right - fa.words and not a_right and not b_left) or \
                (a_right - fb.words and b_left - fa.words and not a_left and not b_right):
            return f"opposites: {sorted(a_left | a_right)} vs {sorted(b_left | b_right)}"
    return None


def _proper_noun(fa: Features, fb: Features) -> str | None:
    for proper, other in ((fa.proper, fb), (fb.proper, fa)):
        missing = proper - other.words - other.spelled
        if missing:
            return f"proper noun in one text only: {sorted(missing)}"
    return None


def _critical(kind: str, vocabulary: frozenset[str]) -> Check:
    """The words of `vocabulary` the texts name must be the same: naming one in one text only
    (a country, a month) is already a different question."""
    def check(fa: Features, fb: Features) -> str | None:
        a_named, b_named = fa.words & vocabulary, fb.words & vocabulary
        return f"{kind} differs: {_diff(a_named, b_named)}" if a_named != b_named else None
    return check


def _exclusive(kind: str, vocabulary: frozenset[str]) -> Check:
    """The same, but only when both texts name one: "my email" vs "my phone number" differ, while
    a text that names no account field says nothing about which."""
    def check(fa: Features, fb: Features) -> str | None:
        a_named, b_named = fa.words & vocabulary, fb.words & vocabulary
        return f"{kind} differs: {_diff(a_named, b_named)}" if a_named and b_named and a_named != b_named else None
    return check


def _related(fa: Features, fb: Features) -> str | None:
    return related_conflict(fa.related, fb.related)


def _roles(fa: Features, fb: Features) -> str | None:
    return roles_conflict(fa.roles, fb.roles)


CHECKS: tuple[tuple[str, Check], ...] = (
    ("identifiers", _identifiers),
    ("numbers", _numbers),
    ("negation", _negation),
    ("negating prefix", _negating_prefix),
    ("opposites", _opposites),
    ("proper noun", _proper_noun),
    *((f"critical:{kind}", _critical(kind, vocabulary)) for kind, vocabulary in WORDS.critical.items()),
    *((f"exclusive:{kind}", _exclusive(kind, vocabulary)) for kind, vocabulary in WORDS.exclusive.items()),
    ("related entities", _related),
    ("roles", _roles),
)


# Each stopped a trap the verifier served and no other check refused, on a held-out set
# (numbers, a relative day and a sibling entity in sets 32-33); identifiers cost nothing anywhere.
BEFORE_VERIFIER = frozenset({"identifiers", "numbers", "critical:day", "related entities"})
_VERIFIER_CHECKS = tuple((name, check) for name, check in CHECKS if name in BEFORE_VERIFIER)


def verified_conflict(a: str, b: str) -> str | None:
    """`meaning_conflict` with only the checks that earn their place in front of a verifier."""
    fa, fb = features(a), features(b)
    return next((reason for _, check in _VERIFIER_CHECKS if (reason := check(fa, fb))), None)


def features(text: str) -> Features:
    text = unicodedata.normalize("NFKC", text).replace("\u2019", "'").replace("\u2018", "'")
    identifiers = {m.lower() for m in _EMAIL.findall(text)} | {m.lower().rstrip(".,!?") for m in _URL.findall(text)}
    text = _URL.sub(" ", _EMAIL.sub(" ", text))
    proper = _proper_nouns(text)
    lower = _AMPM.sub(lambda m: f" {m.group(1)}m ", text.lower())
    for name, time in WORDS.times_of_day.items():
        lower = re.sub(rf"\b{re.escape(name)}\b", f" {time} ", lower)
    for pattern, replacement in WORDS.phrases:
        lower = re.sub(pattern, f" {replacement} ", lower)
    numbers: set[str] = set()
    lower = _TIME.sub(lambda m: _time(m, numbers), lower)
    words: list[str] = []
    for token in _TOKEN.findall(lower.replace("-", " ")):
        if token in CURRENCY_SYMBOLS:
            words.append(CURRENCY_SYMBOLS[token])
        elif token[0].isdigit() or any(ch.isdigit() for ch in token):
            number = _NUMBER.fullmatch(token)
            if number:
                numbers.add(_canonical_number(number.group(1), UNITS.get(number.group(2), 1)))
            else:
                identifiers.add(token)
        else:
            words.append(WORDS.currency_words.get(token, token))
    numbers |= _number_words(words) | _character_numbers(text)
    word_set = frozenset(w.replace("'", "") for w in words) | frozenset(words)
    negated = any(w in WORDS.negations or w.endswith(WORDS.negating_suffixes) for w in word_set)
    spelled = frozenset(w.lower() for w in _WORD.findall(text))
    return Features(frozenset(identifiers), frozenset(numbers), negated, word_set, spelled, frozenset(proper),
                    mentions(text), links(text))


def _negated_by_prefix(only_a: frozenset[str], only_b: frozenset[str]) -> str | None:
    """A word in one text that is the other's word with a negating prefix ("authorized" vs
    "unauthorized", "eligible" vs "ineligible", "refundable" vs "non-refundable")."""
    for words, others in ((only_a, only_b), (only_b, only_a)):
        for word in words:
            for prefix in WORDS.negating_prefixes:
                if word.startswith(prefix) and len(word) - len(prefix) >= 4 and word[len(prefix):] in others:
                    return f"{word!r} vs {word[len(prefix):]!r}"
    return None


def _proper_nouns(text: str) -> set[str]:
    found: set[str] = set()
    for match in _WORD.finditer(text):
        word = match.group().split("'")[0]
        if word in WORDS.not_proper_nouns or len(word) < 2:
            continue
        before = text[:match.start()].rstrip()
        sentence_start = not before or before[-1] in ".!?:;\"(\n"
        inner_caps = any(ch.isupper() for ch in word[1:])
        if inner_caps or (word[0].isupper() and not sentence_start):
            found.add(word.lower())
    return found


def _time(match: re.Match[str], numbers: set[str]) -> str:
    if match.group(1):
        hour, minute, half = int(match.group(1)), int(match.group(2) or 0), match.group(3)
        numbers.add(f"{hour % 12 or 12}:{minute:02d}{half}m")
    else:
        numbers.add(f"{int(match.group(4))}:{int(match.group(5)):02d}")
    return " "


def _canonical_number(digits: str, scale: int) -> str:
    try:
        value = Decimal(digits.replace(",", "")) * scale
    except InvalidOperation:
        return digits
    return format(value.normalize(), "f")


def _number_words(words: list[str]) -> set[str]:
    """Values of runs of number words ("twenty five" -> 25, "a hundred" -> 100); a lone "one"
    is a pronoun far more often than a count, so it is not a number."""
    small, scales, joiners = WORDS.number_words, WORDS.number_scales, WORDS.number_joiners
    found: set[str] = set()
    run: list[str] = []
    for word in [*words, ""]:
        if word in small or word in scales or (run and word in joiners):
            run.append(word)
            continue
        while run and run[-1] in joiners:
            run.pop()
        if run and not (len(run) == 1 and run[0] in WORDS.not_a_count_alone):
            total = current = 0
            for part in run:
                if part in scales:
                    if scales[part] == 100:  # "two hundred thousand": a hundred multiplies, the rest close a section
                        current = max(current, 1) * 100
                    else:
                        total, current = total + max(current, 1) * scales[part], 0
                elif part not in joiners:
                    current += small[part]
            found.add(str(total + current))
        run = []
    return found


_NUMERAL_CHARACTERS = "".join([*WORDS.numeral_digits, *WORDS.numeral_units])
# No language file with numeral characters: a pattern that never matches (an empty class is no regex).
_NUMERAL_RUN = re.compile(f"[{_NUMERAL_CHARACTERS}]+" if _NUMERAL_CHARACTERS else r"(?!)")


def _character_numbers(text: str) -> set[str]:
    """Values of runs of numerals written as characters ("三" -> 3, "两百" -> 200, "二〇二四" -> 2024).
    A lone 一 is "a", "once" or "the same" (一下, 一起, 一样) far more often than a count, as a lone
    "one" is."""
    return {str(_numeral_value(run)) for run in _NUMERAL_RUN.findall(text) if run not in WORDS.not_a_count_alone}


def _numeral_value(run: str) -> int:
    digits, units = WORDS.numeral_digits, WORDS.numeral_units
    if not any(ch in units for ch in run):
        return int("".join(str(digits[ch]) for ch in run))  # digit by digit: a year, a code
    total = section = number = 0
    for ch in run:
        if ch in digits:
            number = digits[ch]
        elif (unit := units[ch]) >= 10_000:  # 万, 亿 multiply everything before them
            total, section = total + (section + number) * unit, 0
            number = 0
        else:
            section, number = section + (number or 1) * unit, 0
    return total + section + number


def _diff(a: frozenset[str] | set[str], b: frozenset[str] | set[str]) -> str:
    return f"{sorted(a - b)} vs {sorted(b - a)}"
