"""Masking personal data before a request is written to a debug trace or a dead letter (seed §4.5).

Defaults cover e-mail addresses, phone numbers and payment card numbers; operators add their own
regular expressions through settings. Masks keep the kind of thing that was there ("<email>"),
which keeps traces readable without keeping the data.

Redaction runs on untrusted text, so it must stay linear: the text is cut to `max_chars` first,
and digit runs (phones, cards) are found by one pass of a regex that cannot backtrack over a run
(a run is matched whole, then judged in Python) instead of patterns with nested repetition that
go quadratic on a long string of digits and spaces.
"""

import re
from collections.abc import Sequence
from dataclasses import dataclass

DEFAULT_MAX_CHARS = 4096
EMAIL = re.compile(r"[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63}){1,8}")
# A run of digits and the separators people write numbers with; possessive, so a run is read once.
DIGIT_RUN = re.compile(r"(?<![\w])[+(]?\d(?:[\d ().-]*+)")
CARD_DIGITS = range(13, 20)
PHONE_MIN_DIGITS = 8


def _mask_digit_run(match: re.Match[str]) -> str:
    run = match.group(0)
    body = run.rstrip(" ().-")
    tail = run[len(body):]
    digits = sum(ch.isdigit() for ch in body)
    if digits in CARD_DIGITS and set(body) <= set("0123456789 -"):
        return "<card>" + tail
    if digits >= PHONE_MIN_DIGITS:
        return "<phone>" + tail
    return run


@dataclass(frozen=True)
class Redactor:
    extra: tuple[re.Pattern[str], ...] = ()
    max_chars: int = DEFAULT_MAX_CHARS

    @classmethod
    def with_defaults(cls, extra_patterns: Sequence[str] = (), max_chars: int = DEFAULT_MAX_CHARS) -> "Redactor":
        return cls(tuple(re.compile(pattern) for pattern in extra_patterns), max_chars)

    def __call__(self, text: str) -> str:
        cut = len(text) > self.max_chars
        text = EMAIL.sub("<email>", text[: self.max_chars])
        text = DIGIT_RUN.sub(_mask_digit_run, text)
        for pattern in self.extra:
            text = pattern.sub("<redacted>", text)
        return text + (f"... <{len(text)}+ characters cut>" if cut else "")
