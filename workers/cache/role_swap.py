"""Swapped roles: the same things on the other side of a direction.

"Merge develop into main" and "merge main into develop", "switch from prepaid to a contract"
and "from a contract to prepaid", "dog food for a cat" and "cat food for a dog" share every
word, so their embeddings are nearly equal, and the verifier (which reads both texts but was
trained mostly on word changes) scores such pairs as the same question. Here each text's
direction words (from, to, into, for, than, ...) are read with the few content words just
before and just after them; when both texts use one direction word, and a word before it in
one stands after it in the other and the other way round, the roles are swapped. Clauses
that merely move ("I moved to another town, how can I sign up to vote?" / "how do I register
to vote after moving to a new town?") keep each word on its own side of its direction word.
The direction and stop words are data, per language: "direction_words" and "role_stop_words" in
data/guard-words/<language>.json.
"""

from __future__ import annotations

import re

from workers.cache.guard_words import WORDS

_TOKEN = re.compile(r"[a-z0-9]+(?:'[a-z]+)?|[^\sa-z0-9]")
_REACH = 3  # content words read on each side of a direction word


Link = tuple[str, frozenset[str], frozenset[str]]


def links(text: str) -> tuple[Link, ...]:
    """(direction word, the content words just before it, those just after) per direction word."""
    tokens = _TOKEN.findall(text.casefold())
    return tuple((token, _phrase(tokens[i - 1::-1] if i else []), _phrase(tokens[i + 1:]))
                 for i, token in enumerate(tokens) if token in WORDS.direction_words)


def roles_conflict(a: tuple[Link, ...], b: tuple[Link, ...]) -> str | None:
    """A direction word both texts use, with a word before it in one text after it in the other
    and a word after it in one before it in the other; or None."""
    for word, before_a, after_a in a:
        for other, before_b, after_b in b:
            if word == other and before_a & after_b and after_a & before_b:
                return f"roles swapped around {word!r}: {sorted(before_a & after_b)} and {sorted(after_a & before_b)}"
    return None


def swapped_roles(a: str, b: str) -> str | None:
    return roles_conflict(links(a), links(b))


def _phrase(tokens: list[str]) -> frozenset[str]:
    found: list[str] = []
    for token in tokens:
        if token in WORDS.direction_words or not token[0].isalnum() or len(found) == _REACH:
            break
        if token not in WORDS.role_stop_words:
            found.append(_stem(token))
    return frozenset(found)


def _stem(word: str) -> str:
    word = word.removesuffix("'s")
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word
