"""Masking personal data before a request is written to a debug trace (seed §4.5).

Defaults cover e-mail addresses, phone numbers and payment card numbers; operators add
their own regular expressions through settings. Masks keep the kind of thing that was
there ("<email>"), which keeps traces readable without keeping the data.
"""

import re
from collections.abc import Sequence
from dataclasses import dataclass

DEFAULT_RULES: tuple[tuple[str, str], ...] = (
    ("email", r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}"),
    # Card numbers before phones: 13-19 digits in groups, which a phone pattern would also eat.
    ("card", r"\b(?:\d[ -]?){12,18}\d\b"),
    ("phone", r"(?<![\w])[+(]?\d[\d ().-]{6,}\d\b"),
)


@dataclass(frozen=True)
class Redactor:
    rules: tuple[tuple[str, re.Pattern[str]], ...]

    @classmethod
    def with_defaults(cls, extra_patterns: Sequence[str] = ()) -> "Redactor":
        rules = [(name, re.compile(pattern)) for name, pattern in DEFAULT_RULES]
        rules += [("redacted", re.compile(pattern)) for pattern in extra_patterns]
        return cls(tuple(rules))

    def __call__(self, text: str) -> str:
        for name, pattern in self.rules:
            text = pattern.sub(f"<{name}>", text)
        return text
