"""Related entities: things of one kind whose answers differ although their sentences do not.

"My fridge is buzzing" and "my freezer is buzzing" embed a hair apart, and so do "move my
Chrome bookmarks to Firefox" and "move my Firefox bookmarks to Chrome": the one word that
changes the answer is a sibling of the other (two appliances, two browsers), and a
cross-encoder trained on generated pairs reads such a swap as a paraphrase about as often as
not. Two rules, over groups of siblings:

- **swapped sibling**: both texts name members of one group, and not the same members;
- **swapped roles**: both texts link the same two members of one group by a direction, each
  the other way ("from savings to checking" vs "from checking to savings", "Chrome bookmarks
  in Firefox" vs "Firefox bookmarks in Chrome"); two members merely listed ("a credit card, or
  is a debit card OK?" vs "a debit card instead of a credit card") are not a swap.

A text that names no member of a group says nothing about it ("my fridge is buzzing" against
"my appliance is buzzing" passes: the verifier decides). Capitalised members (Word, Edge,
Teams) match only as written, so the everyday words do not count. The groups are data, per
language: "related_entities" in data/guard-words/<language>.json.

The guard errs towards refusing: a paraphrase that names a sibling for its own sake ("my
jacket" for "my coat" is spelled as one member; "laptop" for "tablet" is not) costs a cache
hit, never a wrong answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

from workers.cache.guard_words import WORDS


@dataclass(frozen=True)
class Mention:
    group: int
    member: str
    at: int


@dataclass(frozen=True)
class Mentions:
    """The members a text names, in the order they first appear, and which of them it links
    with a direction ("from savings to checking", "Chrome bookmarks in Firefox")."""

    named: tuple[Mention, ...]
    directed: frozenset[tuple[int, str, str]]


def mentions(text: str) -> Mentions:
    found: dict[tuple[int, str], Mention] = {}
    spans: list[tuple[Mention, int]] = []
    for pattern, members in _matchers():
        for match in pattern.finditer(text):
            if any(mention.at < match.end() and match.start() < end for mention, end in spans):
                continue
            body = _spelling(match.group("body"))
            group, name = members.get(body) or members[body.lower()]
            mention = Mention(group, name, match.start())
            spans.append((mention, match.end()))
            found.setdefault((group, name), mention)
    spans.sort(key=lambda item: item[0].at)
    directed = frozenset(
        (first.group, first.member, second.member)
        for (first, first_end), (second, _) in zip(spans, spans[1:])
        if first.group == second.group and first.member != second.member
        and _DIRECTION.fullmatch(text[first_end:second.at])
    )
    return Mentions(tuple(sorted(found.values(), key=lambda mention: mention.at)), directed)


def related_conflict(a: Mentions, b: Mentions) -> str | None:
    """Why two texts' mentions say they need different answers, or None."""
    for group in {m.group for m in a.named} & {m.group for m in b.named}:
        in_a = {m.member for m in a.named if m.group == group}
        in_b = {m.member for m in b.named if m.group == group}
        if in_a != in_b:
            return f"related entities differ: {sorted(in_a ^ in_b)}"
    for group, first, second in a.directed:
        if (group, second, first) in b.directed and (group, first, second) not in b.directed:
            return f"roles swapped: {first} -> {second} in one text, {second} -> {first} in the other"
    return None


# What may stand between two members for the text to read as going from the first to the second:
# a few words at most, one of them a direction word, or a place word between two named things
# ("Chrome bookmarks in Firefox"). No such words in any language file: nothing reads as directed.
_DIRECTION_WORDS = "|".join(sorted(WORDS.direction_words | WORDS.related_place_words)) or "(?!)"
_DIRECTION = re.compile(rf"(?:\W+\w+){{0,3}}?\W+(?:{_DIRECTION_WORDS})(?:\W+\w+){{0,3}}?\W+", re.IGNORECASE)


def _spelling(text: str) -> str:
    return re.sub(r"[\s-]+", " ", text)


@cache
def _matchers() -> tuple[tuple[re.Pattern[str], dict[str, tuple[int, str]]], ...]:
    """One alternation for the lower-case members (any case) and one for the capitalised ones."""
    any_case: dict[str, tuple[int, str]] = {}
    as_written: dict[str, tuple[int, str]] = {}
    for group, members in enumerate(WORDS.related_entities):
        for member in members:
            name = member.split("|")[0].lower()
            for spelling in member.split("|"):
                cased = any(ch.isupper() for ch in spelling)
                table = as_written if cased else any_case
                table[_spelling(spelling if cased else spelling.lower())] = (group, name)
    return (_alternation(any_case, re.IGNORECASE), any_case), (_alternation(as_written, 0), as_written)


def _alternation(spellings: dict[str, tuple[int, str]], flags: int) -> re.Pattern[str]:
    # Longest first: at one position "savings account" wins over "savings".
    bodies = (r"[\s-]+".join(re.escape(part) for part in spelling.split()) for spelling in
              sorted(spellings, key=len, reverse=True))
    return re.compile(rf"(?<![\w-])(?P<body>{'|'.join(bodies)})(?:s|es)?(?![\w-])", flags)
